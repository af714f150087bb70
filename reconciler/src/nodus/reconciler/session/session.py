"""The job session: everything that runs beside a trainer, wherever the trainer runs.

Who uses it: the local supervisor (`executors/local/supervisor.py`) drives one per run of a job; a Ray node
will drive one the same way. A session holds

- the attempt API on a Unix socket (`attempt_api.py`), grading with its own `GradingService`,
- the cost of the run and its cap (`cost.py`): the driver says when the trainer started and ended and asks,
  every accounting interval, whether one more would pass the cap,
- the tally of the platform's verdicts (`summary.py`): every verdict record numbered by request, handed to
  the sink, and the run's summary and diagnostics in the status after every grading and at the end,
- the status document (`status.py`), which the driver writes through too (pids, heartbeats, the phase).

It knows nothing of how the trainer was started or where a job's folders are: it is handed the environment, the
grading settings, price and cap, the socket's path, what earlier sessions of the run graded, and a
`SessionSink` for everything it reports. Its life, as the driver calls it:

    with JobSession(...) as session:    # the grading service
        session.listen()                # the socket is bound: a trainer started now can connect
        ... start the trainer ...; session.trainer_started()
        session.serve()                 # requests are answered
        ... every interval: session.account(); session.over_cap(cost) ...
        ... stop the trainer ...; session.trainer_ended()
    session.finish(outcome, final=...)  # after the graders are closed: cost, the session record, the phase
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from types import TracebackType
from typing import Any

from ..grading import GradingService, GradingSettings
from .attempt_api import AttemptAPI, AttemptServer
from .cost import CostMeter, usd
from .environment import EnvironmentSpec
from .sink import SessionSink
from .status import JobStatus
from .summary import DEFAULT_MIN_COMPARISON_TASKS, PLATFORM_SUMMARY_KEYS, GradingTally


@dataclass(frozen=True)
class Outcome:
    """How a session ended: the phase to record (None: leave it, the run is to be restarted), the reason, the
    message, and more status fields (outputs, exit code, log tail)."""

    phase: str | None
    reason: str
    message: str
    extra: dict[str, Any]


class JobSession:
    """One session of one job: its attempt API, grading, cost and cap, tally and status (see the module)."""

    def __init__(
        self,
        *,
        name: str,
        project: str,
        attempt: int,
        environment: EnvironmentSpec | None,
        grading: GradingSettings,
        price_per_hour: Decimal,
        max_cost_usd: str | None,
        accounting_interval_s: float,
        socket_path: Path,
        sink: SessionSink,
        status: Mapping[str, Any],
        earlier_gradings: Iterable[Mapping[str, Any]] = (),
        min_comparison_tasks: int = DEFAULT_MIN_COMPARISON_TASKS,
        record_wire: bool = False,
        compared: bool = True,
    ) -> None:
        self.name = name
        self.attempt = attempt
        self.environment = environment
        self.settings = grading
        self.socket_path = socket_path
        self.sink = sink
        self.record_wire = record_wire
        self.status = JobStatus(sink, status)
        self.grading_job = f"{project}/{name}"
        self.cost = CostMeter(
            base=Decimal(str(status.get("costUSD") or "0")),
            price_per_hour=price_per_hour,
            max_cost_usd=max_cost_usd,
            accounting_interval_s=accounting_interval_s,
        )
        self.tally = GradingTally()
        for record in earlier_gradings:  # a restarted run goes on from what its earlier sessions graded
            self.tally.add(record)
        self.requests = self.tally.last_request
        self.min_comparison_tasks = min_comparison_tasks
        self.compared = compared
        self._gradings_lock = threading.Lock()
        self._dropped_summary_keys = False
        self._stack = contextlib.ExitStack()
        self._grading: GradingService | None = None
        self._server: AttemptServer | None = None

    # --- life ------------------------------------------------------------------------------------------

    def __enter__(self) -> JobSession:
        self._grading = self._stack.enter_context(GradingService(self.settings))
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()

    def listen(self) -> None:
        """Bind the attempt API's socket; requests wait in its backlog until `serve`."""
        if self._grading is None:
            raise RuntimeError("a JobSession listens only inside its `with` block")
        api = AttemptAPI(
            name=self.name,
            environment=self.environment,
            grading=self._grading,
            grading_job=self.grading_job,
            on_event=self.progress,
            on_verdicts=self.record_verdicts,
            log=self.sink.note,
        )
        self._server = AttemptServer(self.socket_path, api, transcript=self.sink, record_wire=self.record_wire)

    def serve(self) -> None:
        """Answer requests (each connection in a thread of its own) until `close`."""
        if self._server is None:
            raise RuntimeError("a JobSession serves only after `listen`")
        self._server.start()

    def close(self) -> None:
        """Stop serving, close this job's graders (a GradersClosed event when the API was up), end grading."""
        server, self._server = self._server, None
        try:
            if server is not None:
                server.close()
                assert self._grading is not None
                graders = self._grading.graders(self.grading_job)
                self._grading.close(self.grading_job)
                self.status.event("GradersClosed", {"graders": graders})
        finally:
            self._grading = None
            self._stack.close()

    # --- cost and cap ----------------------------------------------------------------------------------

    def trainer_started(self) -> None:
        self.cost.started()

    def trainer_ended(self) -> None:
        self.cost.ended()

    def account(self) -> Decimal:
        """The run's cost so far, written to the status (`costUSD`, `accountedAt`)."""
        cost = self.cost.total()
        self.status.update(costUSD=usd(cost), accountedAt=time.time())
        return cost

    def change_cap(self, max_cost_usd: str | None) -> None:
        """A cap raised (or lowered, or lifted) while the run goes on: a MaxCostChanged event when it differs."""
        if self.cost.change_cap(max_cost_usd):
            self.status.event("MaxCostChanged", {"maxCostUSD": max_cost_usd}, update={"maxCostUSD": max_cost_usd})

    def over_cap(self, cost: Decimal) -> str | None:
        """Why the run must stop now (one more interval would pass the cap), or None."""
        return self.cost.over_cap(cost)

    # --- what the attempt API reports ------------------------------------------------------------------

    def record_verdicts(self, verdicts: list[dict[str, Any]]) -> None:
        """Every verdict with the host's whole evidence, as graded (the trainer gets it without the argv),
        numbered by request (completions of one task in one request are a group), then the summary again."""
        with self._gradings_lock:
            self.requests += 1
            records = [{**verdict, "request": self.requests} for verdict in verdicts]
            self.sink.append_gradings(records)
            for record in records:
                self.tally.add(record)
            self._publish_summary()

    def progress(self, report: dict[str, Any]) -> None:
        """A trainer's progress report, less the summary keys the platform owns (said once in a note)."""
        summary = report.get("summary")
        if isinstance(summary, dict) and PLATFORM_SUMMARY_KEYS & summary.keys():
            dropped = sorted(PLATFORM_SUMMARY_KEYS & summary.keys())
            report = {**report, "summary": {k: v for k, v in summary.items() if k not in PLATFORM_SUMMARY_KEYS}}
            if not self._dropped_summary_keys:
                self._dropped_summary_keys = True
                self.sink.note(
                    f"ignored the trainer's summary keys {dropped} (and any later ones the platform owns): "
                    "nodus computes them from its own gradings"
                )
        self.status.progress(report)

    def _publish_summary(self) -> None:
        """The status's summary and diagnostics from the tally (the caller holds the gradings lock)."""
        if self.tally.records:
            summary = self.tally.summary(self.min_comparison_tasks, compared=self.compared)
            self.status.platform_summary(summary, self.tally.diagnostics())

    # --- the end ---------------------------------------------------------------------------------------

    def finish(self, outcome: Outcome, *, final: bool) -> None:
        """The session's last word: the summary once more, the cost, this session's record, the outcome
        (`final`: nothing comes after its phase, so the run's `finishedAt` is now)."""
        with self._gradings_lock:
            self._publish_summary()  # the last word on the summary is the platform's, whatever came after
        session = self.cost.session_cost()
        cost = self.cost.base + session
        now = time.time()
        started = self.status.get("sessionStartedAt") if self.cost.running else None
        record = {
            "attempt": self.attempt,
            "startedAt": started,
            "endedAt": now,
            "seconds": self.cost.seconds(),
            "costUSD": usd(session),
            "reason": outcome.reason,
        }
        fields: dict[str, Any] = {
            "costUSD": usd(cost),
            "reason": outcome.reason,
            "message": outcome.message,
            "sessions": [*self.status.get("sessions", []), record],
            "heartbeatAt": now,
            **outcome.extra,
        }
        if outcome.phase is not None:
            fields["phase"] = outcome.phase
        if final:
            fields["finishedAt"] = now
        details = {"message": outcome.message, "costUSD": usd(cost)}
        self.status.event(outcome.reason, details, update=fields, durable=True)


def min_comparison_tasks(params: Mapping[str, Any]) -> int:
    """`evaluation.minComparisonTasks` of the job's params (the seeds' default when it has none)."""
    evaluation = params.get("evaluation")
    value = evaluation.get("minComparisonTasks") if isinstance(evaluation, Mapping) else None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    return DEFAULT_MIN_COMPARISON_TASKS


def compares(params: Mapping[str, Any]) -> bool:
    """Whether the job's summary compares baseline and final: a training run that asked for both (the seeds'
    defaults); an evaluate job, or a run without `evaluation.baseline` or `.final`, grades one side or none, and
    its summary is that side's pass rate, not a comparison refused for want of the other."""
    evaluation = params.get("evaluation")
    asked = evaluation if isinstance(evaluation, Mapping) else {}
    return params.get("mode", "Train") == "Train" and bool(asked.get("baseline", True) and asked.get("final", True))
