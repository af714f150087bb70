"""Compute requests shared by TrainingJob, TrainingRuntime presets and Job: GPUs, nodes, gang placement.

Who uses it: `training.py` and `job.py` embed these parts; the reconciler's estimator and executors read
them. Ranges come from the multi-node guide: 2 to 8 nodes, 1/2/4/8 GPUs per node, a 5-60 minute assembly
bound, and exactly one of `nodes` or `totalGPUs` for a gang.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Literal, Self

from pydantic import Field, model_validator

from nodus.specs.base import SpecModel
from nodus.specs.types import Duration, DurationRange, GpuType, Quantity

Network = Literal["Colocated", "Regional", "Global"]
Transport = Literal["Direct", "Auto"]
Launcher = Literal["Plain", "Torchrun", "Accelerate", "Deepspeed", "Ray", "Verl"]


class GpuRequest(SpecModel):
    """Which GPUs each node gets."""

    type: Annotated[list[GpuType], Field(min_length=1)]
    """Allowed GPU types, any of which will do (each billed at its own rate), e.g. [h100-sxm-80g]."""
    count: Annotated[int, Field(ge=1, le=8)] = 1
    """GPUs per node, 1 to 8."""


class Resources(SpecModel):
    """What one run needs; anything set here wins over the runtime's presets."""

    gpu: GpuRequest | None = None
    """GPUs per node; leave out for a CPU-only run (the local executor on this machine)."""
    nodes: Annotated[int, Field(ge=1, le=8)] = 1
    """Machines in the gang; above 1 the run becomes a multi-node Job."""
    cpu: Annotated[int, Field(ge=1, le=512)] | None = None
    """CPU cores per node."""
    memory: Quantity | None = None
    """Memory per node, e.g. 16Gi."""


class Placement(SpecModel):
    """Where the members of a gang may be and how they connect."""

    network: Network = "Colocated"
    """Colocated: one provider and region; Regional: one region class; Global: anywhere (WANBound)."""
    transport: Transport = "Direct"
    """Direct admits every path that is not relayed; Auto also admits relayed paths (slow, small models)."""
    startup_timeout: Annotated[Duration, DurationRange("5m", "60m")] = timedelta(minutes=15)
    """How long assembly waits for every member to be ready and pass the network check (5m to 60m)."""
    max_assembly_retries: Annotated[int, Field(ge=0, le=10)] = 2
    """Tries to assemble the gang again after an assembly timeout before failing with GangAssemblyTimeout."""


class Distributed(Placement):
    """The gang of a Job: how big it is (exactly one of nodes or totalGPUs) and where it may be placed."""

    nodes: Annotated[int, Field(ge=2, le=8)] | None = None
    """The number of machines, 2 to 8."""
    total_gpus: Annotated[int, Field(ge=1, le=64)] | None = Field(default=None, alias="totalGPUs")
    """The total GPU count; nodus picks the machine shape. A total one machine holds is a single-node Job."""
    gpus_per_node: Literal[1, 2, 4, 8] | None = None
    """GPUs per machine: 1, 2, 4 or 8. Defaults to resources.gpu.count with nodes; picked with totalGPUs."""

    @model_validator(mode="after")
    def _one_size(self) -> Self:
        self.require_exactly_one("nodes", "total_gpus")
        return self


class Recovery(SpecModel):
    """How often a lost node or crashed attempt is restarted from the latest checkpoint."""

    max_attempts: Annotated[int, Field(ge=0, le=20)] = 3
    """Restarts allowed before the run fails (default 3)."""
