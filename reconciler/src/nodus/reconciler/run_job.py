"""`nodus run`'s flags compiled into a `kind: Job` document, validated by nodus.specs like any file.

Who calls it: `nodus.cli.run` (the command), which then dry-runs the Job (`nodus.reconciler.dry_run`) or applies it
through the same path `nodus apply` takes; and the tests, which check that the seeds' two `nodus run` lines compile
into exactly `examples/multi-node/torchrun-2-node.yaml` and `torchrun-2-node-xp.yaml`. Pure: the flags, the price
table's GPU types and the time in; a document (or a `RunFlagError` naming the flag) out.

What the flags become (the multi-node guide's names):
- `--gpu` (may repeat): a GPU as people write it (H100, A100, L4, RTX4090) or a price-table type (h100-sxm-80g);
  a short name is the first type of the table whose id starts with it, segment by segment (H100 is h100-sxm-80g,
  listed before h100-pcie-80g; L4 is l4-24g, never l40s-48g). An unknown one is refused, listing the known types;
- `--gpus-per-node`: `resources.gpu.count` of a single node or with `--nodes`; `distributed.gpusPerNode` with
  `--total-gpus` (where nodus picks the shape otherwise);
- `--nodes` / `--total-gpus` (exactly one, for a gang), `--network`, `--transport`, `--startup-timeout`:
  `spec.distributed`; `--launcher`, `--network` and `--transport` case-insensitively as the spec spells them;
- `--max-cost`, `--timeout`, `--env K=V`, `--image`, `--working-dir`, `--output NAME=PATH`: their spec fields;
- everything after `--`: `spec.command`, as given (no shell).
Only what a flag set is written, so the document reads as a person would write it. The `nodus.dev/created-by:
nodus-run` label (`made_by_run`) is added apart (`marked`): the compiled Job is the file's resource exactly, and the
one stored says who made it, so `nodus apply --prune` of a folder leaves it alone
(`nodus.reconciler.planning.diff.made_by_run` says why).
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import get_args

from nodus.errors import ConfigError
from nodus.reconciler.planning.desired import Desired, desired_from
from nodus.reconciler.planning.diff import CREATED_BY, NODUS_RUN
from nodus.reconciler.state.records import JSONObject
from nodus.specs import topology
from nodus.specs.compute import Launcher, Network, Transport
from nodus.specs.parse import Problem, parse_text

SOURCE = "nodus run"
"""Where the compiled Job says it comes from, in messages and plans (it is in no file)."""

FIELD_FLAGS: dict[str, str] = {
    "metadata.name": "--name",
    "metadata.project": "--project",
    "spec.command": "--",
    "spec.image": "--image",
    "spec.workingDir": "--working-dir",
    "spec.launcher": "--launcher",
    "spec.env": "--env",
    "spec.resources.gpu.type": "--gpu",
    "spec.resources.gpu.count": "--gpus-per-node",
    "spec.distributed.nodes": "--nodes",
    "spec.distributed.totalGPUs": "--total-gpus",
    "spec.distributed.gpusPerNode": "--gpus-per-node",
    "spec.distributed.network": "--network",
    "spec.distributed.transport": "--transport",
    "spec.distributed.startupTimeout": "--startup-timeout",
    "spec.distributed": "--nodes/--total-gpus",
    "spec.maxCostUSD": "--max-cost",
    "spec.timeout": "--timeout",
    "spec.outputs": "--output",
}
"""The flag that set each field, so a spec's refusal is said about what the user typed (longest prefix wins)."""


class RunFlagError(ConfigError):
    """A flag of `nodus run` that cannot become a Job: one line, `--flag VALUE: what is wrong`."""

    def __init__(self, flag: str, message: str) -> None:
        self.flag = flag
        super().__init__(f"{flag}: {message}")


@dataclass(frozen=True)
class RunRequest:
    """`nodus run`'s flags as typed (strings where the spec parses them, so its messages are the spec's)."""

    command: tuple[str, ...]
    name: str | None = None
    project: str | None = None
    gpus: tuple[str, ...] = ()
    gpus_per_node: int | None = None
    nodes: int | None = None
    total_gpus: int | None = None
    launcher: str | None = None
    network: str | None = None
    transport: str | None = None
    startup_timeout: str | None = None
    max_cost: str | None = None
    timeout: str | None = None
    env: tuple[str, ...] = ()
    """`K=V` each."""
    image: str | None = None
    working_dir: str | None = None
    outputs: tuple[str, ...] = ()
    """`NAME=PATH` each."""


def compile_job(request: RunRequest, gpu_types: Sequence[str], *, now: datetime) -> JSONObject:
    """The Job document `request` asks for; `gpu_types`: the price table's GPU types, in the table's order."""
    if not request.command:
        raise RunFlagError("--", "no command to run: put it after `--`, e.g. nodus run -- python train.py")
    gang = _gang(request)
    spec: JSONObject = {"command": list(request.command)}
    if request.image is not None:
        spec["image"] = request.image
    if request.working_dir is not None:
        spec["workingDir"] = request.working_dir
    if request.launcher is not None:
        spec["launcher"] = _choice("--launcher", request.launcher, get_args(Launcher))
    if request.env:
        spec["env"] = dict(_pair("--env", text, "K=V") for text in request.env)
    resources = _resources(request, gpu_types)
    if resources:
        spec["resources"] = resources
    if gang:
        spec["distributed"] = gang
    if request.max_cost is not None:
        spec["maxCostUSD"] = request.max_cost
    if request.timeout is not None:
        spec["timeout"] = request.timeout
    if request.outputs:
        spec["outputs"] = [
            {"name": name, "path": path}
            for name, path in (_pair("--output", text, "NAME=PATH") for text in request.outputs)
        ]
    metadata: JSONObject = {"name": request.name or default_name(request.command, now)}
    if request.project is not None:
        metadata["project"] = request.project
    return {"apiVersion": "nodus.dev/v1beta1", "kind": "Job", "metadata": metadata, "spec": spec}


def marked(document: JSONObject) -> JSONObject:
    """`document` with the label that says `nodus run` made it (a copy)."""
    out = copy.deepcopy(document)
    labels = out["metadata"].setdefault("labels", {})
    labels[CREATED_BY] = NODUS_RUN
    return out


def validated(document: JSONObject) -> Desired:
    """The document read by nodus.specs as a file would be (JSON is YAML); a refusal names the flag it came from."""
    result = parse_text(json.dumps(document), SOURCE)
    if result.errors:
        raise _flag_error(result.errors[0])
    (desired,) = desired_from(result.resources)
    return Desired(desired.key, desired.document, desired.spec_hash, SOURCE, desired.resource)


def default_name(command: Sequence[str], now: datetime) -> str:
    """`run-<8 hex>`: a DNS label from the command and the time, so two runs of one command differ."""
    digest = hashlib.sha256(json.dumps([list(command), now.isoformat()]).encode()).hexdigest()
    return f"run-{digest[:8]}"


def gpu_type_of(name: str, known: Sequence[str]) -> str:
    """The price table's type for a GPU as people write it (see the module's docstring)."""
    wanted = _collapsed(name)
    if not wanted:
        raise RunFlagError("--gpu", "empty GPU name")
    for gpu_type in known:
        segments = gpu_type.split("-")
        if any(_collapsed("".join(segments[:end])) == wanted for end in range(1, len(segments) + 1)):
            return gpu_type
    listed = ", ".join(known) if known else "none (the price table lists no GPU types)"
    raise RunFlagError(f"--gpu {name}", f"not a GPU type the price table knows; known: {listed}")


def _collapsed(text: str) -> str:
    """Lower case, letters and digits only, no `nvidia` in front: `RTX 4090` and `rtx4090` read the same."""
    letters = re.sub(r"[^a-z0-9]", "", text.lower())
    return letters.removeprefix("nvidia")


def _gang(request: RunRequest) -> JSONObject:
    """`spec.distributed`, or {} for a single machine (then no placement flag may be set)."""
    placement = {
        "--network": request.network,
        "--transport": request.transport,
        "--startup-timeout": request.startup_timeout,
    }
    if request.nodes is not None and request.total_gpus is not None:
        raise RunFlagError("--nodes and --total-gpus", "give one of them: a gang's size is its nodes or its GPUs")
    if request.nodes is None and request.total_gpus is None:
        given = [flag for flag, value in placement.items() if value is not None]
        if given:
            raise RunFlagError(given[0], "places a gang's members: give --nodes or --total-gpus too")
        return {}
    if request.total_gpus is not None and not request.gpus:
        raise RunFlagError(f"--total-gpus {request.total_gpus}", "needs --gpu: the GPU type the total counts")
    if request.total_gpus is not None:
        try:  # the spec refuses it too, but about `spec`: here the flags that asked for it are named
            topology.resolve(total_gpus=request.total_gpus, gpus_per_node=request.gpus_per_node)
        except ValueError as exc:
            raise RunFlagError(f"--total-gpus {request.total_gpus}", str(exc)) from None
    gang: JSONObject = {}
    if request.nodes is not None:
        gang["nodes"] = request.nodes
    else:
        gang["totalGPUs"] = request.total_gpus
        if request.gpus_per_node is not None:
            gang["gpusPerNode"] = request.gpus_per_node
    if request.network is not None:
        gang["network"] = _choice("--network", request.network, get_args(Network))
    if request.transport is not None:
        gang["transport"] = _choice("--transport", request.transport, get_args(Transport))
    if request.startup_timeout is not None:
        gang["startupTimeout"] = request.startup_timeout
    return gang


def _resources(request: RunRequest, gpu_types: Sequence[str]) -> JSONObject:
    if not request.gpus:
        if request.gpus_per_node is not None:
            raise RunFlagError(f"--gpus-per-node {request.gpus_per_node}", "needs --gpu: the GPU type to count")
        return {}
    types: list[str] = []
    for name in request.gpus:
        gpu_type = gpu_type_of(name, gpu_types)
        if gpu_type not in types:
            types.append(gpu_type)
    gpu: JSONObject = {"type": types}
    if request.total_gpus is None:
        # With --total-gpus the shape is nodus's to pick (or distributed.gpusPerNode's): no count is written.
        gpu["count"] = request.gpus_per_node or 1
    return {"gpu": gpu}


def _choice(flag: str, value: str, choices: Sequence[str]) -> str:
    """`value` as the spec spells it, case-insensitively (`torchrun` is Torchrun)."""
    for choice in choices:
        if choice.lower() == value.lower():
            return choice
    raise RunFlagError(f"{flag} {value}", f"one of {', '.join(choice.lower() for choice in choices)}")


def _pair(flag: str, text: str, shape: str) -> tuple[str, str]:
    name, equals, value = text.partition("=")
    if not equals or not name:
        raise RunFlagError(f"{flag} {text}", f"not {shape}")
    return name, value


def _flag_error(problem: Problem) -> RunFlagError:
    """A spec's refusal said about the flag that set the field (the spec's own words after it)."""
    path = problem.field or ""
    flag = next(
        (FIELD_FLAGS[prefix] for prefix in sorted(FIELD_FLAGS, key=len, reverse=True) if _under(path, prefix)),
        None,
    )
    if flag is None:
        return RunFlagError(path or "nodus run", problem.message)
    return RunFlagError(flag, problem.message)


def _under(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith((prefix + ".", prefix + "["))
