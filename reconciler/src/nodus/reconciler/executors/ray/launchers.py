"""What each rank of a gang runs, by launcher: the seam between a Job's `launcher` and the member's command.

Who uses it: `gang_coordinator.py`, once per rank and epoch. `Plain` and `Torchrun` run the Job's command as it is on
every rank (torchrun reads its rendezvous from the PET_* variables `gang.rank_env` sets). A launcher that wraps the
command is a module of its own registered in `WRAPPERS`: `Ray` and `Verl` (`ray_launcher.py`: a Ray cluster of the
gang's own, the command on rank 0 with `RAY_ADDRESS`, and for verl `NODUS_VERL_OVERRIDES`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Final

from nodus.errors import ConfigError

from ..workload import Workload
from . import ray_launcher

Wrapper = Callable[[Workload, int, Mapping[str, str]], list[str]]
"""(the workload, the rank, the rank's variables) -> what that rank runs."""

AS_WRITTEN: Final = frozenset({"Plain", "Torchrun"})
WRAPPERS: Final[dict[str, Wrapper]] = {"Ray": ray_launcher.ray_member, "Verl": ray_launcher.verl_member}


def check(workload: Workload) -> None:
    """A ConfigError naming the launcher when nodus cannot start it on a Ray gang (before anything is placed)."""
    launcher = launcher_of(workload)
    if launcher not in AS_WRITTEN and launcher not in WRAPPERS:
        known = ", ".join(sorted([*AS_WRITTEN, *WRAPPERS]))
        raise ConfigError(f"spec.launcher {launcher}: not started on Ray gangs yet (these are: {known})")


def member_command(workload: Workload, rank: int, env: Mapping[str, str]) -> list[str]:
    """The command rank `rank` runs (`check` first: a launcher nodus cannot start is a ConfigError)."""
    check(workload)
    launcher = launcher_of(workload)
    if launcher in AS_WRITTEN:
        return list(workload.command)
    return WRAPPERS[launcher](workload, rank, env)


def launcher_of(workload: Workload) -> str:
    return workload.resources.launcher if workload.resources is not None else "Plain"
