"""A gang on Ray: what the executor and the coordinator share (names, bundles, each rank's variables).

Who uses it: the executor (`executor.py`: a gang is submitted as a coordinator reserving nothing, told its run and
its members' placement through `SUBMISSION_VARIABLE` and `PLACEMENT_VARIABLE`), `node_session.main` (which hands a
gang to `gang_coordinator.run_gang`) and the coordinator itself; all of it without Ray, so the tests need none.

The gang's coordinator is the Ray job's entrypoint (`gang_coordinator.py`): it is the one process that lives exactly
as long as the run, so the placement group it makes is job-scoped and Ray removes it when the run ends however it
ends. The group's name comes from the submission id, so a coordinator started again for the same run finds the
group instead of making a second.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Final

from ..workload import Workload
from .placement import RAY_GPU, Placement

NAMESPACE: Final = "nodus"
"""The Ray namespace the gangs' placement groups are named in."""
MASTER_PORT: Final = 29500
STRATEGY: Final = "STRICT_SPREAD"
TRANSPORT: Final = "private"
"""NODUS_GANG_TRANSPORT on a Ray cluster: its nodes reach each other on the cluster's own network, never relayed."""
SUBMISSION_VARIABLE: Final = "NODUS_SUBMISSION_ID"
PLACEMENT_VARIABLE: Final = "NODUS_GANG_PLACEMENT"
COST_VARIABLE: Final = "NODUS_GANG_COST_SO_FAR"
"""The coordinator's environment: its run's submission id, each member's placement (JSON), and for a resumed run
what the earlier runs cost (US dollars)."""


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


def placement_group_name(submission_id: str, attempt: int = 1) -> str:
    """The gang's placement group: one name per run (and per assembly try after the first, the earlier one being
    removed asynchronously), so a repeated launch of the run finds it."""
    return f"{submission_id}-gang" if attempt == 1 else f"{submission_id}-gang-t{attempt}"


def bundles(workload: Workload, placement: Placement) -> list[dict[str, float]]:
    """One bundle per node, each the job's per-node resources (its CPUs, one by default, its memory, its GPUs)."""
    bundle: dict[str, float] = {"CPU": placement.num_cpus, **placement.resources}
    if placement.memory_bytes:
        bundle["memory"] = float(placement.memory_bytes)
    if placement.num_gpus:
        bundle[RAY_GPU] = float(placement.num_gpus)
    nodes = workload.resources.nodes if workload.resources is not None else 1
    return [dict(bundle) for _ in range(nodes)]


def gpus_per_node(workload: Workload) -> int:
    gpu = workload.resources.gpu if workload.resources is not None else None
    return gpu.count if gpu is not None else 0


def rank_env(
    workload: Workload,
    rank: int,
    ips: Sequence[str],
    *,
    epoch: int = 1,
    checkpoint_uri: str | None = None,
    restore_uri: str | None = None,
) -> dict[str, str]:
    """The seeds' variables of one rank ("Launchers" in the multi-node guide); `ips` in rank order; the gang's
    checkpoint folder and, after a restart, the checkpoint to resume from (`gang_checkpoints.py`)."""
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
        "NODUS_GANG_EPOCH": str(epoch),
        "NODUS_GANG_TRANSPORT": TRANSPORT,
    }
    if checkpoint_uri is not None:
        env["NODUS_CHECKPOINT_URI"] = checkpoint_uri
    if restore_uri is not None:
        env["NODUS_RESTORE_URI"] = restore_uri
    launcher = workload.resources.launcher if workload.resources is not None else "Plain"
    if launcher == "Torchrun":
        env.update(
            {
                "PET_NNODES": str(nodes),
                "PET_NODE_RANK": str(rank),
                "PET_NPROC_PER_NODE": str(max(gpus, 1)),
                "PET_MASTER_ADDR": ips[0],
                "PET_MASTER_PORT": str(MASTER_PORT),
                "PET_MAX_RESTARTS": "0",  # nodus restarts the gang, at the next epoch
                "PET_RDZV_ID": f"epoch-{epoch}",
            }
        )
    else:  # Plain: one process per node, so env:// initialisation works
        env.update({"RANK": str(rank), "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "WORLD_SIZE": str(nodes)})
    return env


def shape(bundle: Mapping[str, float]) -> str:
    """A bundle as people read it: `CPU 1, GPU 8`."""
    return ", ".join(f"{key} {value:g}" for key, value in bundle.items())
