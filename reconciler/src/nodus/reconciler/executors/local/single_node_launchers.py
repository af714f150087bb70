"""How a job's command starts on one node, by its launcher: `Plain` as written, `Torchrun` under `torchrun
--standalone`, `Accelerate` under `accelerate launch`, one process per GPU (one on a CPU host).

Who calls it: `resolve.py`, once per launch of a single-node job (the command already resolved for this host: a
runtime's `python` is the interpreter nodus runs in). A gang's members are launched by the Ray executor's
`launchers.py` instead. The launchers run from that interpreter (`python -m torch.distributed.run`, `python -m
accelerate.commands.launch`), so they are the ones installed with the trainers, whatever else is on PATH; a command
that already starts with `torchrun` or `accelerate` (a Job's own command line) is left as written.

    python -m nodus.runtimes.sft        ->  python -m torch.distributed.run --standalone --nnodes 1
                                            --nproc-per-node 1 -m nodus.runtimes.sft
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

from nodus.errors import ConfigError

ALREADY_LAUNCHED: Final = frozenset({"torchrun", "accelerate"})


def _target(command: Sequence[str], python: str) -> list[str]:
    """What the launcher runs in each process: `-m MODULE ...` or `SCRIPT ...` of the interpreter, else the command
    itself as a program (`--no-python`)."""
    if command[0] == python and len(command) >= 3 and command[1] == "-m":
        return ["-m", *command[2:]]
    if command[0] == python and len(command) >= 2 and not command[1].startswith("-"):
        return list(command[1:])
    return ["--no-python", *command]


def _torchrun(command: Sequence[str], processes: int, python: str) -> list[str]:
    standalone = ["--standalone", "--nnodes", "1", "--nproc-per-node", str(processes)]
    return [python, "-m", "torch.distributed.run", *standalone, *_target(command, python)]


def torchrun_across_nodes(command: Sequence[str], python: str) -> list[str]:
    """`command` under torchrun with no rendezvous of its own: it reads it from the PET_* variables a gang's rank
    has (`executors/ray/gang.rank_env`). For a managed runtime on a member of a TrainingJob's gang."""
    return [python, "-m", "torch.distributed.run", *_target(command, python)]


def _accelerate(command: Sequence[str], processes: int, python: str) -> list[str]:
    target = _target(command, python)
    if target[0] == "--no-python":
        target[0] = "--no_python"
    cpu = ["--cpu"] if processes == 0 else []
    machine = ["--num_machines", "1", "--num_processes", str(max(1, processes)), *cpu]
    return [python, "-m", "accelerate.commands.launch", *machine, *target]


LAUNCHERS: Final[dict[str, Callable[[Sequence[str], int, str], list[str]]]] = {
    "Torchrun": lambda command, gpus, python: _torchrun(command, max(1, gpus), python),
    "Accelerate": _accelerate,
}
"""Launchers that wrap the command; `Plain` runs it as written. A new launcher is a function here."""


def launched(command: Sequence[str], launcher: str, gpus: int, python: str, label: str) -> tuple[str, ...]:
    """`command` as `launcher` starts it on this node with `gpus` GPUs (0: a CPU host, one process)."""
    if launcher == "Plain" or command[0] in ALREADY_LAUNCHED:
        return tuple(command)
    wrap = LAUNCHERS.get(launcher)
    if wrap is None:
        known = ", ".join(["Plain", *LAUNCHERS])
        raise ConfigError(f"{label}: launcher {launcher!r} does not start single-node jobs here (known: {known})")
    return tuple(wrap(command, gpus, python))
