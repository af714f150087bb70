"""Where on a Ray cluster a workload can run: its resources as the Ray resources its entrypoint reserves.

Who uses it: `RayExecutor.launch` (`executor.py`) before it submits, with the cluster's nodes
(`JobsClient.nodes`); `RayExecutor.capabilities` for the GPU types alive nodes offer.

A node offers a GPU type in one of two ways (`nodus cluster up` starts its nodes with both):
- the custom resource `nodus.dev/gpu-type/TYPE` (`GPU_TYPE_RESOURCE`), as many as it has GPUs of that type;
  the entrypoint reserves `count` of it (and `count` real GPUs where the node has Ray's `GPU` resource, so that
  Ray sets CUDA_VISIBLE_DEVICES);
- the label `nodus.dev/gpu-type: TYPE` (`GPU_TYPE_LABEL`, `ray start --labels`) with at least `count` of Ray's
  `GPU` resource; the entrypoint selects the label and reserves `count` GPUs.

A workload that names several types takes the first one some alive node has room for (by its total resources:
a busy node that fits is Ray's to queue the job on). One that fits no node is `Unschedulable`, with every offer
tried and why it failed. Every entrypoint reserves one CPU (`SESSION_CPUS`) for the node session and the trainer
under it: without a reservation Ray runs a job's driver on the head node, which `nodus cluster up` (as Ray advises
for clusters) starts with no CPUs for work. A workload that names CPU cores or memory per node (`resources.cpu`,
`resources.memory`) reserves those instead (Ray's `CPU` and `memory` resources), on a node that has them besides its
GPUs; where no alive node is that big, it is `Unschedulable` with the largest node's size.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Final

from ..workload import Workload
from .jobs_client import RayNode

GPU_TYPE_RESOURCE: Final = "nodus.dev/gpu-type/"
"""The custom resource a node offering a GPU type has: this prefix and the type (`nodus.dev/gpu-type/l4-24g`)."""
GPU_TYPE_LABEL: Final = "nodus.dev/gpu-type"
"""The node label naming a node's GPU type."""
RAY_GPU: Final = "GPU"
SESSION_CPUS: Final = 1.0
"""What every entrypoint reserves: the node session and its trainer run on a worker, never on a head without CPUs."""


@dataclass(frozen=True)
class Placement:
    """What the entrypoint reserves: the GPU type chosen (None: no GPUs), real GPUs, custom resources, labels."""

    gpu_type: str | None = None
    num_gpus: float | None = None
    resources: Mapping[str, float] = field(default_factory=dict)
    label_selector: Mapping[str, str] = field(default_factory=dict)
    num_cpus: float = SESSION_CPUS
    memory_bytes: int | None = None
    """Ray's `memory` resource to reserve (bytes); None: none."""


@dataclass(frozen=True)
class Unschedulable:
    """No alive node fits: `message` lists each offer tried (`rtx4090-24g x1: no node has it; ...`)."""

    message: str


@dataclass(frozen=True)
class Size:
    """The CPU cores and memory one node must have (what `resources.cpu` and `resources.memory` ask for)."""

    cpus: float = SESSION_CPUS
    memory_bytes: int | None = None
    asked: bool = False
    """Whether the workload named either: only then is a node's size checked (else Ray queues the job)."""

    def fits(self, node: RayNode) -> bool:
        if not self.asked:
            return True
        memory = self.memory_bytes or 0
        return node.resources.get("CPU", 0) >= self.cpus and node.resources.get("memory", 0) >= memory

    def describe(self) -> str:
        parts = [f"{self.cpus:g} CPUs"] + ([f"{_gib(self.memory_bytes)} memory"] if self.memory_bytes else [])
        return " and ".join(parts)


def size_of(workload: Workload) -> Size:
    resources = workload.resources
    if resources is None or (resources.cpu is None and resources.memory_bytes is None):
        return Size()
    return Size(float(resources.cpu or SESSION_CPUS), resources.memory_bytes, asked=True)


def place(workload: Workload, nodes: Sequence[RayNode]) -> Placement | Unschedulable:
    """The placement of `workload` on the first GPU type of its list some alive node fits, or why none does."""
    gpu = workload.resources.gpu if workload.resources is not None else None
    size = size_of(workload)
    alive = [node for node in nodes if node.alive]
    if gpu is None:
        if any(size.fits(node) for node in alive):
            return Placement(num_cpus=size.cpus, memory_bytes=size.memory_bytes)
        return Unschedulable(f"{size.describe()}: no node has that ({_largest(alive)})")
    tried = []
    for gpu_type in gpu.types:
        placement, why = _offer(gpu_type, gpu.count, [node for node in alive if size.fits(node)])
        if placement is not None:
            return replace(placement, num_cpus=size.cpus, memory_bytes=size.memory_bytes)
        if size.asked and _offer(gpu_type, gpu.count, alive)[0] is not None:
            why = f"no node that has it has {size.describe()} ({_largest(alive)})"
        tried.append(f"{gpu_type} x{gpu.count}: {why}")
    return Unschedulable("; ".join(tried) if tried else "the workload names no GPU type")


def _largest(nodes: Sequence[RayNode]) -> str:
    """The most CPU cores and memory one alive node has, for an Unschedulable message."""
    if not nodes:
        return "no node is alive"
    cpus = max(node.resources.get("CPU", 0) for node in nodes)
    memory = max(node.resources.get("memory", 0) for node in nodes)
    return f"at most {cpus:g} CPUs and {_gib(int(memory))} memory on one node"


def _gib(size: int | None) -> str:
    return f"{(size or 0) / 2**30:.3g}Gi"


def offered_types(nodes: Sequence[RayNode]) -> tuple[str, ...]:
    """The GPU types alive nodes offer (by resource or label), sorted."""
    found: set[str] = set()
    for node in nodes:
        if not node.alive:
            continue
        found.update(name[len(GPU_TYPE_RESOURCE) :] for name in node.resources if name.startswith(GPU_TYPE_RESOURCE))
        if GPU_TYPE_LABEL in node.labels and node.resources.get(RAY_GPU, 0) > 0:
            found.add(node.labels[GPU_TYPE_LABEL])
    return tuple(sorted(found))


def _offer(gpu_type: str, count: int, alive: Sequence[RayNode]) -> tuple[Placement | None, str]:
    resource = GPU_TYPE_RESOURCE + gpu_type
    having = [node for node in alive if node.resources.get(resource, 0) > 0]
    labelled = [node for node in alive if node.labels.get(GPU_TYPE_LABEL) == gpu_type]
    for node in having:
        if node.resources[resource] >= count:
            real = count if node.resources.get(RAY_GPU, 0) >= count else None
            return Placement(gpu_type, real, {resource: float(count)}), ""
    for node in labelled:
        if node.resources.get(RAY_GPU, 0) >= count:
            return Placement(gpu_type, count, {}, {GPU_TYPE_LABEL: gpu_type}), ""
    if not having and not labelled:
        return None, "no node has it"
    most = max(
        [node.resources.get(resource, 0) for node in having] + [node.resources.get(RAY_GPU, 0) for node in labelled]
    )
    return None, f"no node has {count} (at most {most:g} on one node)"
