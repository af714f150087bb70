"""The coordinator of a gang on Ray: assemble it, check its network, run every rank, restart it after a loss.

Who runs it: `node_session.main`, for a workload of several nodes; it is the Ray job's entrypoint (the executor
submits it reserving nothing, so Ray runs it on the head) and its stdout is the Ray job's log, which is all the
controller's host reads of the run (`status_stream.py`).

Assembly: one `STRICT_SPREAD` placement group (a bundle per node, `gang.bundles`), then one `GangMember` actor in
each bundle, each member's address, and the network check (every member opens a TCP port; every other member
connects to it), all within `startupTimeout`. A try that does not finish in time removes the group (every member
released) and tries again, up to `maxAssemblyRetries` times, then the run fails with `GangAssemblyTimeout`.

An epoch: the command on every member at once, with the seeds' rank variables (`gang.rank_env`), each rank's
output streamed into the log as it comes, every line prefixed `[rank N] `; the coordinator's own lines are
`[gang] `. The run succeeds when every rank exits 0 and fails (`TrainerFailed`) when one exits non-zero: the
others are stopped.

A lost member (its actor gone: the node, its raylet or its Ray worker died) stops the epoch on every rank: the
survivors' process trees are stopped and their actors killed before anything else starts, so no process of the old
epoch is left to join the new rendezvous. The placement group stays, so the surviving machines are kept and Ray
places only the lost bundle again; the gang then reassembles (the same bound and retries) and the next epoch starts
every rank from the latest committed gang checkpoint (`NODUS_RESTORE_URI`, `gang_checkpoints.py`).
`recovery.maxAttempts` bounds the restarts; past it the run fails with `NodeLost` and the first loss's message.
A stop (Ray's SIGTERM: suspend or cancel) is never turned into a restart: the members are stopped and the
coordinator exits with no final marker, as the executor expects of a stopped run.

Attempts: every rank of every epoch is one attempt (`status.gang.attempts`, which `nodus get attempts -l
nodus.dev/rank=N` lists): the node and address it ran on, when its machine was first asked for and when it was up
and checked (its boot, or for a restarted epoch its restore, in `readySeconds`), the checkpoint it restored from, how
it ended (Succeeded; Failed with TrainerFailed or NodeLost for the rank that ended the epoch; Cancelled for the ranks
stopped with it) and its cost (the member's price from the request to the end).

What the members run is the gang's kind: a Job's command on every rank (`launchers.CommandGang`), or for a
TrainingJob a node session on every rank, rank 0's being the run's (`gang_sessions.SessionGang`: each member has
its supervisor, attempt API, inputs and state folder; the coordinator still bills the whole gang and holds its cap).

Not done yet: nodes that offer their GPU type only by label (a bundle can only reserve resources).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, Final, TextIO

from nodus.errors import ConfigError
from nodus.specs.status_names import Phase, Reason
from nodus.specs.topology import Topology

from ...session.cost import CostMeter, usd
from ..workload import Workload
from . import gang, gang_checkpoints, status_stream
from .gang_member import STOP_GRACE_S, GangMember
from .gang_sessions import SessionGang, runs_sessions
from .launchers import CommandGang
from .placement import RAY_GPU, Placement
from .submission import run_number

POLL_S: Final = 0.5
"""How often the coordinator reads the ranks' output and looks for an ended or lost member."""
CALL_TIMEOUT_S: Final = 10.0
"""The longest one call to a member may take before the coordinator moves on (a member that does not answer is
not lost until Ray says its actor died)."""


@dataclass(frozen=True)
class Member:
    """One rank of the current epoch: its actor, and where it runs."""

    rank: int
    actor: Any
    ip: str
    node: str


@dataclass(frozen=True)
class EpochEnd:
    """How an epoch ended: every rank succeeded, one failed, or one was lost (`rank` None: all succeeded)."""

    phase: str
    rank: int | None
    message: str
    lost: bool = False
    reason: str | None = None
    """Why the rank ended as it did, where its session said (a TrainingJob's member)."""


class GangCoordinator:
    """One run of a gang, from assembly to the final marker, written onto `out`."""

    def __init__(
        self,
        workload: Workload,
        submission_id: str,
        placement: Placement,
        out: TextIO,
        cwd: str | None,
        jobs: Path,
        base_cost: Decimal = Decimal(0),
        *,
        run: str = "launch",
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.workload = workload
        # What the members run and how their output is read: a Job's command, or a TrainingJob's node sessions.
        self.kind: CommandGang | SessionGang = (
            SessionGang(workload, environ or {}, jobs, run, submission_id)
            if runs_sessions(workload)
            else CommandGang(workload)
        )
        self.submission_id = submission_id
        self.out = out
        self.cwd = cwd
        self.wanted = gang.bundles(workload, placement)
        resources = workload.resources
        self.timeout_s = resources.startup_timeout_s if resources is not None else 900.0
        self.tries = 1 + (resources.max_assembly_retries if resources is not None else 2)
        self.max_restarts = resources.max_restarts if resources is not None else 3
        self.checkpoints = gang_checkpoints.folder(jobs, workload.project, workload.name)
        nodes = len(self.wanted)
        self.topology = Topology(nodes=nodes, gpus_per_node=gang.gpus_per_node(workload))
        # Every member is billed at the host's price from the first request for the gang until it is released,
        # waiting for the others included (the seeds' "Cost" of a gang), on top of what earlier runs cost.
        self.meter = CostMeter(
            base=base_cost,
            price_per_hour=workload.price_per_hour * nodes,
            max_cost_usd=workload.max_cost_usd,
            accounting_interval_s=workload.intervals.accounting_s,
        )
        self._accounted = 0.0
        self._gang: dict[str, Any] = {"epoch": 0, "restarts": 0, "members": [], "attempts": []}
        self._run = run_number(submission_id)
        self._requested_at = 0.0
        """When this epoch's machines were first asked for (its first assembly try)."""
        self._assembly_failure = ""
        """Why the last assembly try failed (the run's message once every try has)."""
        self.stopping = threading.Event()
        self._group: Any = None
        self._group_tries = 0
        self._offsets: dict[int, int] = {}
        self._tails: dict[int, bytes] = {}

    # --- the run --------------------------------------------------------------------------------------------

    def run(self) -> int:
        import ray

        try:
            self.kind.check()
        except ConfigError as exc:
            return self._final(Phase.FAILED, Reason.LAUNCH_FAILED, exc.message)
        ray.init(address="auto", namespace=gang.NAMESPACE, log_to_driver=False, logging_level=logging.ERROR)
        self.checkpoints.mkdir(parents=True, exist_ok=True)
        self.meter.started()
        first_loss: str | None = None
        epoch = 1
        try:
            while True:
                members = self._assemble(epoch)
                if members is None:
                    if self.stopping.is_set():
                        return self._stopped()
                    return self._final(Phase.FAILED, Reason.GANG_ASSEMBLY_TIMEOUT, self._assembly_failure)
                end = self._epoch(members, epoch)
                if self.stopping.is_set():
                    return self._stopped()
                if end.phase == Phase.SUSPENDED:
                    return self._final(Phase.SUSPENDED, Reason.MAX_COST_REACHED, end.message)
                if not end.lost:
                    failed = end.reason or Reason.TRAINER_FAILED
                    reason = Reason.TRAINER_SUCCEEDED if end.phase == Phase.SUCCEEDED else failed
                    return self._final(end.phase, reason, end.message)
                first_loss = first_loss or end.message
                if epoch > self.max_restarts:
                    spent = f"{self.max_restarts} restart{'s' if self.max_restarts != 1 else ''}"
                    message = f"{first_loss}; {spent} spent (recovery.maxAttempts {self.max_restarts})"
                    return self._final(Phase.FAILED, Reason.NODE_LOST, message)
                self._say(
                    f"epoch {epoch} stopped on every rank: {end.message}; restarting the gang at epoch {epoch + 1}"
                )
                self._gang["restarts"] = epoch
                epoch += 1
        finally:
            self._remove_group()

    def _stopped(self) -> int:
        """A stop (suspend or cancel) completes: no restart and no final marker (the executor asked for it and
        records how it ended), but the cost so far, which a resumed run starts from."""
        self.meter.ended()
        self._status(Phase.RUNNING, None, "stopping: every member stopped")
        return 1

    # --- assembly -------------------------------------------------------------------------------------------

    def _assemble(self, epoch: int) -> list[Member] | None:
        """The gang's members, placed, up and checked; None after `tries` assemblies that failed (or a stop)."""
        self._requested_at = time.time()
        for attempt in range(1, self.tries + 1):
            if self.stopping.is_set():
                return None
            self._status(
                Phase.PENDING if epoch == 1 else Phase.RUNNING,
                Reason.GANG_ASSEMBLING,
                f"assembling {len(self.wanted)} nodes for epoch {epoch} (try {attempt} of {self.tries})",
            )
            group = self._placement_group()
            members: list[Member] = []
            failure = self._bring_up(group, members)
            if failure is None:
                self._say(
                    f"epoch {epoch} assembled: "
                    + ", ".join(f"rank {m.rank} on node {m.node[:12]} ({m.ip})" for m in members)
                    + "; network check passed"
                )
                self._gang.update(epoch=epoch, members=[{"rank": m.rank, "node": m.node, "ip": m.ip} for m in members])
                self._started_attempts(members, epoch)
                self._status(Phase.RUNNING, None, f"epoch {epoch}: {len(members)} ranks running")
                return members
            self._kill(members)
            self._remove_group()
            self._assembly_failure = (
                f"gang of {len(self.wanted)} nodes ({gang.shape(self.wanted[0])} each, {gang.STRATEGY}) "
                f"{failure} (try {attempt} of {self.tries}); every member released"
            )
            self._say(f"assembly failed: {self._assembly_failure}")
        return None

    def _placement_group(self) -> Any:
        """The gang's group: the one this run holds (kept across a restart: its survivors stay), else a new one."""
        import ray
        from ray.util.placement_group import placement_group

        if self._group is not None:
            return self._group
        self._group_tries += 1
        name = gang.placement_group_name(self.submission_id, self._group_tries)
        try:
            self._group = ray.util.get_placement_group(name)
        except ValueError:  # not made yet: this is the run's first coordinator
            self._group = placement_group(self.wanted, strategy=gang.STRATEGY, name=name)
        return self._group

    def _bring_up(self, group: Any, members: list[Member]) -> str | None:
        """Place the group, start a member in each bundle (appended to `members`) and check the network, all before
        `startupTimeout`; None when done, else what did not happen in time."""
        import ray
        from ray.exceptions import GetTimeoutError, RayError

        deadline = time.monotonic() + self.timeout_s

        def left() -> float:
            return max(0.0, deadline - time.monotonic())

        actor_class: Any = ray.remote(GangMember)
        while True:
            if not group.wait(timeout_seconds=left()):
                return f"was not placed within startupTimeout {self.timeout_s:g}s: the cluster has fewer nodes that fit"
            actors = [actor_class.options(**self._options(rank)).remote() for rank in range(len(self.wanted))]
            try:
                found = ray.get([actor.address.remote() for actor in actors], timeout=left() or 0.001)
                members.extend(
                    Member(rank, actor, where["ip"], where["node"])
                    for rank, (actor, where) in enumerate(zip(actors, found, strict=True))
                )
                ports = ray.get([member.actor.listen.remote() for member in members], timeout=left() or 0.001)
                checks = [
                    (source.rank, target.rank, source.actor.reachable.remote(target.ip, ports[target.rank]))
                    for source in members
                    for target in members
                    if source.rank != target.rank
                ]
                answers = ray.get([ref for _, _, ref in checks], timeout=left() or 0.001)
                break
            except GetTimeoutError:
                members[:] = _unplaced(actors)
                return (
                    f"did not start every member and pass the network check within startupTimeout {self.timeout_s:g}s"
                )
            except RayError as exc:
                # A bundle still on a node that died (Ray has not marked it dead yet, so the group looked placed):
                # its member dies at once. Start again once Ray has placed the bundle elsewhere, within the bound.
                self._kill(_unplaced(actors))
                members.clear()
                if left() <= 0:
                    return f"lost a member while it started: {_first_line(exc)}"
                time.sleep(min(POLL_S * 4, left()))
        problems = [
            f"rank {a} cannot reach rank {b} at {text}" for (a, b, _), text in zip(checks, answers, strict=True) if text
        ]
        if problems:
            return "failed the network check: " + "; ".join(problems)
        return None

    def _options(self, rank: int) -> dict[str, Any]:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        bundle = self.wanted[rank]
        options: dict[str, Any] = {"memory": int(bundle["memory"])} if bundle.get("memory") else {}
        return {
            **options,
            "num_cpus": bundle["CPU"],
            "num_gpus": bundle.get(RAY_GPU, 0),
            "resources": {key: value for key, value in bundle.items() if key not in ("CPU", RAY_GPU, "memory")},
            "scheduling_strategy": PlacementGroupSchedulingStrategy(self._group, placement_group_bundle_index=rank),
            "max_restarts": 0,  # a lost member is the coordinator's to handle: the whole gang restarts
            "max_concurrency": 4,  # `output` and `stop` answer while `run` waits on the command
        }

    # --- an epoch -------------------------------------------------------------------------------------------

    def _epoch(self, members: list[Member], epoch: int) -> EpochEnd:
        import ray
        from ray.exceptions import GetTimeoutError, RayError

        ips = [member.ip for member in members]
        restore = gang_checkpoints.latest_committed(self.checkpoints) if epoch > 1 else None
        if epoch > 1:
            self._say(f"epoch {epoch} restores from {restore if restore else 'nothing (no checkpoint was committed)'}")
        checkpoint_uri = gang_checkpoints.uri(self.checkpoints)
        restore_uri = gang_checkpoints.uri(restore) if restore is not None else None
        self._offsets = {member.rank: 0 for member in members}
        self._tails = {member.rank: b"" for member in members}
        runs: dict[Any, Member] = {}
        for member in members:
            env = gang.rank_env(
                self.workload, member.rank, ips, epoch=epoch, checkpoint_uri=checkpoint_uri, restore_uri=restore_uri
            )
            command, variables = self.kind.member(member.rank, member.node, env, epoch)
            runs[member.actor.run.remote(command, variables, self.cwd, self.kind.node_variables)] = member
        end: EpochEnd | None = None
        alive = list(members)
        while runs and end is None and not self.stopping.is_set():
            capped = self._account()
            if capped is not None:
                end = EpochEnd(Phase.SUSPENDED, None, capped)
                break
            ready, _ = ray.wait(list(runs), num_returns=1, timeout=POLL_S)
            for member in list(alive):
                lost = self._drain(member, epoch)
                if lost is not None:
                    end = end or lost
                    alive.remove(member)
            for ref in ready:
                member = runs.pop(ref)
                try:
                    status = ray.get(ref, timeout=CALL_TIMEOUT_S)
                except GetTimeoutError:
                    continue
                except RayError as exc:
                    end = end or self._loss(member, epoch, exc)
                    continue
                if member in alive:
                    self._drain(member, epoch, final=True)
                if status != 0 and end is None:
                    message, reason = self.kind.ended(member.rank, status)
                    end = EpochEnd(Phase.FAILED, member.rank, message, reason=reason)
        others = [member for member in alive if any(m is member for m in runs.values())]
        self._stop(others, epoch)
        self._kill(members)
        if end is None and not self.stopping.is_set():
            end = EpochEnd(Phase.SUCCEEDED, None, f"all {len(members)} ranks exited 0")
        self._ended_attempts(epoch, end, restore_uri)
        return end or EpochEnd(Phase.FAILED, None, "stopped")

    # --- attempts -------------------------------------------------------------------------------------------

    def _started_attempts(self, members: list[Member], epoch: int) -> None:
        """An attempt per rank of the epoch just assembled, Running."""
        now = time.time()
        for member in members:
            self._gang["attempts"].append(
                {
                    "rank": member.rank,
                    "epoch": epoch,
                    "run": self._run,
                    "node": member.node,
                    "ip": member.ip,
                    "start": "Boot" if epoch == 1 else "Restore",
                    "requestedAt": round(self._requested_at, 3),
                    "readyAt": round(now, 3),
                    "readySeconds": round(now - self._requested_at, 3),
                    "phase": Phase.RUNNING,
                }
            )

    def _ended_attempts(self, epoch: int, end: EpochEnd | None, restore_uri: str | None) -> None:
        """The epoch's attempts, ended: how, and what each member cost from its request to now."""
        now = time.time()
        for row in self._gang["attempts"]:
            if row["epoch"] != epoch or row["run"] != self._run or row["phase"] != Phase.RUNNING:
                continue
            row.update(endedAt=round(now, 3), **_attempt_end(row["rank"], end))
            if restore_uri is not None:
                row["restoreFrom"] = restore_uri
            seconds = Decimal(str(max(0.0, now - row["requestedAt"])))
            row["costUSD"] = usd(self.workload.price_per_hour * seconds / Decimal(3600))

    def _drain(self, member: Member, epoch: int, *, final: bool = False) -> EpochEnd | None:
        """Write what the member's command printed since the last read; its loss when its actor is gone."""
        import ray
        from ray.exceptions import GetTimeoutError, RayError

        try:
            data = ray.get(member.actor.output.remote(self._offsets[member.rank]), timeout=CALL_TIMEOUT_S)
        except GetTimeoutError:
            return None
        except RayError as exc:
            self._flush_tail(member.rank)
            return self._loss(member, epoch, exc)
        self._offsets[member.rank] += len(data)
        whole, _, rest = (self._tails[member.rank] + data).rpartition(b"\n")
        self._tails[member.rank] = rest
        if whole or b"\n" in data:
            self._rank_lines(member.rank, whole.decode("utf-8", errors="replace").split("\n"))
        if final:
            self._flush_tail(member.rank)
        return None

    def _flush_tail(self, rank: int) -> None:
        if self._tails.get(rank):
            self._rank_lines(rank, [self._tails[rank].decode("utf-8", errors="replace")])
            self._tails[rank] = b""

    def _loss(self, member: Member, epoch: int, exc: BaseException) -> EpochEnd:
        where = f"node {member.node[:12]} ({member.ip})" if member.node else "its node"
        message = f"rank {member.rank} lost at epoch {epoch} on {where}: {_first_line(exc)}"
        return EpochEnd(Phase.FAILED, member.rank, message, lost=True)

    def _stop(self, members: list[Member], epoch: int) -> None:
        """Stop the commands still running (their process trees), keeping their last lines."""
        import ray
        from ray.exceptions import RayError

        refs = [member.actor.stop.remote() for member in members]
        with contextlib.suppress(RayError):
            ray.get(refs, timeout=STOP_GRACE_S + CALL_TIMEOUT_S)
        for member in members:
            self._drain(member, epoch, final=True)

    def _kill(self, members: list[Member]) -> None:
        import ray

        for member in members:
            with contextlib.suppress(Exception):  # already gone with its node
                ray.kill(member.actor, no_restart=True)

    def _remove_group(self) -> None:
        from ray.util.placement_group import remove_placement_group

        if self._group is not None:
            with contextlib.suppress(Exception):
                remove_placement_group(self._group)
            self._group = None

    # --- the log --------------------------------------------------------------------------------------------

    def _rank_lines(self, rank: int, lines: list[str]) -> None:
        text, changed = self.kind.lines(rank, lines)
        self._write(text)
        if changed:  # rank 0's session reported a new status: the run's, under the gang's fields
            self._status(Phase.RUNNING, None, f"epoch {self._gang['epoch']}: {len(self.wanted)} ranks running")

    def _say(self, text: str) -> None:
        self._write(status_stream.escape(f"[gang] {text}") + "\n")

    def _account(self) -> str | None:
        """Every accounting interval: the cost so far as a status marker; why the gang must stop for its cap (one
        more interval would pass it), else None."""
        now = time.monotonic()
        if now - self._accounted < self.meter.accounting_interval_s:
            return None
        self._accounted = now
        self._status(Phase.RUNNING, None, f"epoch {self._gang['epoch']}: {len(self.wanted)} ranks running")
        return self.meter.over_cap(self.meter.total())

    def _report(self, phase: str, reason: str | None, message: str) -> dict[str, Any]:
        report: dict[str, Any] = {"phase": phase, "message": message}
        if reason is not None:
            report["reason"] = reason
        report.update(
            topology=self.topology.to_dict(),
            gang=dict(self._gang),
            costUSD=usd(self.meter.total()),
            maxCostUSD=self.meter.max_cost_usd,
        )
        return report

    def _status(self, phase: str, reason: str | None, message: str) -> None:
        self._write(status_stream.marker("status", self.kind.merged(self._report(phase, reason, message))))

    def _final(self, phase: str, reason: str, message: str) -> int:
        self.meter.ended()
        self._write(status_stream.marker("final", self.kind.final(self._report(phase, reason, message))))
        return 0 if phase == Phase.SUCCEEDED else 1

    def _write(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()


def _attempt_end(rank: int, end: EpochEnd | None) -> dict[str, str]:
    """How one rank's attempt ended, given how its epoch did."""
    if end is None:
        return {"phase": Phase.CANCELLED, "reason": Reason.CANCEL_REQUESTED, "message": "the run was stopped"}
    if end.phase == Phase.SUCCEEDED:
        return {"phase": Phase.SUCCEEDED, "reason": Reason.TRAINER_SUCCEEDED}
    if end.rank == rank:
        reason = Reason.NODE_LOST if end.lost else Reason.TRAINER_FAILED
        return {"phase": Phase.FAILED, "reason": reason, "message": end.message}
    if end.phase == Phase.SUSPENDED:
        return {"phase": Phase.SUSPENDED, "reason": Reason.MAX_COST_REACHED, "message": end.message}
    return {
        "phase": Phase.CANCELLED,
        "reason": Reason.CANCEL_REQUESTED,
        "message": f"stopped with the epoch: {end.message}",
    }


def _unplaced(actors: list[Any]) -> list[Member]:
    """Members started but not yet known where (their address not read): for stopping them."""
    return [Member(rank, actor, "", "") for rank, actor in enumerate(actors)]


def _first_line(exc: BaseException) -> str:
    """A Ray error as a clause of one line: its class, then its first line, cut at a word near 200 characters."""
    text = " ".join(str(exc).strip().splitlines()[:1]) or "no message"
    if len(text) > 200:
        text = text[:200].rsplit(" ", 1)[0] + " ..."
    return f"{type(exc).__name__}: {text}"


def run_gang(
    workload: Workload,
    submission_id: str,
    placement: Placement,
    out: TextIO,
    cwd: str | None,
    jobs: Path,
    base_cost: Decimal = Decimal(0),
    *,
    run: str = "launch",
    environ: Mapping[str, str] | None = None,
) -> int:
    """Run the gang to its end (node_session's entrypoint for a workload of several nodes); the exit status.
    `base_cost`: what the run's earlier sessions cost (a resumed run's); `run`: launch or resume (a TrainingJob's
    members resume their suspended jobs); `environ`: the coordinator's environment, which a TrainingJob's members
    take their inputs from."""
    coordinator = GangCoordinator(
        workload, submission_id, placement, out, cwd, jobs, base_cost, run=run, environ=environ
    )
    signal.signal(signal.SIGTERM, lambda number, frame: coordinator.stopping.set())
    return coordinator.run()
