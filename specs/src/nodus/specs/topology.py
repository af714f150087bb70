"""The gang's shape: how many machines a Job runs on and how many GPUs each gets, from what its spec says.

Who uses it: `nodus.specs.job` (a Job whose `distributed` block cannot be given a shape is refused at validation,
so `nodus validate` and `nodus run` say so before anything runs), the estimator (`nodus.reconciler.pricing`,
which prices every member) and the controllers (`resources_of`, the workload an executor is given). One function,
so the estimate, the dry run and the launch can never disagree about the world size.

The rules are the multi-node guide's "Topology": exactly one of `nodes` or `totalGPUs`; with `nodes`, GPUs per
node are `gpusPerNode`, else `resources.gpu.count`; with `totalGPUs`, `gpusPerNode` when set (it must divide the
total), else nodus picks: a total one machine holds (8 or fewer) is one machine of that many GPUs, a larger one
is the fewest machines of 8, 4, 2 or 1 GPUs that split it evenly. A gang has at most 8 machines.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_NODES = 8
MACHINE_SHAPES = (8, 4, 2, 1)
"""GPUs per machine nodus picks from, the largest first (fewer machines assemble sooner and talk less)."""


@dataclass(frozen=True)
class Topology:
    """The resolved shape: `nodes` machines of `gpus_per_node` GPUs each."""

    nodes: int
    gpus_per_node: int

    @property
    def total_gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def describe(self) -> str:
        """`2 nodes of 8 GPUs`, `1 node of 4 GPUs`."""
        return (
            f"{self.nodes} node{'s' if self.nodes != 1 else ''} of {self.gpus_per_node} "
            f"GPU{'s' if self.gpus_per_node != 1 else ''}"
        )

    def to_dict(self) -> dict[str, int]:
        """As `status.topology` writes it."""
        return {"nodes": self.nodes, "gpusPerNode": self.gpus_per_node, "totalGPUs": self.total_gpus}


def resolve(
    *,
    nodes: int | None = None,
    total_gpus: int | None = None,
    gpus_per_node: int | None = None,
    gpu_count: int = 1,
) -> Topology:
    """The shape of a gang (ValueError naming the field when none fits). `gpu_count`: `resources.gpu.count`."""
    if nodes is not None:
        return Topology(nodes, gpus_per_node or gpu_count)
    if total_gpus is None:
        return Topology(1, gpus_per_node or gpu_count)
    if gpus_per_node is not None:
        if total_gpus % gpus_per_node:
            raise ValueError(f"totalGPUs {total_gpus} is not a multiple of gpusPerNode {gpus_per_node}")
        count = total_gpus // gpus_per_node
        if count > MAX_NODES:
            raise ValueError(
                f"totalGPUs {total_gpus} at gpusPerNode {gpus_per_node} needs {count} nodes; a gang has at most "
                f"{MAX_NODES}"
            )
        return Topology(count, gpus_per_node)
    if total_gpus <= MACHINE_SHAPES[0]:
        return Topology(1, total_gpus)
    for shape in MACHINE_SHAPES:
        if total_gpus % shape == 0 and total_gpus // shape <= MAX_NODES:
            return Topology(total_gpus // shape, shape)
    raise ValueError(
        f"totalGPUs {total_gpus} cannot be split evenly into at most {MAX_NODES} nodes of 1, 2, 4 or 8 GPUs"
    )


def of_spec(spec: dict[str, object]) -> Topology:
    """The shape of a normalised Job or TrainingJob spec: `distributed.nodes` or `distributed.totalGPUs` (a Job's
    gang), else `resources.nodes` (a TrainingJob's), else one node. Assumes the spec validated (a shape that
    cannot resolve raises ValueError)."""
    distributed = spec.get("distributed")
    distributed = distributed if isinstance(distributed, dict) else {}
    resources = spec.get("resources")
    resources = resources if isinstance(resources, dict) else {}
    gpu = resources.get("gpu")
    count = int(gpu.get("count") or 1) if isinstance(gpu, dict) else 1
    nodes, total = _int(distributed.get("nodes")), _int(distributed.get("totalGPUs"))
    if nodes is None and total is None:
        nodes = _int(resources.get("nodes")) or 1
    return resolve(nodes=nodes, total_gpus=total, gpus_per_node=_int(distributed.get("gpusPerNode")), gpu_count=count)


def _int(value: object) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None
