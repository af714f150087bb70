"""A TrainingJob's gang: every member runs a node session of its own, and rank 0's session is the run's.

Who uses it: `gang_coordinator.py` (what each member runs, and how a member's output is read: `SessionRanks`) and
`executor.py` (a session gang's inputs travel like a single-node run's).

A Job's gang runs its command on every member (`launchers.py`). A TrainingJob's trainer needs more on each node:
its inputs (model, data, grader image, manifests), the attempt API it reports to, grading in the container
sandbox, a state folder to resume from. That is what a node session gives a single-node run, so each member runs
one (`python -m ...node_session`) for a copy of the workload made one node's (`member_workload`): the rank's
variables in its environment (WORLD_SIZE, RANK, MASTER_ADDR, ... from `gang.rank_env`, so the trainer's
torch.distributed group spans the gang), priced at nothing (the coordinator bills the whole gang and holds its cap),
and for a `Torchrun` runtime its command under torchrun, which reads the rendezvous from the rank's PET_* variables.

Each member's session writes markers, as a single-node run's does. Rank 0's are the run's: its status (merged with
the gang's topology, members, attempts and cost), events, gradings and output manifest go into the Ray job's log as
they are; the other ranks' markers are read for how their session ended and otherwise dropped. Every rank's trainer
lines are written `[rank N] ...`, like a Job gang's.

Where each member keeps its job folder: rank 0 in the node jobs folder itself (on a shared filesystem the
controller's host reads the run's outputs there, as for a single-node run), the others in a folder of their own
below it (`.gang-ranks/rank-N-NODE`), so ranks that share a machine or a filesystem never share a job folder.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from nodus.errors import ConfigError
from nodus.specs.status_names import Phase, Reason

from ..local.single_node_launchers import torchrun_across_nodes
from ..process_env import NODE_SESSION_SETTINGS, secret_variables
from ..protocol import WAIT_PHASES
from ..workload import Workload
from . import gang, session_variables, status_stream
from .launchers import launcher_of

SESSION_KINDS: Final = frozenset({"TrainingJob"})
"""Workload kinds whose gang members run node sessions (a Job's run its command)."""
LAUNCHERS_ACROSS_NODES: Final = frozenset({"Plain", "Torchrun"})
"""A runtime's launchers a session gang starts: Plain (one trainer per node, torch's env:// variables set by the
gang) and Torchrun (torchrun on every node, its rendezvous from the PET_* variables)."""
RANKS_FOLDER: Final = ".gang-ranks"
MEMBER_MODULE: Final = "nodus.reconciler.executors.ray.node_main"
"""What a member runs: session_variables.main, as every Ray job the executor submits does (`executor.py`)."""
GANG_OWNED: Final = frozenset({"topology", "gang", "costUSD", "maxCostUSD"})
"""Status fields the coordinator writes over rank 0's: the gang's shape and the whole gang's cost."""


def runs_sessions(workload: Workload) -> bool:
    return workload.key.kind in SESSION_KINDS


def member_jobs_root(jobs_root: Path, rank: int, node: str) -> Path:
    """Rank 0's: the node jobs folder itself; another rank's: a folder of its own and its node's, so that a rank
    placed on another node after a loss starts in a folder of its own (its trainer then holds no checkpoint, and the
    others start over with it) even where the nodes share a filesystem and the lost node's processes linger."""
    return jobs_root if rank == 0 else jobs_root / RANKS_FOLDER / f"rank-{rank}-{node[:12] or 'node'}"


def member_workload(workload: Workload, env: Mapping[str, str]) -> Workload:
    """The workload one member's session runs: one node's, with the rank's variables, priced at nothing."""
    command = list(workload.command)
    if launcher_of(workload) == "Torchrun":
        # Without --standalone or --nnodes: torchrun takes the gang's rendezvous from PET_* (gang.rank_env).
        command = torchrun_across_nodes(command, command[0])
    resources = workload.resources.model_copy(update={"nodes": 1, "launcher": "Plain"}) if workload.resources else None
    return workload.with_changes(
        command=tuple(command),
        env={**workload.env, **env},
        resources=resources,
        price_per_hour_usd="0",
        max_cost_usd=None,
    )


class SessionGang:
    """The gang of a TrainingJob: what each member runs (a node session), and its output read as node sessions
    write it: rank 0's markers are the run's, every rank's text is its trainer's, and each rank's final marker says
    how its session ended. `environ` is the coordinator's (the registry channel and the inputs it names travel on
    to every member); only rank 0 publishes outputs, under the run's submission id."""

    def __init__(
        self, workload: Workload, environ: Mapping[str, str], jobs_root: Path, run_mode: str, submission_id: str
    ) -> None:
        self.workload = workload
        self.environ = dict(environ)
        self.jobs_root = jobs_root
        self.run_mode = run_mode
        self.submission_id = submission_id
        self.status: dict[str, Any] | None = None
        """Rank 0's latest status marker."""
        self.finals: dict[int, dict[str, Any]] = {}

    @property
    def node_variables(self) -> tuple[str, ...]:
        """What a member's node session needs of its node's environment besides the base one: the registry
        credentials it fetches the inputs with, and the variables the run's Secrets are read from (its supervisor
        reads them)."""
        refs = [ref.model_dump(mode="json") for ref in self.workload.secrets]
        return (*NODE_SESSION_SETTINGS, *secret_variables(refs))

    def check(self) -> None:
        """A ConfigError naming the launcher when a session gang cannot start it (before anything is placed)."""
        launcher = launcher_of(self.workload)
        if launcher not in LAUNCHERS_ACROSS_NODES:
            known = ", ".join(sorted(LAUNCHERS_ACROSS_NODES))
            raise ConfigError(f"launcher {launcher}: a TrainingJob of several nodes starts {known} runtimes")

    def member(self, rank: int, node: str, env: Mapping[str, str], epoch: int) -> tuple[list[str], dict[str, str]]:
        """(command, environment) of rank `rank` on the Ray node `node` in `epoch`: a node session of
        `member_workload`; the first epoch of a resumed run resumes the member's suspended job, every other one
        launches a later attempt."""
        self.finals.pop(rank, None)
        variables = {key: self.environ[key] for key in session_variables.PASSED_TO_MEMBERS if self.environ.get(key)}
        variables.update(
            {
                session_variables.WORKLOAD_VARIABLE: member_workload(self.workload, env).to_json(),
                session_variables.RUN_VARIABLE: self.run_mode if epoch == 1 else session_variables.LAUNCH,
                session_variables.JOBS_VARIABLE: str(member_jobs_root(self.jobs_root, rank, node)),
                gang.SUBMISSION_VARIABLE: self.submission_id if rank == 0 else "",
                session_variables.MEMBER_VARIABLE: str(rank),
            }
        )
        return [sys.executable, "-m", MEMBER_MODULE], {**env, **variables}

    def lines(self, rank: int, lines: list[str]) -> tuple[str, bool]:
        """What to write into the Ray job's log for these lines of `rank`'s output, and whether rank 0's status
        changed (the coordinator then writes the merged status)."""
        out: list[str] = []
        changed = False
        for line in lines:
            found = status_stream.read_marker(line)
            if found is None:
                out.append(status_stream.escape(f"[rank {rank}] {status_stream.unescape(line)}") + "\n")
                continue
            kind, record = found
            if not kind:  # torn: its session died writing it
                continue
            if kind == "final":  # the run's final status is the coordinator's to write (`final`)
                self.finals[rank] = record
                continue
            if rank != 0:
                continue
            if kind == "status":
                self.status = {k: v for k, v in record.items() if k not in GANG_OWNED}
                changed = True
            else:  # event, grading, outputs: the run's, as they are
                out.append(status_stream.marker(kind, record))
        return "".join(out), changed

    def merged(self, report: dict[str, Any]) -> dict[str, Any]:
        """The coordinator's `report` over rank 0's status: rank 0's phase, stage and message while the gang runs
        (the gang's own while it assembles or once it ended), the gang's topology, members, attempts and cost."""
        if self.status is None:
            return report
        merged = {**self.status, **_owned(report)}
        if report.get("phase") != Phase.RUNNING or report.get("reason") is not None:
            merged.update({k: report[k] for k in ("phase", "reason", "message") if k in report})
            if "reason" not in report:
                merged.pop("reason", None)
        elif merged.get("phase") in WAIT_PHASES:
            # Rank 0's run ended, the gang not yet (the other ranks are ending, the attempts not yet recorded): an
            # ended phase now would let the controller take this status for the run's last one, which the final
            # status (`final`) is.
            ended = merged.pop("phase")
            merged.pop("reason", None)
            merged.update(phase=Phase.RUNNING, message=f"rank 0 ended {ended}; the gang is ending")
        return merged

    def ended(self, rank: int, exit_status: int) -> tuple[str, str | None]:
        """(message, reason) of a member whose session ended otherwise than Succeeded."""
        final = self.finals.get(rank)
        if final is None:
            return f"rank {rank}'s session ended with status {exit_status} and no final report", None
        reason = final.get("reason")
        return f"rank {rank}: {final.get('message') or final.get('phase')}", reason if isinstance(reason, str) else None

    def final(self, report: dict[str, Any]) -> dict[str, Any]:
        """The run's final status: rank 0's final one (its summary, outputs and all) where the gang succeeded, under
        the gang's fields; the gang's report over rank 0's last status otherwise."""
        final = self.finals.get(0)
        if report.get("phase") == Phase.SUCCEEDED and final is not None:
            return {**{k: v for k, v in final.items() if k not in GANG_OWNED}, **_owned(report)}
        if report.get("phase") == Phase.SUCCEEDED:  # every session exited 0, but rank 0's never said how it ended
            message = "rank 0's session exited 0 without a final report: its run's outcome is unknown"
            report = {**report, "phase": Phase.FAILED, "reason": Reason.TRAINER_FAILED, "message": message}
        return self.merged(report)


def _owned(report: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in report.items() if k in GANG_OWNED}
