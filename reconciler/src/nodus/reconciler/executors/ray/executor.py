"""The Ray executor: jobs as Ray jobs, each running its session on the node that runs its trainer.

Who uses it: the controllers, refresh, the CLI and the SDK through the Executor protocol (`executors/protocol.py`),
as `choose.py` builds it for a project whose nodus.yaml says `executor: {ray: {address: ...}}` (`from_settings`).

The controller's host only talks to the cluster's Jobs API (`jobs_client.py`, HTTP with token auth). Each run of a
job is one Ray submission whose id says which run it is (`submission.py`), whose entrypoint is `node_session` (the
local executor's supervisor, on the node), and whose log carries the session's reports as marker lines
(`status_stream.py`). So every read here is a read of Ray: a later `nodus` process, or another host with the
token, sees exactly what an earlier one started. What Ray cannot hold is kept in a small notes file per job under
`jobs_root` (`ray-notes.json`): a run held back because it fits no node (Pending, `Unschedulable`, tried again at
the next launch), how this host stopped a run (cancel, suspend, abandon), and a cap raised while a run went on.

What survives a suspension: the node's job folder (state folder with the trainer's checkpoints, outputs, logs,
cost so far) stays on the node that ran it; the Ray job ends. `resume` submits a new run of the same attempt; when
Ray places it on the same node it goes on from that state, and on another node it starts over there (the state is
not moved between nodes yet). What does not survive: the trainer process, the attempt API's socket, the graders.
A cancel stops the Ray job the same way (the node session suspends its supervisor, then ends) and records the run
Cancelled here; its folder stays on the node until someone removes it.

How inputs reach a node and outputs come back (`open_output`, `copy_outputs`: `nodus cp`, `exportTo`): through the
project's registry (`executor.ray.registry`, `channel.py`: pushed before the submission, fetched on the node by
digest; the node pushes the outputs and its outputs marker names them), or, where the nodes see this project's folder
(`executor.ray.sharedFilesystem: true`), from that folder, each file checked against the sha256 its node recorded.
With neither, `outputs` (names, sizes, sha256) still works and a copy is refused in one line.
"""

from __future__ import annotations

import re
import secrets
import shlex
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, BinaryIO, Final

from nodus.errors import ConfigError, TemporaryError
from nodus.specs.status_names import Phase, Reason

from ...project import Project
from ..kept import KeptRun, keep
from ..local import LocalExecutor
from ..local.executor import SERVICES_FOLDER
from ..local.job import locked, parse_usd, read_json, usd, write_json
from ..local.outputs import copy_verified
from ..local.services import LocalServices
from ..protocol import ENDED_PHASES, Capabilities, Gradings, Observation, OutputFile, OutputManifest
from ..workload import Workload
from . import gang, session_variables, status_stream
from .channel import INPUTS_VARIABLE, OutputsCache, RegistryChannel
from .gang_sessions import runs_sessions
from .jobs_client import RAY_PENDING, JobsClient, RayJob, Submission
from .placement import Placement, Unschedulable, offered_types, place
from .services import RayServices
from .status_stream import Stream
from .submission import RunKey, run_key, submission_id

NODE_SESSION_MODULE: Final = "nodus.reconciler.executors.ray.node_main"
NOTES_FILE: Final = "ray-notes.json"
PROJECT_KEY: Final = "nodus.project"
NAME_KEY: Final = "nodus.name"
WORKLOAD_KEY: Final = "nodus.workload"
LIVE_PHASES: Final = frozenset({Phase.PENDING, Phase.RUNNING})
STOPS: Final = {
    "cancel": (Phase.CANCELLED, Reason.CANCEL_REQUESTED, "cancelled"),
    "suspend": (Phase.SUSPENDED, Reason.SUSPEND_REQUESTED, "suspended (spec.state: Suspended)"),
}
NOT_YET: Final = (
    "its files are on the Ray node that ran it, and they come back only through executor.ray.registry (an OCI "
    "registry both reach) or executor.ray.sharedFilesystem: true (the nodes see this project's folder)"
)
OUTPUTS_CACHE: Final = "ray-outputs"
"""Beside the project's jobs folder: the OCI layout of output files fetched from the registry."""


@dataclass(frozen=True)
class Run:
    """One submission of a job: which run it is, Ray's record of it, and its log split."""

    key: RunKey
    job: RayJob
    stream: Stream

    @property
    def submission_id(self) -> str:
        return self.job.submission_id


OWNER_FILE: Final = "ray-owner.json"
_OWNER: Final = re.compile(r"[0-9a-f]{8}")


def owner_id(jobs_root: Path) -> str:
    """The id of this project's state on Ray clusters (in its submission ids): made once, kept in `jobs_root`,
    under a lock so two applies starting at once agree on it."""
    path = jobs_root / OWNER_FILE
    with locked(jobs_root / (OWNER_FILE + ".lock")):
        found = (read_json(path) or {}).get("owner") if path.is_file() else None
        if isinstance(found, str) and _OWNER.fullmatch(found):
            return found
        made = secrets.token_hex(4)
        write_json(path, {"owner": made}, durable=True)
        return made


class RayExecutor:
    """Jobs on a Ray cluster through `jobs` (its Jobs API). `jobs_root` holds this host's notes of its jobs;
    `python` is the node's interpreter with nodus installed (the entrypoint's, absolute); `node_jobs` and
    `node_project` are the node's jobs folder and project folder (None: the node session's defaults).
    `shared_filesystem`: this host sees `node_jobs` at the same path (one machine, or a shared filesystem), so a
    job's outputs are read there, each checked against the sha256 its node recorded (`nodus cp`, `exportTo`).
    `channel` (with the `project` whose store the inputs come from): the registry inputs and outputs travel
    through, for nodes that see no folder of this host's (`channel.py`)."""

    def __init__(
        self,
        jobs: JobsClient,
        jobs_root: Path,
        *,
        python: str = sys.executable,
        node_jobs: str | None = None,
        node_project: str | None = None,
        shared_filesystem: bool = False,
        channel: RegistryChannel | None = None,
        project: Project | None = None,
    ) -> None:
        self.jobs = jobs
        self.jobs_root = jobs_root
        self.python = python
        self.node_jobs = node_jobs
        self.node_project = node_project
        self._node_outputs = LocalExecutor(Path(node_jobs)) if shared_filesystem and node_jobs else None
        if channel is not None and project is None:
            raise ValueError("a registry channel publishes a project's inputs: give the project")
        self.channel = channel
        self.project = project
        insecure = channel is not None and channel.ref.insecure
        self._outputs_cache = OutputsCache(jobs_root.parent / OUTPUTS_CACHE, insecure=insecure)
        self.owner = owner_id(jobs_root)
        self._capabilities: Capabilities | None = None
        # The gateway runs here, under this machine's interpreter: `python` is the nodes'.
        host_services = LocalServices(jobs_root.parent / SERVICES_FOLDER, jobs_root, project)
        self.services = RayServices(
            jobs,
            self.owner,
            host_services,
            jobs_root.parent,
            python=python,
            node_jobs=node_jobs,
            node_project=node_project,
        )
        """Model servers as Ray jobs; the gateway on this machine (`services.py`)."""

    @property
    def capabilities(self) -> Capabilities:
        """Gangs (`gang.py`); the GPU types the cluster's alive nodes offer (read once); services (`services.py`)."""
        if self._capabilities is None:
            self._capabilities = Capabilities(gangs=True, gpu_types=offered_types(self.jobs.nodes()), services=True)
        return self._capabilities

    # --- launch ------------------------------------------------------------------------------------------

    def launch(self, workload: Workload) -> None:
        """Submit the workload's run unless Ray has it, or a later one, already (looked up first: Ray answers a
        reused submission id with HTTP 500). A run that fits no node is held here as Pending, Unschedulable."""
        project, name = workload.project, workload.name
        wanted = RunKey(workload.generation, workload.attempt)
        with locked(self._lock(project, name)):
            runs = self._runs(project, name)
            if any((run.key.generation, run.key.attempt) >= (wanted.generation, wanted.attempt) for run in runs):
                self._drop_held(project, name, wanted)
                return
            held = self._notes(project, name).get("held")
            if held is not None and _held_key(held) >= wanted and held.get("phase") != Phase.PENDING:
                return  # held back, then cancelled or suspended here: launched as far as the protocol goes
            if runs and not _over(runs[-1]):
                last = runs[-1].key
                raise TemporaryError(
                    f"job {project}/{name} still runs generation {last.generation} attempt {last.attempt} on Ray",
                    delay=5,
                    hint="cancel it before launching another generation",
                )
            self._submit(workload, wanted, session_variables.LAUNCH)

    def _submit(self, workload: Workload, key: RunKey, mode: str, cost_so_far: Decimal | None = None) -> None:
        project, name = workload.project, workload.name
        identifier = submission_id(self.owner, project, name, key)
        if self.jobs.info(identifier) is not None:
            self._drop_held(project, name, key)
            return
        placement = place(workload, self.jobs.nodes())
        if isinstance(placement, Unschedulable):
            self._hold(workload, key, placement)
            return
        self.jobs.submit(self._submission(workload, identifier, placement, mode, cost_so_far))
        self._drop_held(project, name, key)

    def _submission(
        self, workload: Workload, identifier: str, placement: Placement, mode: str, cost_so_far: Decimal | None
    ) -> Submission:
        env = {
            session_variables.WORKLOAD_VARIABLE: workload.to_json(),
            session_variables.RUN_VARIABLE: mode,
            gang.SUBMISSION_VARIABLE: identifier,
        }
        # A Job's gang runs its own command on every member; a single node's session and a TrainingJob's members
        # (gang_sessions.py) take their inputs from the registry.
        if (
            self.channel is not None
            and self.project is not None
            and (not gang.is_gang(workload) or runs_sessions(workload))
        ):
            env.update(self.channel.env())
            inputs = self.channel.publish_inputs(workload, self.project)
            if inputs is not None:
                env[INPUTS_VARIABLE] = inputs
        if self.node_jobs is not None:
            env[session_variables.JOBS_VARIABLE] = self.node_jobs
        if self.node_project is not None:
            env[session_variables.PROJECT_VARIABLE] = self.node_project
        if gang.is_gang(workload):
            # The coordinator reserves nothing (Ray runs it on the head); its members reserve the placement.
            env[gang.PLACEMENT_VARIABLE] = gang.placement_to_json(placement)
            if cost_so_far is not None:  # a gang keeps no folder on a node: its cost so far travels with the run
                env[gang.COST_VARIABLE] = str(cost_so_far)
            placement = Placement(num_cpus=0.0)
        return Submission(
            submission_id=identifier,
            entrypoint=f"{shlex.quote(self.python)} -m {NODE_SESSION_MODULE}",
            env_vars=env,
            metadata={PROJECT_KEY: workload.project, NAME_KEY: workload.name, WORKLOAD_KEY: workload.to_json()},
            num_gpus=placement.num_gpus,
            num_cpus=placement.num_cpus,
            memory_bytes=placement.memory_bytes,
            resources=placement.resources,
            label_selector=placement.label_selector,
        )

    # --- observe -----------------------------------------------------------------------------------------

    def exists(self, project: str, name: str) -> bool:
        return bool(self._runs(project, name)) or self._notes(project, name).get("held") is not None

    def observe(self, project: str, name: str, generation: int | None = None) -> Observation:
        """The latest run's state: its final status marker if it wrote one, else its latest status marker with
        Ray's status; `lost` when Ray ended it with no final marker and no stop from this host. A run held back
        (Unschedulable) is Pending with the offers tried. Each run Ray ended is kept on this host (`kept.py`), so
        its log and gradings stay readable with the cluster down."""
        runs = self._runs(project, name)
        self._keep_ended(project, name, runs)
        notes = self._notes(project, name)
        held = notes.get("held")
        if generation is None:
            if held is not None and (not runs or _held_key(held) > runs[-1].key):
                return Observation.of(held)
            if not runs:
                raise ConfigError(f"there is no job {project}/{name} on Ray")
            return self._observation(runs[-1], notes, latest=True, runs=runs)
        chosen = self._generation_runs(project, name, generation, runs)
        return self._observation(chosen[-1], notes, latest=False, runs=chosen)

    def is_alive(self, project: str, name: str) -> bool:
        """Its latest run is pending or running on Ray (the node session, and so its supervisor, lives)."""
        runs = self._runs(project, name)
        if not runs:
            if self._notes(project, name).get("held") is not None:
                return False
            raise ConfigError(f"there is no job {project}/{name} on Ray")
        return not runs[-1].job.ended

    def spec_of(self, project: str, name: str) -> Workload:
        runs = self._runs(project, name)
        notes = self._notes(project, name)
        held = notes.get("held")
        if held is not None and (not runs or _held_key(held) > runs[-1].key):
            workload = Workload.from_json(held["workload"])
        elif runs:
            workload = Workload.from_json(runs[-1].job.metadata[WORKLOAD_KEY])
        else:
            raise ConfigError(f"there is no job {project}/{name} on Ray")
        cap = notes.get("maxCostUSD")
        if cap is not None and workload.max_cost is not None and Decimal(cap) > workload.max_cost:
            workload = workload.with_changes(max_cost_usd=cap)
        return workload

    # --- act ---------------------------------------------------------------------------------------------

    def cancel(self, project: str, name: str) -> None:
        self._stop(project, name, "cancel")

    def suspend(self, project: str, name: str) -> None:
        """Stop the Ray job; the node keeps the job's folder (see the module docstring for what survives)."""
        self._stop(project, name, "suspend")

    def _stop(self, project: str, name: str, how: str) -> None:
        phase, reason, message = STOPS[how]
        with locked(self._lock(project, name)):
            seen = self.observe(project, name)
            if seen.ended or seen.phase == phase:
                return
            runs = self._runs(project, name)
            notes = self._notes(project, name)
            held = notes.get("held")
            if held is not None and (not runs or _held_key(held) > runs[-1].key):
                notes["held"] = {**held, "phase": phase, "reason": reason, "message": message}
                self._write_notes(project, name, notes)
                return
            run = runs[-1]
            notes.setdefault("stops", {})[run.submission_id] = {"phase": phase, "reason": reason, "message": message}
            self._write_notes(project, name, notes)
            if not run.job.ended:
                self.jobs.stop(run.submission_id)

    def resume(self, project: str, name: str, max_cost_usd: str | None = None) -> None:
        """Raise the cap and, when Suspended, submit the next run of the same attempt (`NODUS_RUN=resume`). A
        running job keeps its cap until it next starts (its session on the node reads no new one)."""
        with locked(self._lock(project, name)):
            workload = self.spec_of(project, name)
            seen = self.observe(project, name)
            if seen.ended:
                raise ConfigError(f"job {project}/{name} is {seen.phase}; only a Suspended job can be resumed")
            notes = self._notes(project, name)
            if max_cost_usd is not None:
                workload = _raised(workload, max_cost_usd, f"job {project}/{name}")
                notes["maxCostUSD"] = workload.max_cost_usd
                self._write_notes(project, name, notes)
            if seen.phase != Phase.SUSPENDED:
                return
            cost = Decimal(seen.cost_usd or "0")
            cap = workload.max_cost
            if cap is not None and cost + workload.interval_cost() > cap:
                raise ConfigError(
                    f"job {project}/{name} has cost ${usd(cost)}, which leaves no room under maxCostUSD ${cap}",
                    hint=f"raise maxCostUSD above {usd(cost + workload.interval_cost())} to resume it",
                )
            runs = self._runs(project, name)
            if runs and (runs[-1].key.generation, runs[-1].key.attempt) == (workload.generation, workload.attempt):
                key = RunKey(workload.generation, workload.attempt, runs[-1].key.run + 1)
                self._submit(workload, key, session_variables.RESUME, cost)
            else:  # held back and suspended before it ever ran
                self._submit(workload, RunKey(workload.generation, workload.attempt), session_variables.LAUNCH)

    def restart(self, project: str, name: str) -> None:
        """A lost run started again as attempt + 1 (on the node that has its state, it resumes from it)."""
        with locked(self._lock(project, name)):
            if not self.observe(project, name).lost:
                return
            workload = self.spec_of(project, name)
            restarted = workload.with_changes(attempt=workload.attempt + 1)
            self._submit(restarted, RunKey(restarted.generation, restarted.attempt), session_variables.LAUNCH)

    def abandon(self, project: str, name: str, reason: str, message: str) -> None:
        with locked(self._lock(project, name)):
            if not self.observe(project, name).lost:
                return
            run = self._runs(project, name)[-1]
            notes = self._notes(project, name)
            notes.setdefault("stops", {})[run.submission_id] = {
                "phase": Phase.FAILED,
                "reason": reason,
                "message": message,
            }
            self._write_notes(project, name, notes)

    # --- read what a job left ------------------------------------------------------------------------------

    def logs(self, project: str, name: str, generation: int | None = None) -> RayLog:
        """The trainer log of a generation (every run of it, in order), from the Ray job logs without markers."""
        number = generation if generation is not None else self._latest_generation(project, name)
        self._generation_runs(project, name, number, self._runs(project, name))
        return RayLog(self, project, name, number)

    def outputs(self, project: str, name: str, generation: int | None = None) -> OutputManifest | None:
        run = self._last_run_of(project, name, generation)
        final, recorded = run.stream.final, run.stream.outputs
        if final is None or final.get("phase") != Phase.SUCCEEDED or recorded is None:
            return None
        entries: dict[str, OutputFile] = {}
        for path, entry in (recorded.get("files") or {}).items():
            size, sha256 = entry.get("size"), entry.get("sha256")
            if isinstance(size, bool) or not isinstance(size, int) or not isinstance(sha256, str):
                raise ConfigError(f"Ray job {run.submission_id}: output {path!r} has no size and sha256")
            entries[str(path)] = OutputFile(str(path), size, sha256)
        skipped = tuple(str(path) for path in recorded.get("skipped") or () if isinstance(path, str))
        return OutputManifest(entries, skipped)

    def open_output(self, project: str, name: str, path: str, generation: int | None = None) -> BinaryIO:
        run = self._last_run_of(project, name, generation)
        label = f"job {project}/{name}"
        if _artifact(run) is not None or self._node_outputs is None:
            recorded = self._recorded(run, [path], label, hint=None)
            return self._outputs_cache.files(_artifact(run) or {}, [path], recorded, label)[path].open("rb")
        return self._node_outputs.open_output(project, name, path, generation)

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
        run = self._last_run_of(project, name, generation)
        if _artifact(run) is not None or self._node_outputs is None:
            paths = [relative for relative, _ in copies]
            recorded = self._recorded(run, paths, label, hint="nothing was copied")
            sources = self._outputs_cache.files(_artifact(run) or {}, paths, recorded, label)
            return copy_verified(sources, copies, recorded, label, root=root)
        return self._node_outputs.copy_outputs(project, name, copies, label=label, root=root, generation=generation)

    def _recorded(self, run: Run, paths: Sequence[str], label: str, *, hint: str | None) -> dict[str, dict[str, Any]]:
        """The run's recorded outputs, each of `paths` among them, that can come back through the registry."""
        final, recorded = run.stream.final, run.stream.outputs
        if final is None or final.get("phase") != Phase.SUCCEEDED or recorded is None:
            raise ConfigError(f"{label} has no outputs yet", hint="outputs are collected when the run succeeds")
        files = {str(path): dict(entry) for path, entry in (recorded.get("files") or {}).items()}
        for path in paths:
            if path not in files:
                raise ConfigError(f"{label} has no output {('outputs/' + path)!r}", hint=hint)
        if recorded.get("artifactError"):
            raise ConfigError(f"{label}: its outputs stayed on its Ray node: {recorded['artifactError']}", hint=hint)
        if _artifact(run) is None:
            raise ConfigError(f"{label}: {NOT_YET}", hint=hint)
        return files

    def earlier_generations(self, project: str, name: str) -> list[int]:
        runs = self._runs(project, name)
        if not runs:
            return []
        return sorted({run.key.generation for run in runs if run.key.generation < runs[-1].key.generation})

    def events(self, project: str, name: str, generation: int | None = None) -> Iterator[dict[str, Any]]:
        number = generation if generation is not None else self._latest_generation(project, name)
        runs = self._generation_runs(project, name, number, self._runs(project, name))
        return iter([event for run in runs for event in run.stream.events])

    def gradings(self, project: str, name: str, generation: int | None = None) -> Gradings:
        number = generation if generation is not None else self._latest_generation(project, name)
        runs = self._generation_runs(project, name, number, self._runs(project, name))
        records = tuple(record for run in runs for record in run.stream.gradings)
        where = "Ray job logs of " + ", ".join(run.submission_id for run in runs)
        return Gradings(records, where)

    # --- internals ---------------------------------------------------------------------------------------

    def _keep_ended(self, project: str, name: str, runs: Sequence[Run]) -> None:
        """The trainer's text and gradings of every ended run, kept once (an ended Ray job's log is whole)."""
        for run in runs:
            if run.job.ended:
                where = f"Ray job {run.submission_id}"
                found = KeptRun(where, run.stream.trainer, tuple(run.stream.gradings))
                keep(self.jobs_root, project, name, (run.key.generation, run.key.attempt, run.key.run), found)

    def _runs(self, project: str, name: str) -> list[Run]:
        """The job's submissions on Ray, oldest first, each with its log split."""
        found = []
        for job in self.jobs.list():
            key = run_key(self.owner, project, name, job.submission_id)
            if key is None or job.metadata.get(PROJECT_KEY) != project or job.metadata.get(NAME_KEY) != name:
                continue
            found.append((key, job))
        found.sort(key=lambda pair: pair[0])
        return [
            Run(key, job, status_stream.parse(self.jobs.logs(job.submission_id), complete=job.ended))
            for key, job in found
        ]

    def _observation(self, run: Run, notes: Mapping[str, Any], *, latest: bool, runs: Sequence[Run]) -> Observation:
        stream, job = run.stream, run.job
        stop = (notes.get("stops") or {}).get(run.submission_id)
        base = {
            "generation": run.key.generation,
            "attempt": run.key.attempt,
            "raySubmissionId": run.submission_id,
            "attempts": attempts([other for other in runs if other.key.generation == run.key.generation]),
        }
        reported = {**base, **(stream.final or stream.status or {}), "events": stream.events[-100:]}
        if stream.final is not None and (stop is None or stream.final.get("phase") in ENDED_PHASES):
            return Observation.of(reported)
        if stop is not None and (job.ended or stop["phase"] == Phase.FAILED):
            return Observation.of({**reported, **stop})
        if job.ended:
            phase = reported.get("phase") if reported.get("phase") in LIVE_PHASES else Phase.PENDING
            message = f"the Ray job {run.submission_id} is {job.status}: {job.message or 'no message'}"
            return Observation.of({**reported, "phase": phase, "message": message}, lost=latest)
        if stream.status is None or job.status == RAY_PENDING:
            waiting = f"Ray job {run.submission_id} is {job.status}"
            return Observation.of({**reported, "phase": Phase.PENDING, "reason": Reason.LAUNCHED, "message": waiting})
        return Observation.of(reported)

    def _generation_runs(self, project: str, name: str, generation: int, runs: list[Run]) -> list[Run]:
        if not runs and self._notes(project, name).get("held") is None:
            raise ConfigError(f"there is no job {project}/{name} on Ray")
        chosen = [run for run in runs if run.key.generation == generation]
        if not chosen:
            known = ", ".join(str(number) for number in sorted({run.key.generation for run in runs})) or "none run yet"
            raise ConfigError(f"job {project}/{name} has no generation {generation} on Ray (generations: {known})")
        return chosen

    def _latest_generation(self, project: str, name: str) -> int:
        runs = self._runs(project, name)
        if runs:
            return runs[-1].key.generation
        held = self._notes(project, name).get("held")
        if held is None:
            raise ConfigError(f"there is no job {project}/{name} on Ray")
        return int(held["generation"])

    def _last_run_of(self, project: str, name: str, generation: int | None) -> Run:
        number = generation if generation is not None else self._latest_generation(project, name)
        return self._generation_runs(project, name, number, self._runs(project, name))[-1]

    def _folder(self, project: str, name: str) -> Path:
        return self.jobs_root / project / name

    def _lock(self, project: str, name: str) -> Path:
        folder = self._folder(project, name)
        folder.mkdir(parents=True, exist_ok=True)
        return folder / ".ray-notes.lock"

    def _notes(self, project: str, name: str) -> dict[str, Any]:
        return read_json(self._folder(project, name) / NOTES_FILE) or {}

    def _write_notes(self, project: str, name: str, notes: Mapping[str, Any]) -> None:
        folder = self._folder(project, name)
        folder.mkdir(parents=True, exist_ok=True)
        write_json(folder / NOTES_FILE, dict(notes), durable=True)

    def _hold(self, workload: Workload, key: RunKey, unschedulable: Unschedulable) -> None:
        notes = self._notes(workload.project, workload.name)
        notes["held"] = {
            "phase": Phase.PENDING,
            "reason": Reason.UNSCHEDULABLE,
            "message": f"no Ray node fits: {unschedulable.message}",
            "generation": key.generation,
            "attempt": key.attempt,
            "run": key.run,
            "workload": workload.to_json(),
            "maxCostUSD": workload.max_cost_usd,
        }
        self._write_notes(workload.project, workload.name, notes)

    def _drop_held(self, project: str, name: str, key: RunKey) -> None:
        notes = self._notes(project, name)
        held = notes.get("held")
        if held is not None and _held_key(held) <= key:
            del notes["held"]
            self._write_notes(project, name, notes)


class RayLog:
    """The trainer log of one generation across its runs, read on from where the last read ended."""

    def __init__(self, executor: RayExecutor, project: str, name: str, generation: int) -> None:
        self._executor = executor
        self._where = (project, name, generation)
        self.offset = 0
        self._ended = False

    def read(self) -> bytes:
        project, name, generation = self._where
        runs = [run for run in self._executor._runs(project, name) if run.key.generation == generation]
        text = "".join(run.stream.trainer for run in runs).encode("utf-8")
        chunk = text[self.offset :]
        self.offset = len(text)
        return chunk

    def ended(self) -> bool:
        project, name, generation = self._where
        if generation != self._executor._latest_generation(project, name):
            return True
        return self._executor.observe(project, name).ended


def attempts(runs: Sequence[Run]) -> list[dict[str, Any]]:
    """Each rank's attempts across the runs of one generation, oldest first: a gang's as its coordinator recorded
    them (`status.gang.attempts`, every epoch of every run), a single-node job's one per run (rank 0, on the node
    Ray placed its session, its cost that run's share)."""
    rows: list[dict[str, Any]] = []
    before = Decimal(0)
    for run in runs:
        report = run.stream.final or run.stream.status or {}
        recorded = (report.get("gang") or {}).get("attempts") if isinstance(report.get("gang"), dict) else None
        if isinstance(recorded, list):
            rows.extend(dict(row) for row in recorded if isinstance(row, dict))
            continue
        row: dict[str, Any] = {"rank": 0, "attempt": run.key.attempt, "run": run.key.run}
        if run.job.driver_node_id:
            row["node"] = run.job.driver_node_id
        if run.job.start_time_ms:
            row["startedAt"] = run.job.start_time_ms / 1000
        if run.job.end_time_ms:
            row["endedAt"] = run.job.end_time_ms / 1000
        row["phase"] = report.get("phase") or Phase.PENDING
        if report.get("reason"):
            row["reason"] = report["reason"]
        cost = report.get("costUSD")
        if isinstance(cost, str):
            total = Decimal(cost)
            row["costUSD"] = usd(total - before if total >= before else total)  # a run resumed on its node goes on
            before = total
        rows.append(row)
    return rows


def _artifact(run: Run) -> dict[str, Any] | None:
    """The registry artifact the run's node pushed its outputs to (`channel.publish_outputs`), if it did."""
    artifact = (run.stream.outputs or {}).get("artifact")
    return artifact if isinstance(artifact, dict) else None


def _held_key(held: Mapping[str, Any]) -> RunKey:
    return RunKey(int(held["generation"]), int(held["attempt"]), int(held.get("run") or 0))


def _over(run: Run) -> bool:
    """The run has ended (Ray ended it) or recorded its end (its session is only closing down)."""
    final = run.stream.final
    return run.job.ended or (final is not None and final.get("phase") in (*ENDED_PHASES, Phase.SUSPENDED))


def _raised(workload: Workload, max_cost_usd: str, label: str) -> Workload:
    new = parse_usd(max_cost_usd, "maxCostUSD")
    old = workload.max_cost
    if old is not None and new < old:
        raise ConfigError(f"maxCostUSD can only be raised: {label} has ${old}, not ${new}")
    return workload.with_changes(max_cost_usd=max_cost_usd)
