"""`nodus keys` and `nodus inference`: API keys, and calling models through the project's gateway from the terminal.

Who calls it: `nodus.cli.main` registers the groups. Keys live in the project's state store (only a sha256 of each
secret: `nodus.reconciler.inference.keys`); `keys create` prints the secret once, on stdout, for a script to keep.
`inference chat` calls the project's gateway (its own port: nodus.yaml's `inference.gateway.port`, else the one chosen
at its first start, `http://127.0.0.1:8400/v1` for the first project of a host), once its `/health` says it is this
project's (no key goes to another project's gateway), with the key in NODUS_API_KEY, as any OpenAI client would: the
answer on stdout, and on stderr the request id, the model that answered, the tokens and the charge (its receipt, from
the store). `inference models` lists what can be called (the model table and the project's endpoints, a pure read);
`inference receipt ID` shows a request's receipt for 30 days.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import click

from nodus.cli.console import err_line, line, print_json
from nodus.errors import ConfigError
from nodus.reconciler.project import Project
from nodus.reconciler.state.records import DEFAULT_PROJECT, StateStore

API_KEY_VARIABLE = "NODUS_API_KEY"
SETTLE_WAIT_S = 2.0
"""How long `chat` waits for its request's receipt to be settled (the gateway settles right after it answers)."""


def _store(path: Path | None, state: str | None) -> tuple[Project, StateStore]:
    project = Project.find(path or Path.cwd(), state=state)
    return project, project.open_state()


@click.group("keys")
def keys_group() -> None:
    """API keys for the inference gateway (only a hash of each is stored)."""


@keys_group.command("create")
@click.argument("name")
@click.option("--scope", "scopes", multiple=True, default=("inference:invoke",), show_default=True)
@click.option("-n", "--project", "namespace", default=None, help="The nodus project (default: default).")
@click.option("--state", help="State store: a SQLite path or postgresql://...")
@click.option("--path", type=click.Path(path_type=Path), help="Project folder (default: found from here).")
def keys_create(
    name: str, scopes: tuple[str, ...], namespace: str | None, state: str | None, path: Path | None
) -> None:
    """Create the key NAME and print its secret once (it is not shown again)."""
    from nodus.reconciler.inference.api import create_key

    _, store = _store(path, state)
    try:
        made = create_key(store, name, project=namespace or DEFAULT_PROJECT, scopes=scopes)
    finally:
        store.close()
    line(made.secret)
    err_line(f"key {name} created ({', '.join(scopes)}): keep the secret above, it is not shown again")
    err_line(f"  export {API_KEY_VARIABLE}=...   # for nodus inference chat and any OpenAI client", dim=True)


@keys_group.command("list")
@click.option("-n", "--project", "namespace", default=None)
@click.option("-o", "--output", type=click.Choice(["table", "json"]), default="table")
@click.option("--state", help="State store: a SQLite path or postgresql://...")
@click.option("--path", type=click.Path(path_type=Path), help="Project folder (default: found from here).")
def keys_list(namespace: str | None, output: str, state: str | None, path: Path | None) -> None:
    """List the keys (names, scopes, the secret's last characters, revoked or not)."""
    from nodus.reconciler.inference.api import list_keys

    _, store = _store(path, state)
    try:
        found = list_keys(store, project=namespace)
    finally:
        store.close()
    if output == "json":
        print_json({"items": [key.to_json() for key in found]})
        return
    if not found:
        line("No keys found.")
        return
    from nodus.reconciler.views.columns import plain

    rows = [
        [key.name, key.project, ",".join(key.scopes), f"...{key.secret_hint}", "yes" if key.revoked else "no"]
        for key in found
    ]
    line(plain(["NAME", "PROJECT", "SCOPES", "SECRET", "REVOKED"], rows))


@keys_group.command("revoke")
@click.argument("name")
@click.option("-n", "--project", "namespace", default=None)
@click.option("--state", help="State store: a SQLite path or postgresql://...")
@click.option("--path", type=click.Path(path_type=Path), help="Project folder (default: found from here).")
def keys_revoke(name: str, namespace: str | None, state: str | None, path: Path | None) -> None:
    """Revoke the key NAME: requests with it get 401 from now on."""
    from nodus.reconciler.inference.api import revoke_key

    _, store = _store(path, state)
    try:
        revoke_key(store, name, project=namespace or DEFAULT_PROJECT)
    finally:
        store.close()
    err_line(f"key {name} revoked")


@click.group("inference")
def inference_group() -> None:
    """Call models through the project's gateway: models, chat, receipt."""


@inference_group.command("models")
@click.option("-o", "--output", type=click.Choice(["table", "json"]), default="table")
@click.option("--state", help="State store: a SQLite path or postgresql://...")
@click.option("--path", type=click.Path(path_type=Path), help="Project folder (default: found from here).")
def models(output: str, state: str | None, path: Path | None) -> None:
    """The models you can call now: the model table's, and your endpoints (`endpoint/NAME`)."""
    from nodus.reconciler.endpoints.model_table import load_models
    from nodus.reconciler.views.columns import plain

    project = Project.find(path or Path.cwd(), state=state)
    table = load_models(project.root)
    store = project.open_state(create=False)
    try:
        endpoints = store.list("InferenceEndpoint")
    finally:
        store.close()
    rows: list[dict[str, Any]] = [
        {
            "model": entry.id,
            "name": entry.name,
            "context": entry.context,
            "maxOutput": entry.max_output,
            "preview": entry.preview,
            "operations": list(entry.operations),
            "aliases": list(entry.aliases),
            "pinned": entry.repo is None,
        }
        for entry in table.entries.values()
    ]
    for record in endpoints:
        served = record.status.get("model") or record.spec["spec"].get("model")
        rows.append(
            {
                "model": f"endpoint/{record.key.name}",
                "name": f"{record.key.name} ({served})",
                "phase": record.status.get("phase"),
                "url": record.status.get("url"),
            }
        )
    if output == "json":
        print_json({"data": rows})
        return
    cells = [
        [
            row["model"],
            row["name"],
            _tokens(row.get("context")),
            _tokens(row.get("maxOutput")),
            str(row.get("preview", "-")).lower() if "preview" in row else str(row.get("phase") or "-"),
        ]
        for row in rows
    ]
    line(plain(["MODEL", "NAME", "CONTEXT", "MAX OUTPUT", "PREVIEW"], cells))


@inference_group.command("chat")
@click.argument("prompt")
@click.option("--model", help="A model id (nodus/tiny-qwen3) some Running endpoint of the project serves.")
@click.option("--endpoint", help="An endpoint by name (its own base URL).")
@click.option("--max-tokens", type=click.IntRange(min=1), default=256, show_default=True)
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text")
@click.option("--state", help="State store: a SQLite path or postgresql://...")
@click.option("--path", type=click.Path(path_type=Path), help="Project folder (default: found from here).")
def chat(
    prompt: str,
    model: str | None,
    endpoint: str | None,
    max_tokens: int,
    output: str,
    state: str | None,
    path: Path | None,
) -> None:
    """Send PROMPT as one user message; the answer on stdout, the request, model, tokens and charge on stderr."""
    from nodus.reconciler.inference.gateway_address import check_gateway

    if (model is None) == (endpoint is None):
        raise ConfigError("give exactly one of --model or --endpoint", hint='nodus inference chat --endpoint bot "hi"')
    key = os.environ.get(API_KEY_VARIABLE)
    if not key:
        raise ConfigError(f"{API_KEY_VARIABLE} is not set", hint="nodus keys create NAME prints a key; export it")
    project = Project.find(path or Path.cwd(), state=state)
    store = project.open_state(create=False)
    try:
        base = check_gateway(project, store).url
    finally:
        store.close()
    body = {
        "model": model or f"endpoint/{endpoint}",
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
    }
    reply, request_id = _post(f"{base}/v1/chat/completions", body, key)
    if output == "json":
        print_json(reply)
    else:
        line(str(((reply.get("choices") or [{}])[0].get("message") or {}).get("content") or ""))
    usage = reply.get("usage") or {}
    charge = _charge(project, request_id)
    err_line(
        f"request {request_id} · {reply.get('model')} · {usage.get('prompt_tokens', '?')} input + "
        f"{usage.get('completion_tokens', '?')} output tokens · {charge}"
    )


@inference_group.command("receipt")
@click.argument("request_id")
@click.option("-o", "--output", type=click.Choice(["yaml", "json"]), default="yaml")
@click.option("--state", help="State store: a SQLite path or postgresql://...")
@click.option("--path", type=click.Path(path_type=Path), help="Project folder (default: found from here).")
def receipt(request_id: str, output: str, state: str | None, path: Path | None) -> None:
    """A request's receipt (kept 30 days): operation, usage, amountUSD, pricebookVersion, state."""
    from nodus.reconciler.inference.api import read_receipt

    project = Project.find(path or Path.cwd(), state=state)
    store = project.open_state(create=False)
    try:
        found = read_receipt(store, request_id)
    finally:
        store.close()
    if found is None:
        raise ConfigError(f"no receipt {request_id} (receipts are kept 30 days)")
    if output == "json":
        print_json(found.to_json())
        return
    import yaml

    line(yaml.safe_dump(found.to_json(), sort_keys=False).rstrip())


def _post(url: str, body: dict[str, Any], key: str) -> tuple[dict[str, Any], str]:
    """POST `body` as JSON with the key; (the answer, its Nodus-Request-Id). An error answer is one line."""
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"},
        method="POST",
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # the gateway is on loopback
    try:
        with opener.open(request, timeout=600) as answer:
            return json.loads(answer.read()), str(answer.headers.get("Nodus-Request-Id") or "-")
    except urllib.error.HTTPError as exc:
        detail = _error_of(exc.read())
        raise ConfigError(f"{url}: {exc.code} {detail}") from None
    except OSError as exc:
        raise ConfigError(
            f"{url}: the gateway does not answer ({getattr(exc, 'reason', exc)})",
            hint="nodus get ep shows whether an endpoint runs (the gateway runs while one does)",
        ) from None


def _error_of(raw: bytes) -> str:
    try:
        error = json.loads(raw).get("error") or {}
    except (ValueError, AttributeError):
        return raw.decode(errors="replace")[:200]
    return f"{error.get('code')}: {error.get('message')}"


def _charge(project: Project, request_id: str) -> str:
    """The request's charge from its receipt, once settled (it is settled right after the answer)."""
    from nodus.reconciler.inference.api import read_receipt

    store = project.open_state(create=False)
    try:
        deadline = time.monotonic() + SETTLE_WAIT_S
        while True:
            found = read_receipt(store, request_id)
            if found is not None and str(found.state) != "Running":
                return f"${found.to_json()['amountUSD']}"
            if time.monotonic() > deadline:
                return "charge not settled yet (nodus inference receipt " + request_id + ")"
            time.sleep(0.1)
    finally:
        store.close()


def _tokens(count: object) -> str:
    if not isinstance(count, int):
        return "-"
    return f"{count // 1024}K" if count >= 1024 else str(count)
