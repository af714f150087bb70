"""`nodus create inferenceendpoint`, `nodus stop` and `nodus start`: endpoints from flags, and stopping one.

Who calls it: `nodus.cli.main` registers the commands. `create inferenceendpoint NAME --model ... --rpm --tpm
--max-concurrent --max-cost --allowed-key` compiles its flags into an InferenceEndpoint document, validates it like a
file, and applies it through apply's path (the apply lease, admission: a model id the table lacks is refused before
anything is written), touching no other resource; `--wait` follows it until Running. `stop ep/NAME` and
`start ep/NAME` patch its `spec.state` (Stopped: it answers 503 until started) through `nodus patch`'s path. Without
`--wait` nothing more is needed: once its model answers, its service's supervisor refreshes its status (Running) and
the gateway routes to it (`controllers/endpoint.report_of`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from nodus.cli.console import err_line, line
from nodus.cli.jobs import patch_resource
from nodus.cli.resources import split_target
from nodus.errors import ConfigError
from nodus.reconciler.project import Project
from nodus.reconciler.state.records import DEFAULT_PROJECT, ResourceKey

SERVICE_KINDS = ("InferenceEndpoint",)


@click.group("create")
def create_group() -> None:
    """Create a resource from flags, with no file to write first."""


@create_group.command("inferenceendpoint")
@click.argument("name")
@click.option("--model", required=True, help="A model id of the model table (nodus/tiny-qwen3, nodus/gpt-oss-120b).")
@click.option("--rpm", type=int, help="Requests per minute it admits.")
@click.option("--tpm", type=int, help="Tokens per minute it admits.")
@click.option("--max-concurrent", type=int, help="Requests in flight at once.")
@click.option("--max-cost", help='Its spending cap in US dollars, e.g. "50"; past it: 402 BudgetExceeded.')
@click.option(
    "--allowed-key", "allowed_keys", multiple=True, help="An API key name it takes; may repeat (default: any)."
)
@click.option("-n", "--project", "namespace", help="The nodus project (default: default).")
@click.option("--wait/--no-wait", default=False, help="Follow it until it serves (exit 1 unless Running).")
@click.option("--timeout", default="10m", show_default=True, help="With --wait: how long to follow it.")
@click.option("--path", type=click.Path(exists=True, file_okay=False, path_type=Path), help="Project folder.")
@click.option("--state", help="State store: a SQLite path or postgresql://... (default: .nodus/state.db).")
def create_endpoint(
    name: str,
    model: str,
    rpm: int | None,
    tpm: int | None,
    max_concurrent: int | None,
    max_cost: str | None,
    allowed_keys: tuple[str, ...],
    namespace: str | None,
    wait: bool,
    timeout: str,
    path: Path | None,
    state: str | None,
) -> None:
    """Create the InferenceEndpoint NAME serving MODEL.

    \b
    nodus create inferenceendpoint support-bot --model nodus/gpt-oss-120b --rpm 120 --max-concurrent 8 --max-cost 50
    """
    from nodus.cli.plan_apply import one_line, wait_for
    from nodus.reconciler.apply import ApplyOptions, apply_plan
    from nodus.reconciler.planning.desired import desired_from
    from nodus.reconciler.planning.diff import CREATED_BY, NODUS_CREATE, Plan, plan
    from nodus.reconciler.state.records import StateStore
    from nodus.specs.parse import parse_text

    spec: dict[str, object] = {"model": model}
    for field, value in (("rpm", rpm), ("tpm", tpm), ("maxConcurrent", max_concurrent), ("maxCostUSD", max_cost)):
        if value is not None:
            spec[field] = value
    if allowed_keys:
        spec["allowedKeys"] = list(allowed_keys)
    metadata: dict[str, object] = {"name": name, "labels": {CREATED_BY: NODUS_CREATE}}
    if namespace:
        metadata["project"] = namespace
    document = {"apiVersion": "nodus.dev/v1", "kind": "InferenceEndpoint", "metadata": metadata, "spec": spec}
    parsed = parse_text(json.dumps(document), "flags")
    if parsed.errors:
        raise ConfigError(_flag_error(str(parsed.errors[0])))
    (desired,) = desired_from(parsed.resources)
    key = desired.key
    project = Project.find(path or Path.cwd(), state=state)

    def make_plan(store: StateStore) -> Plan:
        if store.get(key) is not None:
            raise ConfigError(
                f"InferenceEndpoint/{name} exists already in project {key.project}",
                hint=f"change it with nodus patch ep/{name}, or remove it with nodus delete ep/{name}",
            )
        return plan([desired], [])

    store = project.open_state()
    try:
        _, report = apply_plan(
            make_plan,
            project=project,
            store=store,
            options=ApplyOptions(keep_going=True),
            reporter=lambda resource, message: err_line(f"{resource}: {message}"),
            operation=f"create {key}",
        )
        if report.failed:
            err_line("Create failed: " + "; ".join(one_line(f"{k}: {r}: {m}") for k, r, m in report.failed))
            sys.exit(1)
        line(name)
        unfinished = wait_for(project, store, [key], timeout) if wait else []
    finally:
        store.close()
    if unfinished:
        err_line("Wait failed: " + "; ".join(one_line(outcome.line()) for outcome in unfinished))
        sys.exit(1)


def _flag_error(problem: str) -> str:
    """A problem of the document the flags made, said of the flag (`--rpm: must be at least 1`)."""
    flags = {
        "spec.model": "--model",
        "spec.rpm": "--rpm",
        "spec.tpm": "--tpm",
        "spec.maxConcurrent": "--max-concurrent",
    }
    flags |= {"spec.maxCostUSD": "--max-cost", "spec.allowedKeys": "--allowed-key", "metadata.name": "NAME"}
    for field, flag in flags.items():
        if f" {field}" in problem:
            return f"{flag}: " + problem.split(f"{field}: ", 1)[-1]
    return problem


def _service_key(target: str, namespace: str | None, verb: str) -> ResourceKey:
    kind, name = split_target(target)
    if name is None or kind not in SERVICE_KINDS:
        raise ConfigError(f"{verb}: {target!r} is not an endpoint", hint=f"nodus {verb} ep/NAME")
    return ResourceKey(kind, namespace or DEFAULT_PROJECT, name)


@click.command("stop")
@click.argument("target")
@click.option("-n", "--project", "namespace", default=None)
@click.option("--state", help="State store: a SQLite path or postgresql://...")
@click.option("--path", type=click.Path(path_type=Path), help="Project folder (default: found from here).")
def stop(target: str, namespace: str | None, state: str | None, path: Path | None) -> None:
    """Stop an endpoint (ep/NAME): it answers 503 until started again (spec.state: Stopped)."""
    key = _service_key(target, namespace, "stop")
    patch_resource(key, {"spec": {"state": "Stopped"}}, state=state, path=path, said="stopped")


@click.command("start")
@click.argument("target")
@click.option("-n", "--project", "namespace", default=None)
@click.option("--state", help="State store: a SQLite path or postgresql://...")
@click.option("--path", type=click.Path(path_type=Path), help="Project folder (default: found from here).")
def start(target: str, namespace: str | None, state: str | None, path: Path | None) -> None:
    """Start a stopped endpoint (ep/NAME) again (spec.state: Running)."""
    key = _service_key(target, namespace, "start")
    patch_resource(key, {"spec": {"state": "Running"}}, state=state, path=path, said="started")
