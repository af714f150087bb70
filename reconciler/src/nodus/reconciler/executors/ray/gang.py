"""A gang on Ray: one placement group with a bundle per node, then the command on every member at once.

Who uses it: `node_session.main`, when the workload asks for more than one node (`resources.nodes`); the
functions without Ray (`placement_group_name`, `bundles`, `rank_env`) are also the executor's and the tests'.

The gang's coordinator is the Ray job's entrypoint itself (the executor submits it reserving nothing, so Ray runs
it on the head): it is the one process that lives exactly as long as the run, so the placement group it makes is
job-scoped and Ray removes it when the coordinator ends however it ends (stopped, crashed, node gone), and no
member is ever held by a run that is over. The executor could not make it: the Jobs API it talks to has no
placement groups. The group's name comes from the submission id, so a coordinator started again for the same run
finds the group instead of making a second.

Assembly: the group is `STRICT_SPREAD` (one member per node), each bundle the job's per-node resources (one CPU
for the member, the GPU type's custom resource, real GPUs where the nodes have them). The coordinator waits at
most `startupTimeout` for every bundle to be placed; when they are not, it removes the group and the run fails
with `GangAssemblyTimeout`. Once all are placed it asks each member its address, and only then starts the command
on every member with the seeds' rank variables (`rank_env`). Each rank's output comes back into the Ray job's log,
every line prefixed `[rank N] `; the run succeeds when every rank exits 0.

Not done yet: retries of a timed-out assembly (`maxAssemblyRetries`), restarts at the next epoch after a lost
member (`NODUS_GANG_EPOCH` is always 1), the network check, per-member supervisors (cost accounting, caps and the
attempt API run only for single-node jobs), streaming a rank's output while it runs (it comes when the rank ends),
and nodes that offer their GPU type only by label (a bundle can only reserve resources).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final, TextIO

from nodus.specs.status_names import Phase, Reason

from ..workload import Workload
from . import status_stream
from .placement import RAY_GPU, Placement

NAMESPACE: Final = "nodus"
"""The Ray namespace the gangs' placement groups are named in."""
MASTER_PORT: Final = 29500
EPOCH: Final = 1
STRATEGY: Final = "STRICT_SPREAD"
SUBMISSION_VARIABLE: Final = "NODUS_SUBMISSION_ID"
PLACEMENT_VARIABLE: Final = "NODUS_GANG_PLACEMENT"
"""The coordinator's environment: its run's submission id, and each member's placement (JSON)."""


def is_gang(workload: Workload) -> bool:
    return workload.resources is not None and workload.resources.nodes > 1


def placement_to_json(placement: Placement) -> str:
    return json.dumps(
        {
            "gpuType": placement.gpu_type,
            "numGpus": placement.num_gpus,
            "resources": dict(placement.resources),
            "numCpus": placement.num_cpus,
        }
    )


def placement_from_json(text: str) -> Placement:
    found = json.loads(text)
    return Placement(found["gpuType"], found["numGpus"], found["resources"], {}, found["numCpus"])


def placement_group_name(submission_id: str) -> str:
    """The gang's placement group: one name per run, so a repeated launch of the run finds it."""
    return f"{submission_id}-gang"


def bundles(workload: Workload, placement: Placement) -> list[dict[str, float]]:
    """One bundle per node, each the job's per-node resources (one CPU for the member, its GPUs)."""
    bundle: dict[str, float] = {"CPU": placement.num_cpus, **placement.resources}
    if placement.num_gpus:
        bundle[RAY_GPU] = float(placement.num_gpus)
    nodes = workload.resources.nodes if workload.resources is not None else 1
    return [dict(bundle) for _ in range(nodes)]


def gpus_per_node(workload: Workload) -> int:
    gpu = workload.resources.gpu if workload.resources is not None else None
    return gpu.count if gpu is not None else 0


def rank_env(workload: Workload, rank: int, ips: Sequence[str]) -> dict[str, str]:
    """The seeds' variables of one rank ("Launchers" in the multi-node guide); `ips` in rank order."""
    nodes, gpus = len(ips), gpus_per_node(workload)
    env = {
        "NODUS_NODE_RANK": str(rank),
        "NODE_RANK": str(rank),
        "NODUS_NUM_NODES": str(nodes),
        "NNODES": str(nodes),
        "NODUS_GPUS_PER_NODE": str(gpus),
        "NODUS_NODE_IPS": ",".join(ips),
        "MASTER_ADDR": ips[0],
        "MASTER_PORT": str(MASTER_PORT),
        "NODUS_GANG_EPOCH": str(EPOCH),
    }
    launcher = workload.resources.launcher if workload.resources is not None else "Plain"
    if launcher == "Torchrun":
        env.update(
            {
                "PET_NNODES": str(nodes),
                "PET_NODE_RANK": str(rank),
                "PET_NPROC_PER_NODE": str(max(gpus, 1)),
                "PET_MASTER_ADDR": ips[0],
                "PET_MASTER_PORT": str(MASTER_PORT),
                "PET_MAX_RESTARTS": "0",
            }
        )
    else:  # Plain: one process per node, so env:// initialisation works
        env.update({"RANK": str(rank), "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "WORLD_SIZE": str(nodes)})
    return env


def member_address() -> str:
    """The address of the node this member runs on (run as a Ray task in the member's bundle)."""
    import ray

    return str(ray.util.get_node_ip_address())  # type: ignore[no-untyped-call]


def run_member(command: Sequence[str], env: Mapping[str, str], cwd: str | None) -> tuple[int, str]:
    """One rank's command on its node (a Ray task in its bundle): its exit status and its output."""
    try:
        done = subprocess.run(
            list(command),
            env={**os.environ, **env},
            cwd=cwd if cwd and Path(cwd).is_dir() else None,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            check=False,
        )
    except OSError as exc:
        return 127, f"{command[0]}: {exc.strerror or exc}\n"
    return done.returncode, done.stdout.decode("utf-8", errors="replace")


def run_gang(workload: Workload, submission_id: str, placement: Placement, out: TextIO, cwd: str | None) -> int:
    """Assemble the gang, run the command on every member, write its ranks' output and the final marker."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    ray.init(address="auto", namespace=NAMESPACE, log_to_driver=False, logging_level=logging.ERROR)
    name = placement_group_name(submission_id)
    wanted = bundles(workload, placement)
    try:
        group = ray.util.get_placement_group(name)
    except ValueError:  # not made yet: this is the run's first coordinator
        group = placement_group(wanted, strategy=STRATEGY, name=name)
    timeout = workload.resources.startup_timeout_s if workload.resources is not None else 900.0
    if not group.wait(timeout_seconds=timeout):
        remove_placement_group(group)
        message = (
            f"gang of {len(wanted)} nodes ({_shape(wanted[0])} each, {STRATEGY}) was not placed within "
            f"startupTimeout {timeout:g}s: the cluster has fewer nodes that fit; placement group {name} released"
        )
        return _final(out, Phase.FAILED, Reason.GANG_ASSEMBLY_TIMEOUT, message)

    def options(rank: int) -> dict[str, Any]:
        bundle = wanted[rank]
        custom = {key: value for key, value in bundle.items() if key not in ("CPU", RAY_GPU)}
        return {
            "num_cpus": bundle["CPU"],
            "num_gpus": bundle.get(RAY_GPU, 0),
            "resources": custom,
            "scheduling_strategy": PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=rank),
        }

    address = ray.remote(member_address)
    ips = ray.get([address.options(**options(rank)).remote() for rank in range(len(wanted))])
    member = ray.remote(run_member)
    runs = [
        member.options(**options(rank)).remote(workload.command, {**workload.env, **rank_env(workload, rank, ips)}, cwd)
        for rank in range(len(wanted))
    ]
    results = ray.get(runs)
    for rank, (_, text) in enumerate(results):
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        out.write("".join(status_stream.escape(f"[rank {rank}] {line}") + "\n" for line in lines))
    remove_placement_group(group)
    failed = [(rank, status) for rank, (status, _) in enumerate(results) if status != 0]
    if failed:
        rank, status = failed[0]
        return _final(out, Phase.FAILED, Reason.TRAINER_FAILED, f"rank {rank} exited with status {status}")
    return _final(out, Phase.SUCCEEDED, Reason.TRAINER_SUCCEEDED, f"all {len(results)} ranks exited 0")


def _shape(bundle: Mapping[str, float]) -> str:
    return ", ".join(f"{key} {value:g}" for key, value in bundle.items())


def _final(out: TextIO, phase: str, reason: str, message: str) -> int:
    out.write(status_stream.marker("final", {"phase": phase, "reason": reason, "message": message}))
    out.flush()
    return 0 if phase == Phase.SUCCEEDED else 1
