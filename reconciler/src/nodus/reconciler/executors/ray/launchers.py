"""What each rank of a gang runs, by launcher: the seam between a Job's `launcher` and the member's command.

Who uses it: `gang_coordinator.py`, once per rank and epoch. `Plain` and `Torchrun` run the Job's command as it is on
every rank (torchrun reads its rendezvous from the PET_* variables `gang.rank_env` sets). A launcher that wraps the
command is a module of its own registered in `WRAPPERS`: `Ray` and `Verl` (`ray_launcher.py`: a Ray cluster of the
gang's own, the command on rank 0 with `RAY_ADDRESS`, and for verl `NODUS_VERL_OVERRIDES`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from nodus.errors import ConfigError

from ..workload import Workload
from . import ray_launcher, status_stream

Wrapper = Callable[[Workload, int, Mapping[str, str]], list[str]]
"""(the workload, the rank, the rank's variables) -> what that rank runs."""

AS_WRITTEN: Final = frozenset({"Plain", "Torchrun"})
WRAPPERS: Final[dict[str, Wrapper]] = {"Ray": ray_launcher.ray_member, "Verl": ray_launcher.verl_member}
NODE_VARIABLES: Final[dict[str, tuple[str, ...]]] = {
    "Ray": ray_launcher.NODE_VARIABLES,
    "Verl": ray_launcher.NODE_VARIABLES,
}
"""What a wrapper's rank needs of its node's environment besides the base one (`process_env.py`)."""


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


class CommandGang:
    """The gang of a Job: every member runs the Job's command (by its launcher), and what a member prints is its
    rank's text, written `[rank N] ...` into the Ray job's log. `gang_sessions.SessionGang` is a TrainingJob's."""

    def __init__(self, workload: Workload) -> None:
        self.workload = workload

    @property
    def node_variables(self) -> tuple[str, ...]:
        """What a rank needs of its node's environment besides the base one: Ray's settings where the launcher
        starts Ray nodes of its own (they ask for the token the node's Ray holds), nothing for a plain command."""
        return NODE_VARIABLES.get(launcher_of(self.workload), ())

    def check(self) -> None:
        check(self.workload)

    def member(self, rank: int, node: str, env: Mapping[str, str], epoch: int) -> tuple[list[str], dict[str, str]]:
        return member_command(self.workload, rank, env), {**self.workload.env, **env}

    def lines(self, rank: int, lines: list[str]) -> tuple[str, bool]:
        return "".join(status_stream.escape(f"[rank {rank}] {line}") + "\n" for line in lines), False

    def merged(self, report: dict[str, Any]) -> dict[str, Any]:
        return report

    def ended(self, rank: int, exit_status: int) -> tuple[str, str | None]:
        return f"rank {rank} exited with status {exit_status}", None

    def final(self, report: dict[str, Any]) -> dict[str, Any]:
        return report
