"""The local executor: jobs as supervised processes on this machine, each in a folder under `jobs_root`.

Who uses it: the controllers, refresh, the CLI and the SDK, through the Executor protocol
(`executors/protocol.py`, which it implements); nothing outside this package reads a job folder. Every call
works from the job folder alone, so a new process (a later `nodus` run) sees exactly what an earlier one
started:

    executor = LocalExecutor(project.jobs, GradingSettings(), project=project)
    executor.launch(workload)                  # resolved here (`resolve.py`); idempotent per (generation, attempt)
    executor.status("proj", "tj-1")            # status.json as the supervisor wrote it
    executor.is_alive("proj", "tj-1")          # supervisor running and heartbeating
    executor.observe("proj", "tj-1").lost      # recorded Pending/Running, and no live supervisor
    executor.restart("proj", "tj-1")           # a lost one: attempt + 1 from the state folder
    executor.abandon("proj", "tj-1", "SupervisorLost", "...")   # a lost one: Failed (the controller decides)
    executor.observe / spec_of / logs / outputs / copy_outputs / events / gradings   # the protocol's reads
    executor.suspend / resume / cancel

A job's supervisor (`supervisor.py`) does the work; the executor writes the spec (spec.json, the workload resolved
on this host) and requests (`cancel`, `suspend` files), and writes status.json itself only while no supervisor
runs. Beside spec.json it keeps workload.json, the workload as launched (its attempt and cap kept up to date), which
`spec_of` returns. Its own operations on one
job are serialised by a lock in the job folder, so two `nodus` processes never launch a job twice.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Collection, Iterator, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any, BinaryIO, Final

from nodus.errors import ConfigError, PermanentError, TemporaryError

from ...grading import GradingSettings
from ...project import Project
from ..process_env import base_environment, secret_variables
from ..protocol import Capabilities, Gradings, LogReader, Observation, OutputManifest
from ..workload import EnvironmentArtifact, Intervals, PackageSource, Workload, WorkloadKey
from . import trainer_container
from .gpus import host_gpus
from .job import (
    CANCEL_REQUESTED,
    CANCELLED,
    FAILED,
    LAUNCHED,
    PENDING,
    RESUMED,
    RUNNING,
    SUPERVISOR_LOST,
    SUSPEND_REQUESTED,
    SUSPENDED,
    TERMINAL,
    JobFiles,
    JobSpec,
    append_jsonl,
    grading_to_json,
    lock_held,
    locked,
    log_tail,
    parse_usd,
    read_json,
    read_jsonl,
    same_process_alive,
    signal_verified,
    start_ticks,
    usd,
    wait_gone,
    write_json,
)
from .outputs import copy_verified, manifest, open_regular, recorded, sources_in
from .resolve import resolve
from .services import LocalServices

SUPERVISOR_MODULE: Final = "nodus.reconciler.executors.local.supervisor"
HEARTBEATS_MISSED: Final = 3
"""A supervisor is lost when its heartbeat is older than this many intervals."""
STARTUP_GRACE_S: Final = 30.0
"""How long a supervisor may take from launch to its first heartbeat (imports on a busy host)."""
SPAWN_TIMEOUT_S: Final = 60.0
EXIT_WAIT_S: Final = 30.0
"""How long to wait for a supervisor that has recorded its end to let go of the job."""
STATUS_EVENTS: Final = 100
WORKLOAD_FILE: Final = "workload.json"
"""The workload as launched, beside spec.json (what `spec_of` returns)."""
KEEP_ON_SET_ASIDE: Final = frozenset({".executor.lock", "supervisor.lock", "generations", "spec.json", WORKLOAD_FILE})
"""Left at the top when a generation is set aside: the locks (others may hold them open), the earlier generations,
and the spec and workload, which the next launch overwrites (until then they say which generation the folder
holds)."""
LOCAL_CAPABILITIES: Final = Capabilities(gangs=False, gpu_types=(), services=True)
"""Processes on this machine: no gangs; services kept up by supervisors (`services.py`); the machine's GPUs are
added when asked (`capabilities`)."""
SERVICES_FOLDER: Final = "services"
"""Beside the jobs folder: the services' folders (`services.py`)."""
LIVE_PHASES: Final = frozenset({PENDING, RUNNING})
"""Phases in which a job's supervisor should be alive: a job in one without it is lost."""
SET_ASIDE: Final = ("outputs", "outputs.json", "logs", "input", "status.json")
"""What a finished generation keeps in `generations/<N>/`: what a user may still want (its results, its logs,
what it was given and how it ended). Its `state/` (checkpoints, only for resuming it) is removed."""


class LocalExecutor:
    """Jobs on this machine. `grading` is the host's grading configuration for the jobs' graders; `project` is
    where workloads' artifacts are found (content store, imported models, Volumes; None: a workload may name none)."""

    def __init__(
        self,
        jobs_root: Path,
        grading: GradingSettings | None = None,
        *,
        project: Project | None = None,
        python: str = sys.executable,
        record_wire: bool = False,
    ) -> None:
        self.jobs_root = jobs_root
        self.project = project
        self.grading = grading or GradingSettings()
        self.python = python
        self.record_wire = record_wire
        self.services = LocalServices(jobs_root.parent / SERVICES_FOLDER, jobs_root, project, python)
        """The services this machine keeps up (InferenceEndpoints' model servers, the gateway)."""

    @property
    def capabilities(self) -> Capabilities:
        """No gangs, services, and this machine's GPUs (`gpus.py`): a GPU request it cannot meet is refused."""
        gpus = host_gpus()
        return dataclasses.replace(LOCAL_CAPABILITIES, gpu_types=tuple(sorted(set(gpus.devices))), host_gpus=gpus)

    def files(self, project: str, name: str) -> JobFiles:
        return JobFiles.of(self.jobs_root, project, name)

    def exists(self, project: str, name: str) -> bool:
        return self.files(project, name).spec.is_file()

    def generation_files(self, project: str, name: str, generation: int | None = None) -> JobFiles:
        """The folder of one generation of a job: the one launched last (None, or its number), or an earlier one
        set aside when a later one launched. ConfigError naming the generations there are for any other."""
        files = self._existing(project, name)
        current = files.read_spec().generation
        if generation is None or generation == current:
            return files
        earlier = files.earlier_generations()
        if generation in earlier:
            return files.earlier(generation)
        known = ", ".join(str(number) for number in sorted({*earlier, current}))
        raise ConfigError(f"job {project}/{name} has no generation {generation} (generations: {known})")

    # --- launch ------------------------------------------------------------------------------------

    def launch(self, workload: Workload) -> None:
        """Start `workload` under a supervisor, unless this generation and attempt (or a later one) was launched.

        It is resolved on this host (`resolve.py`: manifests, model, interpreter) only when it will start, so a
        repeated apply neither copies anything nor fails on an artifact the running job no longer needs.

        A later attempt of the same generation keeps the state folder (the trainer resumes) and the cost; a
        new generation starts over in a fresh folder, after the previous generation's outputs, logs, input and
        status are set aside in `generations/<N>/` (`JobFiles.earlier`). Either needs the previous supervisor
        to be gone.
        """
        files = self.files(workload.project, workload.name)
        # Its owner's only, like the state folder above it: logs, inputs and outputs may hold answers and keys.
        for folder in (self.jobs_root, files.dir.parent, files.dir):
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        with locked(files.executor_lock):
            current = read_json(files.spec)
            if current is not None:
                old = JobSpec.from_json(current)
                if (workload.generation, workload.attempt) <= (old.generation, old.attempt):
                    if not self._spawned(files, old):
                        self._spawn(files, old)  # an earlier launch stopped between its spec and its supervisor
                    return
                if self._supervisor_running(files) and not _over(files.read_status()):
                    raise TemporaryError(
                        f"job {workload.project}/{workload.name} still runs generation {old.generation} attempt "
                        f"{old.attempt}",
                        delay=5,
                        hint="cancel it before launching another generation",
                    )
                self._wait_for_exit(files)  # one that has recorded its end may still be closing its graders
            spec = resolve(workload, self.project)
            if current is not None and workload.generation > old.generation:
                _set_aside(files, old.generation)
            carried = files.read_status() if current is not None else {}
            for request in (files.suspend_request, files.cancel_request):
                request.unlink(missing_ok=True)  # meant for the run this launch replaces
            self._prepare(files, spec, workload, carried, LAUNCHED)
            self._spawn(files, spec)

    # --- observe -----------------------------------------------------------------------------------

    def status(self, project: str, name: str) -> dict[str, Any]:
        """status.json of the job: phase, reason, message, stage, step, metrics, costUSD, events, ..."""
        files = self._existing(project, name)
        return files.read_status()

    def is_alive(self, project: str, name: str) -> bool:
        """The supervisor holds its lock and heartbeated within the last few intervals (or is just starting)."""
        files = self._existing(project, name)
        spec = files.read_spec()
        launched = read_json(files.supervisor) or {}
        launched_at = float(launched.get("launchedAt") or 0.0)
        heartbeat = float(files.read_status().get("heartbeatAt") or 0.0)
        now = time.time()
        if not self._supervisor_running(files):
            # Between launch and taking its lock, a supervisor is alive if its process is.
            starting = heartbeat < launched_at and now - launched_at < STARTUP_GRACE_S
            return starting and same_process_alive(launched.get("pid"), launched.get("startTicks"))
        if heartbeat < launched_at:
            return now - launched_at < STARTUP_GRACE_S
        return now - heartbeat <= HEARTBEATS_MISSED * spec.heartbeat_interval_s

    def wait(
        self, project: str, name: str, *, phases: Collection[str] = (*TERMINAL, SUSPENDED), timeout_s: float = 600.0
    ) -> dict[str, Any]:
        """Poll until the job is in one of `phases`; its status. TemporaryError when it is not in time."""
        deadline = time.monotonic() + timeout_s
        while True:
            status = self.status(project, name)
            if status.get("phase") in phases:
                return status
            if time.monotonic() >= deadline:
                phase, wanted = status.get("phase"), "/".join(sorted(phases))
                raise TemporaryError(f"job {project}/{name} is {phase} after {timeout_s:g}s, not {wanted}")
            time.sleep(0.05)

    def observe(self, project: str, name: str, generation: int | None = None) -> Observation:
        """The job's status.json (of `generation`, when it is an earlier one), typed: the protocol's view; `lost`
        when it is recorded Pending or Running and its supervisor is not alive."""
        if generation is None:
            status = self.status(project, name)
            return Observation.of(status, lost=self._lost(project, name, status))
        return Observation.of(self.generation_files(project, name, generation).read_status())

    def spec_of(self, project: str, name: str) -> Workload:
        """workload.json of the generation launched last: the workload as launched (its cap raised by `resume`, its
        attempt counted by `recover`)."""
        files = self._existing(project, name)
        return _read_workload(files) or launched_before_workloads(files.read_spec())

    # --- read what a job left ---------------------------------------------------------------------

    def logs(self, project: str, name: str, generation: int | None = None) -> LogReader:
        """logs/trainer.log of a generation, read on from where the last read ended."""
        return TrainerLog(self.generation_files(project, name, generation))

    def outputs(self, project: str, name: str, generation: int | None = None) -> OutputManifest | None:
        """outputs.json of a generation (written by the supervisor when the trainer succeeded), or None."""
        return manifest(self.generation_files(project, name, generation))

    def open_output(self, project: str, name: str, path: str, generation: int | None = None) -> BinaryIO:
        files = self.generation_files(project, name, generation)
        wanted = manifest(files)
        if wanted is None or path not in wanted.files:
            raise ConfigError(f"job {project}/{name} has no output {('outputs/' + path)!r}")
        source = sources_in(files, [(path, Path())], f"job {project}/{name}")[path]
        try:
            return open_regular(source)  # never through a link swapped in after the outputs were recorded
        except OSError:
            raise ConfigError(f"outputs/{path} of job {project}/{name} is missing") from None

    def copy_outputs(
        self,
        project: str,
        name: str,
        copies: Sequence[tuple[str, Path]],
        *,
        label: str,
        root: Path | None = None,
        generation: int | None = None,
    ) -> list[Path]:
        """Verified, all-or-nothing copies of recorded outputs (`nodus.reconciler.executors.local.outputs`)."""
        files = self.generation_files(project, name, generation)
        wanted = recorded(files)
        if wanted is None:
            raise ConfigError(f"{label} has no outputs yet", hint="outputs are collected when the run succeeds")
        for relative, _ in copies:
            if relative not in wanted:
                raise ConfigError(f"{label} has no output {('outputs/' + relative)!r}", hint="nothing was copied")
        return copy_verified(sources_in(files, copies, label), copies, wanted, label, root=root)

    def earlier_generations(self, project: str, name: str) -> list[int]:
        return self.files(project, name).earlier_generations()

    def events(self, project: str, name: str, generation: int | None = None) -> Iterator[dict[str, Any]]:
        """logs/events.jsonl of a generation (a torn last line skipped), read when iterated."""
        return read_jsonl(self.generation_files(project, name, generation).events_log)

    def gradings(self, project: str, name: str, generation: int | None = None) -> Gradings:
        """logs/gradings.jsonl of a generation: every verdict the supervisor's grading service gave."""
        log = self.generation_files(project, name, generation).gradings_log
        return Gradings(tuple(read_jsonl(log)), str(log))

    # --- act ---------------------------------------------------------------------------------------

    def cancel(self, project: str, name: str) -> None:
        """Stop the job for good: the supervisor stops the trainer and records Cancelled."""
        self._request(project, name, "cancel", CANCELLED, CANCEL_REQUESTED, "cancelled")

    def suspend(self, project: str, name: str) -> None:
        """spec.state Suspended: stop the trainer and keep its state folder; `resume` goes on from there."""
        self._request(project, name, "suspend", SUSPENDED, SUSPEND_REQUESTED, "suspended (spec.state: Suspended)")

    def resume(self, project: str, name: str, max_cost_usd: str | None = None) -> None:
        """Raise the cap (it can only go up) and, if the job is Suspended, restart it from its state folder.

        The trainer runs again with the same NODUS_STATE_DIR and resumes from its checkpoint; the cost so far
        carries over. A running job only gets the new cap (its supervisor reads it at the next interval).
        """
        files = self._existing(project, name)
        with locked(files.executor_lock):
            spec = files.read_spec()
            workload = _read_workload(files)
            if max_cost_usd is not None:
                spec = _raised_cap(spec, max_cost_usd)
                workload = workload and workload.with_changes(max_cost_usd=spec.max_cost_usd)
            status = files.read_status()
            phase = status.get("phase")
            if phase in TERMINAL:
                raise ConfigError(f"job {project}/{name} is {phase}; only a Suspended job can be resumed")
            if phase != SUSPENDED:
                write_json(files.spec, spec.to_json(), durable=True)
                _write_workload(files, workload)
                return
            cost = Decimal(str(status.get("costUSD") or "0"))
            cap = spec.max_cost
            if cap is not None and cost + spec.interval_cost() > cap:
                raise ConfigError(
                    f"job {project}/{name} has cost ${usd(cost)}, which leaves no room under maxCostUSD ${cap}",
                    hint=f"raise maxCostUSD above {usd(cost + spec.interval_cost())} to resume it",
                )
            self._wait_for_exit(files)
            for request in (files.suspend_request, files.cancel_request):
                request.unlink(missing_ok=True)
            self._prepare(files, spec, workload, status, RESUMED)
            self._spawn(files, spec)

    def restart(self, project: str, name: str) -> None:
        """A lost supervisor's job started again: attempt + 1 with the same state folder (the trainer resumes
        from its checkpoint) and the cost so far. What is left of the lost one (a hung supervisor, its trainer,
        the trainer's container) is ended first. Nothing when the job is not lost (checked under the lock)."""
        files = self._existing(project, name)
        with locked(files.executor_lock):
            status = files.read_status()
            if not self._lost(project, name, status):
                return
            spec = self._end_lost(files, status)
            restarted = dataclasses.replace(spec, attempt=spec.attempt + 1)
            workload = _read_workload(files)
            restarted_workload = workload and workload.with_changes(attempt=restarted.attempt)
            self._prepare(files, restarted, restarted_workload, status, SUPERVISOR_LOST)
            self._spawn(files, restarted)

    def abandon(self, project: str, name: str, reason: str, message: str) -> None:
        """A lost supervisor's job recorded Failed with `reason` and `message`, after what is left of it is
        ended. Nothing when the job is not lost (checked under the lock)."""
        files = self._existing(project, name)
        with locked(files.executor_lock):
            status = files.read_status()
            if not self._lost(project, name, status):
                return
            self._end_lost(files, status)
            _record(files, reason, {"phase": FAILED, "reason": reason, "message": message})

    def _lost(self, project: str, name: str, status: dict[str, Any]) -> bool:
        """Recorded as running (Pending or Running) with no live supervisor: nothing will move it on by itself."""
        return status.get("phase") in LIVE_PHASES and not self.is_alive(project, name)

    def _end_lost(self, files: JobFiles, status: dict[str, Any]) -> JobSpec:
        """Whatever a lost supervisor left running: itself (hung), its trainer, the trainer's container. Its spec."""
        _end_supervisor(files, status)
        _end_trainer(status)
        spec = files.read_spec()
        if spec.image is not None:
            trainer_container.remove(files)  # the kernel killed podman's client with the supervisor, not it
        return spec

    # --- internals ---------------------------------------------------------------------------------

    def _existing(self, project: str, name: str) -> JobFiles:
        files = self.files(project, name)
        if not files.spec.is_file():
            raise ConfigError(f"there is no job {project}/{name} in {self.jobs_root}")
        return files

    def _request(self, project: str, name: str, request: str, phase: str, reason: str, message: str) -> None:
        """Leave a request for the supervisor; with no supervisor, carry it out here."""
        files = self._existing(project, name)
        with locked(files.executor_lock):
            status = files.read_status()
            if status.get("phase") in TERMINAL or status.get("phase") == phase:
                return
            # Written first, so a supervisor that is just starting picks it up before it starts the trainer.
            (files.dir / request).touch()
            if self._supervisor_running(files):
                return
            _end_trainer(status)
            _remove_socket(files)
            _record(files, reason, {"phase": phase, "reason": reason, "message": message})

    def _supervisor_running(self, files: JobFiles) -> bool:
        return lock_held(files.supervisor_lock)

    def _spawned(self, files: JobFiles, spec: JobSpec) -> bool:
        launched = read_json(files.supervisor) or {}
        return (launched.get("generation"), launched.get("attempt")) == (spec.generation, spec.attempt)

    def _prepare(
        self, files: JobFiles, spec: JobSpec, workload: Workload | None, carried: dict[str, Any], reason: str
    ) -> None:
        """The folder as a new supervisor expects it: workload, grading settings, parameters, then spec.json and a
        Pending status. (`workload` None: a job launched before workload.json existed, restarted as it was.)

        spec.json comes after every input because it is the commit point: a launch that finds it spawns that
        spec's supervisor (`launch`: "an earlier launch stopped between its spec and its supervisor"). Written
        first, an apply killed just after it left a spec without params.json, and the next apply started a trainer
        that failed on the missing file (tests/test_apply_trainingjob.py's random kills found it). The status
        stays after the spec: a resume killed between them still reads Suspended and prepares again."""
        for folder in (files.input, files.state, files.outputs, files.logs):
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        _write_workload(files, workload)
        write_json(files.grading, grading_to_json(self._grading_for(spec)), durable=True)
        write_json(files.params, dict(spec.params), durable=True)
        files.supervisor.unlink(missing_ok=True)
        write_json(files.spec, spec.to_json(), durable=True)
        status = {
            **carried,
            "phase": PENDING,
            "reason": reason,
            "message": None,
            "generation": spec.generation,
            "attempt": spec.attempt,
            "costUSD": carried.get("costUSD", usd(Decimal(0))),
            "maxCostUSD": spec.max_cost_usd,
            "pricePerHourUSD": spec.price_per_hour_usd,
        }
        status.pop("finishedAt", None)
        write_json(files.status, status, durable=True)
        _record(files, reason, {}, details={"phase": PENDING, "generation": spec.generation, "attempt": spec.attempt})

    def _spawn(self, files: JobFiles, spec: JobSpec) -> None:
        """Start the supervisor detached and note its pid in supervisor.json.

        Its environment is the base one (`process_env`) and the variables its job's Secrets are read from: it reads
        them when it starts the trainer, and hands on only what the job names."""
        environment = base_environment(extra=secret_variables(spec.secrets))
        if self.record_wire:
            environment["NODUS_RECORD_WIRE"] = "1"
        argv = [self.python, "-m", SUPERVISOR_MODULE, "--detach", str(files.dir)]
        files.logs.mkdir(parents=True, exist_ok=True)
        launched_at = time.time()
        with files.supervisor_log.open("ab") as log:
            try:
                result = subprocess.run(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=log,
                    cwd=files.dir,
                    env=environment,
                    timeout=SPAWN_TIMEOUT_S,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                raise TemporaryError(f"the supervisor of {spec.project}/{spec.name} took too long to start") from None
        pid = result.stdout.decode().strip()
        if result.returncode != 0 or not pid.isdigit():
            tail = " | ".join(log_tail(files.supervisor_log, lines=3))
            raise PermanentError(f"the supervisor of {spec.project}/{spec.name} did not start: {tail}")
        record = {
            "pid": int(pid),
            "startTicks": start_ticks(int(pid)),
            "launchedAt": launched_at,
            "generation": spec.generation,
            "attempt": spec.attempt,
        }
        write_json(files.supervisor, record, durable=True)

    def _wait_for_exit(self, files: JobFiles) -> None:
        """A supervisor that recorded Suspended may still be closing graders; a new one must wait for it."""
        deadline = time.monotonic() + EXIT_WAIT_S
        while self._supervisor_running(files):
            if time.monotonic() >= deadline:
                raise TemporaryError(f"the previous supervisor of {files.dir} has not exited yet", delay=5)
            time.sleep(0.05)

    def _grading_for(self, spec: JobSpec) -> GradingSettings:
        """The host's settings with a block of runner uids for this job alone.

        Each supervisor runs its own grading service, and a grader kills every process of its runner uid
        after each run: two jobs must never share one. Blocks are handed out under a lock in `jobs_root`
        and taken back from jobs that are over.
        """
        settings = self.grading
        size = settings.max_parallel
        blocks = settings.runner_uid_count // size
        if blocks < 1:
            raise ConfigError(f"grading runner_uid_count {settings.runner_uid_count} is below max_parallel {size}")
        table_path = self.jobs_root / "runner-uids.json"
        key = f"{spec.project}/{spec.name}"
        with locked(self.jobs_root / ".runner-uids.lock"):
            table = {k: int(v) for k, v in (read_json(table_path) or {}).items() if k == key or self._holds_uids(k)}
            if key not in table:
                free = sorted(set(range(blocks)) - set(table.values()))
                if not free:
                    raise TemporaryError(f"all {blocks} runner uid blocks are taken by running jobs", delay=30)
                table[key] = free[0]
            write_json(table_path, table)
        base = settings.runner_uid_base + table[key] * size
        return dataclasses.replace(settings, runner_uid_base=base, runner_uid_count=size)

    def _holds_uids(self, key: str) -> bool:
        project, _, name = key.partition("/")
        try:
            status = self.files(project, name).read_status()
        except PermanentError:
            return True  # unreadable: keep its block rather than risk sharing it
        return bool(status) and status.get("phase") not in TERMINAL


class TrainerLog:
    """logs/trainer.log of one generation, read from where the last read ended (`nodus logs -f`)."""

    def __init__(self, files: JobFiles) -> None:
        self._files = files
        self.offset = 0

    def read(self) -> bytes:
        try:
            with self._files.trainer_log.open("rb") as handle:
                handle.seek(self.offset)
                chunk = handle.read()
        except FileNotFoundError:
            return b""
        self.offset += len(chunk)
        return chunk

    def ended(self) -> bool:
        return self._files.read_status().get("phase") in TERMINAL


def _over(status: dict[str, Any]) -> bool:
    """The supervisor has recorded an end: it is only closing down."""
    return status.get("phase") in TERMINAL or status.get("phase") == SUSPENDED


def _read_workload(files: JobFiles) -> Workload | None:
    """workload.json of the job folder, or None when there is none (a job launched before it was kept)."""
    path = files.dir / WORKLOAD_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        return Workload.from_json(text)
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        first = str(exc).splitlines()[1:2] or [str(exc)]
        raise PermanentError(f"{path} is not a workload nodus can read: {first[0].strip()}") from None


def launched_before_workloads(spec: JobSpec) -> Workload:
    """The workload of a job launched by a nodus that kept only spec.json: its spec as it was written, in the
    workload's fields (host terms: the resolved command, the package folder as the host hint, no manifest digests,
    the model as the NODUS_INPUT_MODEL path it was given). Read, never launched again: a new generation is
    compiled afresh."""
    environment = None
    if spec.environment is not None:
        env = spec.environment
        environment = EnvironmentArtifact(
            project=spec.project,
            name=env.name,
            version=env.version,
            grader_image=env.image,
            grader_image_digest=env.digest,
            package=PackageSource(host_hint=Path(env.paths[0]).as_uri() if env.paths else None),
            loader=env.loader,
            train_tasks=env.train_tasks,
            held_out_tasks=env.held_out_tasks,
            seed=env.seed,
        )
    return Workload(
        key=WorkloadKey(project=spec.project, name=spec.name, kind=spec.kind),
        generation=spec.generation,
        attempt=spec.attempt,
        command=spec.command,
        image=spec.image,
        env=dict(spec.env),
        price_per_hour_usd=spec.price_per_hour_usd,
        max_cost_usd=spec.max_cost_usd,
        intervals=Intervals(
            accounting_s=spec.accounting_interval_s,
            heartbeat_s=spec.heartbeat_interval_s,
            stop_grace_s=spec.stop_grace_s,
        ),
        params=dict(spec.params),
        environment=environment,
    )


def _write_workload(files: JobFiles, workload: Workload | None) -> None:
    if workload is not None:
        write_json(files.dir / WORKLOAD_FILE, workload.model_dump(mode="json", by_alias=True), durable=True)


def _raised_cap(spec: JobSpec, max_cost_usd: str) -> JobSpec:
    new = parse_usd(max_cost_usd, "maxCostUSD")
    old = spec.max_cost
    if old is not None and new < old:
        raise ConfigError(f"maxCostUSD can only be raised: job {spec.project}/{spec.name} has ${old}, not ${new}")
    return dataclasses.replace(spec, max_cost_usd=max_cost_usd)


def _record(files: JobFiles, kind: str, update: dict[str, Any], *, details: dict[str, Any] | None = None) -> None:
    """An event and a status change written by the executor (only while no supervisor runs)."""
    status = files.read_status()
    now = time.time()
    if update.get("phase") in TERMINAL:
        update = {**update, "finishedAt": now}
    noted = {key: value for key, value in update.items() if key in ("phase", "message")}
    event = {"at": now, "type": kind, **(details or {}), **noted}
    status.update(update)
    status["events"] = [*status.get("events", []), event][-STATUS_EVENTS:]
    write_json(files.status, status, durable=True)
    files.logs.mkdir(parents=True, exist_ok=True)
    append_jsonl(files.events_log, event)


def _end_supervisor(files: JobFiles, status: dict[str, Any]) -> None:
    """A supervisor that is hung (its heartbeat stopped, its process lives on) is killed before another starts."""
    pid, ticks = status.get("supervisorPid"), status.get("supervisorStartTicks")
    if signal_verified(pid, ticks, signal.SIGKILL):
        wait_gone(pid, ticks, 10.0)
    deadline = time.monotonic() + 10.0
    while lock_held(files.supervisor_lock) and time.monotonic() < deadline:
        time.sleep(0.05)
    _remove_socket(files)


def _remove_socket(files: JobFiles) -> None:
    """A dead supervisor's socket (a new supervisor would replace it; a job that ends here leaves none)."""
    with contextlib.suppress(FileNotFoundError):
        if files.socket.is_socket():
            files.socket.unlink()


def _end_trainer(status: dict[str, Any]) -> None:
    """The trainer of a lost supervisor, if the kernel has not ended it already, with its process group."""
    pid, ticks = status.get("trainerPid"), status.get("trainerStartTicks")
    if signal_verified(pid, ticks, signal.SIGKILL, group=True):
        wait_gone(pid, ticks, 10.0)


def _set_aside(files: JobFiles, generation: int) -> None:
    """Move what a finished generation leaves that a user may want into `generations/<generation>/`, and remove
    the rest (its state folder, its supervisor's files), so that the next generation starts in a fresh folder.

    Each entry moves with one rename, and the spec stays at the top until the new launch overwrites it: a
    launch interrupted half way sets aside what is left the next time, and nothing is ever in two places.
    """
    _remove_socket(files)
    target = files.earlier(generation)
    target.dir.mkdir(parents=True, exist_ok=True)
    for name in SET_ASIDE:
        entry, kept = files.dir / name, target.dir / name
        if not entry.exists() and not entry.is_symlink():
            continue
        if kept.exists() or kept.is_symlink():
            raise PermanentError(
                f"job {files.dir}: generation {generation} is set aside already, yet {name} is still at the top",
                hint=f"move {entry} away (or into {target.dir}) and apply again",
            )
        entry.rename(kept)
    if files.spec.is_file():
        shutil.copyfile(files.spec, target.spec)
    if (files.dir / WORKLOAD_FILE).is_file():
        shutil.copyfile(files.dir / WORKLOAD_FILE, target.dir / WORKLOAD_FILE)
    for entry in files.dir.iterdir():
        if entry.name in KEEP_ON_SET_ASIDE:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
