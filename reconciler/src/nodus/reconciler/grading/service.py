"""The host's grading service: tasks and verdicts for a job, graded in sandboxes on this machine.

Who uses it: the job supervisor (behind the attempt API's `POST .../tasks` and `POST .../gradings`) and,
through it, evaluation and training jobs. One `GradingService` per host process:

    with GradingService(GradingSettings(max_parallel=4)) as grading:
        tasks = grading.tasks(env, "train", seed=0)
        verdicts = grading.grade("job-1", env, [{"taskId": tasks[0]["taskId"], "completion": "..."}])
        grading.close("job-1")

`grade` spreads one call's items over at most `max_parallel` graders of that (environment, job); they
pull items from one shared queue, so a slow task does not hold back the others, and each verdict is put
back in its item's place. Graders stay up between calls and are stopped after `idle_timeout_s` unused,
or by `close(job)` / `close_all()`. The reconciler never imports `nodus.env`: it only starts processes
and reads JSON lines.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any

from nodus.errors import PermanentError, TemporaryError

from .grader import Grader, GraderTimings
from .launcher import Launcher
from .models import INFRASTRUCTURE_FAILURE, EnvironmentRef, GradeRequest, Verdict
from .pool import GraderPool, RunnerUids
from .process import ReadProblem, SandboxProcess
from .settings import GradingSettings

REAP_EVERY_S = 30.0

PoolKey = tuple[str, tuple[object, ...]]


class GradingService:
    """Graders per (environment, job), started on demand and stopped when idle or closed."""

    def __init__(self, settings: GradingSettings | None = None, *, launcher: Launcher | None = None) -> None:
        self.settings = settings or GradingSettings()
        self.launcher = launcher or Launcher(self.settings)
        self._uids = RunnerUids(self.settings.runner_uid_base, self.settings.runner_uid_count)
        self._pools: dict[PoolKey, GraderPool] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._reaper: threading.Thread | None = None

    # --- public API --------------------------------------------------------------------------------

    def tasks(self, env: EnvironmentRef, split: str, seed: int, *, limit: int | None = None) -> list[dict[str, Any]]:
        """`nodus-env tasks` in a sandbox: `{"taskId", "prompt", "metadata"}` per task, never an answer."""
        arguments = ["tasks", "--split", split, "--seed", str(seed)]
        if limit is not None:
            arguments += ["--limit", str(limit)]
        command = self.launcher.command_factory(env, arguments, runner_uid=None)()
        process = SandboxProcess(command, max_line_bytes=self.settings.max_line_bytes)
        process.close_stdin()
        deadline = time.monotonic() + self.settings.tasks_timeout_s
        tasks: list[dict[str, Any]] = []
        while True:
            line = process.read_line(deadline - time.monotonic())
            if line is ReadProblem.EOF:
                break
            if isinstance(line, ReadProblem):
                process.kill()
                reason = "took too long" if line is ReadProblem.TIMEOUT else "wrote a line that is too long"
                raise TemporaryError(f"nodus-env tasks for {env.label} {reason}", delay=60)
            tasks.append(_task_line(line, env))
        code = process.wait(self.settings.kill_grace_s)
        if code is None:
            code = process.kill()
        if code != 0:
            raise PermanentError(
                f"nodus-env tasks for {env.label} failed with status {code}: {process.stderr_tail()}",
                hint="run the image's selfcheck (nodus-env selfcheck) to see why the environment does not load",
            )
        return tasks

    def grade(self, job: str, env: EnvironmentRef, items: Sequence[GradeRequest | Mapping[str, Any]]) -> list[Verdict]:
        """One verdict per item, in the items' order; failures of the grader are InfrastructureFailures."""
        requests = [item if isinstance(item, GradeRequest) else GradeRequest.from_json(item) for item in items]
        if not requests:
            return []
        pool = self._pool(job, env)
        results: list[Verdict | None] = [None] * len(requests)
        source = _SharedSource(list(enumerate(requests)))
        errors: list[BaseException] = []

        def work() -> None:
            try:
                grader = pool.acquire()
            except BaseException as exc:
                errors.append(exc)
                return
            try:
                for index, verdict in grader.grade(source):
                    results[index] = verdict
            except BaseException as exc:
                errors.append(exc)
            finally:
                pool.release(grader)

        workers = [
            threading.Thread(target=work, name=f"grade-{job}-{n}", daemon=True)
            for n in range(min(self.settings.max_parallel, len(requests)))
        ]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        if errors:
            raise errors[0]
        # Items no grader took: every grader gave up after failing again and again. They still get a verdict.
        last_failure = next((v for v in reversed(results) if v and v.verdict == INFRASTRUCTURE_FAILURE), None)
        for index, request in source:
            results[index] = _not_graded(request, self.settings.crash_loop_limit, last_failure)
        missing = [i for i, verdict in enumerate(results) if verdict is None]
        if missing:
            raise RuntimeError(f"grading lost the verdicts of items {missing}")  # a bug: never expected
        return [verdict for verdict in results if verdict is not None]

    def close(self, job: str) -> None:
        """Stop every grader of `job` (when its run finishes or is suspended)."""
        with self._lock:
            keys = [key for key in self._pools if key[0] == job]
            pools = [self._pools.pop(key) for key in keys]
        for pool in pools:
            pool.close()

    def close_all(self) -> None:
        self._stopping.set()
        with self._lock:
            pools = list(self._pools.values())
            self._pools.clear()
        for pool in pools:
            pool.close()
        if self._reaper is not None:
            self._reaper.join(timeout=5)

    def reap_idle(self) -> int:
        """Stop graders idle for `idle_timeout_s`; returns how many. Runs by itself every 30 s."""
        with self._lock:
            pools = list(self._pools.values())
        return sum(pool.reap(self.settings.idle_timeout_s) for pool in pools)

    def graders(self, job: str) -> int:
        """How many grader slots `job` holds now (busy or idle)."""
        with self._lock:
            pools = [pool for key, pool in self._pools.items() if key[0] == job]
        return sum(pool.size for pool in pools)

    def __enter__(self) -> GradingService:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close_all()

    # --- internals ---------------------------------------------------------------------------------

    def _pool(self, job: str, env: EnvironmentRef) -> GraderPool:
        key: PoolKey = (job, env.key)
        with self._lock:
            pool = self._pools.get(key)
            if pool is not None:
                return pool
        arguments = ["grade", "--timeout", f"{self.settings.task_timeout_s:g}"]
        settings = self.settings
        timings = GraderTimings(settings.task_timeout_s, settings.kill_grace_s, settings.start_timeout_s)
        launcher = self.launcher

        def make(runner_uid: int) -> Grader:
            commands = launcher.command_factory(env, arguments, runner_uid=runner_uid)
            return Grader(
                lambda: SandboxProcess(commands(), max_line_bytes=settings.max_line_bytes),
                timings=timings,
                window=settings.window,
                crash_loop_limit=settings.crash_loop_limit,
                runner_uid=runner_uid,
            )

        # Fail early (missing runtime, missing image, bad folders) rather than inside every worker.
        launcher.command_factory(env, arguments, runner_uid=None)
        with self._lock:
            pool = self._pools.setdefault(key, GraderPool(make, self._uids, settings.max_parallel))
            self._start_reaper()
        return pool

    def _start_reaper(self) -> None:
        if self._reaper is not None or self._stopping.is_set():
            return
        every = min(REAP_EVERY_S, max(0.05, self.settings.idle_timeout_s / 4))

        def reap() -> None:
            while not self._stopping.wait(every):
                self.reap_idle()

        self._reaper = threading.Thread(target=reap, name="grading-reaper", daemon=True)
        self._reaper.start()


class _SharedSource:
    """One queue of (index, request) that several graders pull from; thread-safe `next`."""

    def __init__(self, items: list[tuple[int, GradeRequest]]) -> None:
        self._items = iter(items)
        self._lock = threading.Lock()

    def __iter__(self) -> Iterator[tuple[int, GradeRequest]]:
        return self

    def __next__(self) -> tuple[int, GradeRequest]:
        with self._lock:
            return next(self._items)


def _task_line(line: bytes, env: EnvironmentRef) -> dict[str, Any]:
    try:
        task = json.loads(line)
    except ValueError as exc:
        raise PermanentError(f"nodus-env tasks for {env.label} printed a line that is not JSON: {line[:80]!r}") from exc
    if not isinstance(task, dict) or not isinstance(task.get("taskId"), str) or "answer" in task:
        raise PermanentError(f"nodus-env tasks for {env.label} printed a line that breaks the contract: {line[:80]!r}")
    return task


def _not_graded(request: GradeRequest, limit: int, last: Verdict | None) -> Verdict:
    why = last.evidence.get("message", "") if last is not None else ""
    message = f"not graded: every grader failed {limit} times in a row without answering a line ({why})"
    evidence = {
        "process": None,
        "exitCode": None,
        "durationMs": 0.0,
        "inputSha256": None,
        "outputSha256": None,
        "sandbox": None,
        "message": message,
    }
    return Verdict(request.task_id, INFRASTRUCTURE_FAILURE, None, evidence)
