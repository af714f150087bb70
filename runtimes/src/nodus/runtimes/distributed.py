"""What a run's processes agree on when it trains on several of them (a gang's ranks, torchrun's workers).

Who calls it: `finetune.py` (the six data-driven runtimes) and `grpo_lora.py`, before the baseline and before
`trainer.train`. With one process every answer is this process's own, and nothing here touches torch.distributed.

Why agreement is needed: a TrainingJob of several nodes runs one trainer per node, each with a state folder of its
own on its own machine. After a lost node the gang restarts (`executors/ray/gang_sessions.py` on the controller's
side): the survivors still hold their checkpoints and baseline, the replacement node holds nothing. Data-parallel
training needs every process to run the same steps and the same collective calls (an evaluation gathers losses
from all ranks), so a process resumes from a checkpoint, or keeps its baseline, only when every process can; else
all of them start that part over together.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Final

CHECKPOINT_PREFIX: Final = "checkpoint-"


def world_size() -> int:
    """How many processes train this run (torch's WORLD_SIZE, which the gang's ranks or torchrun set)."""
    try:
        return max(1, int(os.environ.get("WORLD_SIZE", "1")))
    except ValueError:
        return 1


def rank() -> int:
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


def _group_ready() -> bool:
    if world_size() == 1:
        return False
    import torch.distributed as dist

    return bool(dist.is_available() and dist.is_initialized())


def _minimum(value: int) -> int:
    """The smallest of every process's `value` (this process's own when it trains alone)."""
    if not _group_ready():
        return value
    import torch
    import torch.distributed as dist

    # NCCL reduces only tensors on the GPU; gloo (CPU hosts) those in memory.
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else None
    found = torch.tensor([value], dtype=torch.long, device=device)
    dist.all_reduce(found, op=dist.ReduceOp.MIN)
    return int(found.item())


def everyone(flag: bool) -> bool:
    """True when `flag` holds in every process."""
    return _minimum(1 if flag else 0) == 1


def checkpoints(folder: Path) -> dict[int, Path]:
    """The complete TRL checkpoints in `folder` (those with trainer_state.json), by step."""
    found: dict[int, Path] = {}
    for child in folder.glob(f"{CHECKPOINT_PREFIX}*"):
        step = child.name.removeprefix(CHECKPOINT_PREFIX)
        if step.isdigit() and (child / "trainer_state.json").is_file():
            found[int(step)] = child
    return found


def agreed_checkpoint(folder: Path, log: Callable[[str], None] | None = None) -> Path | None:
    """The newest checkpoint every process holds: this process's newest when it trains alone; with several, the
    newest step all of them have (None, so that all start over, where one has none of it)."""
    found = checkpoints(folder)
    newest = max(found) if found else -1
    if not _group_ready():
        return found.get(newest)
    step = _minimum(newest)
    if step >= 0 and everyone(step in found):
        return found[step]
    if found and log is not None:
        log(
            f"not resuming from {found[newest].name}: not every one of the {world_size()} processes holds a "
            "checkpoint of that step (a node was replaced); all start over"
        )
    return None
