"""One job of the local executor: what to run (`JobSpec`), where it lives on disk (`JobFiles`), and the small
facts about files, locks and processes that the executor and the supervisor share.

Who uses it: `LocalExecutor` (writes the spec, reads the status, probes and ends processes) and the
supervisor (reads the spec, writes the status). Both sides meet only through the job folder:

    <jobs_root>/<project>/<name>/
        spec.json            JobSpec (camelCase JSON); rewritten by the executor on a new attempt or cap
        grading.json         the host's GradingSettings for this job's graders (with a runner uid block of its own)
        status.json          written by the supervisor while it runs, by the executor when none runs
        supervisor.json      {"pid", "startTicks", "launchedAt", "generation", "attempt"}: the supervisor launched
        outputs.json         {"files": {path: {"sha256", "size"}}, "skipped": [...]} of outputs/ on success
        input/params.json    the trainer's parameters            (NODUS_INPUT_PARAMS is input/)
        state/               the trainer's resumable state       (NODUS_STATE_DIR)
        outputs/             the trainer's results                (NODUS_OUTPUT_DIR)
        logs/                trainer.log, supervisor.log, attempt.log, events.jsonl, gradings.jsonl,
                             attempt-wire.jsonl
        attempt.sock         the attempt API                     (NODUS_ATTEMPT_API; elsewhere if the path is long)
        cancel, suspend      requests from the executor, picked up by the supervisor
        supervisor.lock      held (flock) by the live supervisor for its whole life
        .executor.lock       serialises the executor's own operations on this job
        generations/<N>/     an earlier generation, set aside whole when generation N+1 launched: its spec.json,
                             status.json, outputs.json, outputs/, logs/ and input/ in the same layout (its state/
                             is removed: a new generation starts over). `JobFiles.earlier(N)` reads it.

The top of the folder is always the generation launched last; nothing of an earlier one is overwritten.

Every JSON file is written whole (temporary file, then rename), so a reader never sees half of one.
Times are seconds since the epoch; money is a decimal string in US dollars.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import re
import signal
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, Final, Literal

from nodus.errors import ConfigError, PermanentError
from nodus.specs.status_names import ENDED_PHASES, Phase, Reason

from ...grading import GradingSettings, ProcessSettings
from ...session.cost import parse_usd as parse_usd
from ...session.cost import usd as usd
from ...session.environment import EnvironmentSpec as EnvironmentSpec

JobKind = Literal["TrainingJob", "Job"]

# The names the executor and the supervisor use; the words are `nodus.specs.status_names`'.
PENDING: Final = Phase.PENDING
RUNNING: Final = Phase.RUNNING
SUSPENDED: Final = Phase.SUSPENDED
SUCCEEDED: Final = Phase.SUCCEEDED
FAILED: Final = Phase.FAILED
CANCELLED: Final = Phase.CANCELLED
PHASES = (PENDING, RUNNING, SUSPENDED, SUCCEEDED, FAILED, CANCELLED)
TERMINAL = ENDED_PHASES
"""Phases nothing comes back from (Suspended does: resume)."""

# Reasons recorded in status.json.
MAX_COST_REACHED: Final = Reason.MAX_COST_REACHED
SUSPEND_REQUESTED: Final = Reason.SUSPEND_REQUESTED
CANCEL_REQUESTED: Final = Reason.CANCEL_REQUESTED
TRAINER_FAILED: Final = Reason.TRAINER_FAILED
TRAINER_SUCCEEDED: Final = Reason.TRAINER_SUCCEEDED
SUPERVISOR_LOST: Final = Reason.SUPERVISOR_LOST
SUPERVISOR_STOPPED: Final = Reason.SUPERVISOR_STOPPED
SUPERVISOR_ERROR: Final = Reason.SUPERVISOR_ERROR
RESUMED: Final = Reason.RESUMED
LAUNCHED: Final = Reason.LAUNCHED

MAX_UNIX_SOCKET_PATH = 107
"""sun_path holds 108 bytes with the terminating NUL."""

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


# --- the spec ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobSpec:
    """What the supervisor runs: the trainer's argv, its parameters, the environment, the price and the cap.

    `generation` (of the resource's spec) and `attempt` (restarts after a lost supervisor) make a launch
    idempotent: the same pair never starts a second supervisor. Intervals are in seconds: cost is
    accounted every `accounting_interval_s` (10 s in real use; tests use fractions of a second), the
    supervisor heartbeats every `heartbeat_interval_s`, and a stopped trainer gets `stop_grace_s` between
    SIGTERM and SIGKILL.
    """

    name: str
    project: str
    command: tuple[str, ...]
    kind: JobKind = "TrainingJob"
    generation: int = 1
    attempt: int = 1
    env: Mapping[str, str] = field(default_factory=dict)
    environment: EnvironmentSpec | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    price_per_hour_usd: str = "0"
    max_cost_usd: str | None = None
    accounting_interval_s: float = 10.0
    heartbeat_interval_s: float = 5.0
    stop_grace_s: float = 10.0
    image: str | None = None
    """The image the command runs in (a Job's `spec.image`, a runtime's `image`), under podman with no network
    (`nodus.reconciler.executors.local.trainer_container`); None: on this host, as the supervisor's child."""
    secrets: tuple[Mapping[str, Any], ...] = ()
    """`SecretRef`s (as JSON) the supervisor reads into the trainer's environment when it starts it: references to
    where the values are, never a value (spec.json holds only these)."""

    def __post_init__(self) -> None:
        if self.image is not None and (not isinstance(self.image, str) or not self.image.strip()):
            raise ConfigError(f"job {self.name}: image must be an image reference, got {self.image!r}")
        for what, value in (("name", self.name), ("project", self.project)):
            if not isinstance(value, str) or not _NAME.match(value):
                raise ConfigError(f"job {what} {value!r} must be a DNS label (a-z, 0-9 and '-', at most 63)")
        if self.kind not in ("TrainingJob", "Job"):
            raise ConfigError(f"job {self.name}: kind must be TrainingJob or Job, got {self.kind!r}")
        if not self.command or not all(isinstance(a, str) and a for a in self.command):
            raise ConfigError(f"job {self.name}: command must be a non-empty list of non-empty strings")
        for what, number in (("generation", self.generation), ("attempt", self.attempt)):
            if isinstance(number, bool) or not isinstance(number, int) or number < 1:
                raise ConfigError(f"job {self.name}: {what} must be a whole number >= 1, got {number!r}")
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in self.env.items()):
            raise ConfigError(f"job {self.name}: env must map names to strings")
        parse_usd(self.price_per_hour_usd, f"job {self.name}: pricePerHourUSD")
        if self.max_cost_usd is not None:
            parse_usd(self.max_cost_usd, f"job {self.name}: maxCostUSD")
        intervals = {
            "accountingIntervalS": self.accounting_interval_s,
            "heartbeatIntervalS": self.heartbeat_interval_s,
        }
        for what, seconds in intervals.items():
            if not isinstance(seconds, int | float) or not seconds > 0:
                raise ConfigError(f"job {self.name}: {what} must be a positive number of seconds, got {seconds!r}")
        if not isinstance(self.stop_grace_s, int | float) or self.stop_grace_s < 0:
            raise ConfigError(f"job {self.name}: stopGraceS must be >= 0, got {self.stop_grace_s!r}")

    @property
    def price_per_hour(self) -> Decimal:
        return parse_usd(self.price_per_hour_usd, "pricePerHourUSD")

    @property
    def max_cost(self) -> Decimal | None:
        return None if self.max_cost_usd is None else parse_usd(self.max_cost_usd, "maxCostUSD")

    def interval_cost(self) -> Decimal:
        """What one accounting interval costs: the most a run may go over its cap."""
        return self.price_per_hour * Decimal(str(self.accounting_interval_s)) / Decimal(3600)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "project": self.project,
            "kind": self.kind,
            "generation": self.generation,
            "attempt": self.attempt,
            "command": list(self.command),
            "env": dict(self.env),
            "environment": self.environment.to_json() if self.environment else None,
            "params": dict(self.params),
            "pricePerHourUSD": self.price_per_hour_usd,
            "maxCostUSD": self.max_cost_usd,
            "accountingIntervalS": self.accounting_interval_s,
            "heartbeatIntervalS": self.heartbeat_interval_s,
            "stopGraceS": self.stop_grace_s,
            "image": self.image,
            "secrets": [dict(ref) for ref in self.secrets],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> JobSpec:
        environment = data.get("environment")
        try:
            return cls(
                name=data["name"],
                project=data["project"],
                kind=data.get("kind", "TrainingJob"),
                generation=data.get("generation", 1),
                attempt=data.get("attempt", 1),
                command=tuple(data["command"]),
                env=dict(data.get("env") or {}),
                environment=EnvironmentSpec.from_json(environment) if environment else None,
                params=dict(data.get("params") or {}),
                price_per_hour_usd=str(data.get("pricePerHourUSD", "0")),
                max_cost_usd=None if data.get("maxCostUSD") is None else str(data["maxCostUSD"]),
                accounting_interval_s=data.get("accountingIntervalS", 10.0),
                heartbeat_interval_s=data.get("heartbeatIntervalS", 5.0),
                stop_grace_s=data.get("stopGraceS", 10.0),
                image=data.get("image"),
                secrets=tuple(dict(ref) for ref in data.get("secrets") or ()),
            )
        except KeyError as exc:
            raise ConfigError(f"a job spec needs {exc.args[0]!r}") from None
        except TypeError as exc:
            raise ConfigError(f"a job spec has a field of the wrong type: {exc}") from None


# --- grading settings as JSON (the supervisor is another process) -----------------------------------------


def grading_to_json(settings: GradingSettings) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for item in dataclasses.fields(settings):
        value = getattr(settings, item.name)
        if item.name == "process":
            data["process"] = {
                "python": str(value.python),
                "site_dirs": [str(p) for p in value.site_dirs],
                "env_source": str(value.env_source) if value.env_source else None,
            }
        elif isinstance(value, Path):
            data[item.name] = str(value)
        elif isinstance(value, tuple):
            data[item.name] = list(value)
        elif isinstance(value, Mapping):
            data[item.name] = dict(value)
        else:
            data[item.name] = value
    return data


def grading_from_json(data: Mapping[str, Any]) -> GradingSettings:
    known = {item.name for item in dataclasses.fields(GradingSettings)}
    values: dict[str, Any] = {key: value for key, value in data.items() if key in known}
    if values.get("stage_dir") is not None:
        values["stage_dir"] = Path(values["stage_dir"])
    if "container_command" in values:
        values["container_command"] = tuple(values["container_command"])
    process = values.pop("process", None)
    if process is not None:
        values["process"] = ProcessSettings(
            python=Path(process["python"]),
            site_dirs=tuple(Path(p) for p in process["site_dirs"]),
            env_source=Path(process["env_source"]) if process.get("env_source") else None,
        )
    return GradingSettings(**values)


# --- files -------------------------------------------------------------------------------------------------


def write_json(path: Path, document: object, *, durable: bool = False) -> None:
    """Replace `path` whole: a reader sees the old file or the new one, never a part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(document, out, indent=2, sort_keys=True, ensure_ascii=False)
            out.write("\n")
            if durable:
                out.flush()
                os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in `path`, or None when there is no such file."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise PermanentError(f"{path} is not JSON ({exc})") from None
    if not isinstance(document, dict):
        raise PermanentError(f"{path} holds a JSON {type(document).__name__}, not an object")
    return document


def json_objects(lines: Iterable[str]) -> Iterator[dict[str, Any]]:
    """The JSON objects among `lines` (a JSON-lines log); a line that is not one, such as the last line of a
    writer killed mid-write, is skipped."""
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            yield record


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """The JSON objects of a JSON-lines log (none when it does not exist yet), read at the first `next`."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return
    yield from json_objects(text.splitlines())


def append_jsonl(path: Path, record: object) -> None:
    line = json.dumps(record, sort_keys=True, ensure_ascii=False, separators=(",", ":")) + "\n"
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)  # like the JSON files
    with os.fdopen(descriptor, "a", encoding="utf-8") as out:
        out.write(line)


def log_tail(path: Path, *, offset: int = 0, lines: int = 20, max_bytes: int = 16384) -> list[str]:
    """The last `lines` lines written to `path` after byte `offset` (the start of this attempt's output)."""
    try:
        with path.open("rb") as log:
            size = log.seek(0, os.SEEK_END)
            start = max(offset, size - max_bytes)
            log.seek(start)
            data = log.read()
    except FileNotFoundError:
        return []
    text = data.decode("utf-8", errors="replace")
    if start > offset:
        text = text.partition("\n")[2]  # the first line was cut in the middle
    return [line for line in text.splitlines() if line.strip()][-lines:]


def file_sha256(path: Path) -> str:
    """The hex sha256 of a file, read in chunks: what outputs.json records and `nodus cp` checks."""
    digest = hashlib.sha256()
    with path.open("rb") as source:
        for chunk in iter(lambda: source.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def manifest_of(outputs: Path) -> dict[str, Any]:
    """sha256 and size of every regular file under `outputs` (what `nodus cp` verifies against).

    Symbolic links and other special files are listed under `skipped`, never followed: a link could name
    anything on the host.
    """
    files: dict[str, dict[str, Any]] = {}
    skipped: list[str] = []
    for root, dirs, names in os.walk(outputs, followlinks=False):
        base = Path(root)
        for directory in list(dirs):
            if (base / directory).is_symlink():
                skipped.append((base / directory).relative_to(outputs).as_posix())
                dirs.remove(directory)
        for name in names:
            path = base / name
            relative = path.relative_to(outputs).as_posix()
            if path.is_symlink() or not path.is_file():
                skipped.append(relative)
                continue
            files[relative] = {"sha256": file_sha256(path), "size": path.stat().st_size}
    return {"files": dict(sorted(files.items())), "skipped": sorted(skipped)}


@dataclass(frozen=True)
class JobFiles:
    """The paths of one job's folder (nothing is created until someone writes)."""

    dir: Path

    @classmethod
    def of(cls, jobs_root: Path, project: str, name: str) -> JobFiles:
        return cls(jobs_root / project / name)

    @property
    def spec(self) -> Path:
        return self.dir / "spec.json"

    @property
    def grading(self) -> Path:
        return self.dir / "grading.json"

    @property
    def status(self) -> Path:
        return self.dir / "status.json"

    @property
    def supervisor(self) -> Path:
        return self.dir / "supervisor.json"

    @property
    def outputs_manifest(self) -> Path:
        return self.dir / "outputs.json"

    @property
    def input(self) -> Path:
        return self.dir / "input"

    @property
    def params(self) -> Path:
        return self.dir / "input" / "params.json"

    @property
    def state(self) -> Path:
        return self.dir / "state"

    @property
    def outputs(self) -> Path:
        return self.dir / "outputs"

    @property
    def logs(self) -> Path:
        return self.dir / "logs"

    @property
    def trainer_log(self) -> Path:
        return self.dir / "logs" / "trainer.log"

    @property
    def supervisor_log(self) -> Path:
        return self.dir / "logs" / "supervisor.log"

    @property
    def attempt_log(self) -> Path:
        return self.dir / "logs" / "attempt.log"

    @property
    def wire_log(self) -> Path:
        return self.dir / "logs" / "attempt-wire.jsonl"

    @property
    def gradings_log(self) -> Path:
        return self.dir / "logs" / "gradings.jsonl"

    @property
    def events_log(self) -> Path:
        return self.dir / "logs" / "events.jsonl"

    @property
    def cancel_request(self) -> Path:
        return self.dir / "cancel"

    @property
    def suspend_request(self) -> Path:
        return self.dir / "suspend"

    @property
    def supervisor_lock(self) -> Path:
        return self.dir / "supervisor.lock"

    @property
    def executor_lock(self) -> Path:
        return self.dir / ".executor.lock"

    @property
    def socket(self) -> Path:
        """The attempt API's socket: in the job folder, or under a per-user folder in /tmp when that path is
        longer than a Unix socket address can be (deep job roots, long names)."""
        inside = self.dir / "attempt.sock"
        if len(os.fsencode(inside)) <= MAX_UNIX_SOCKET_PATH:
            return inside
        key = hashlib.sha256(os.fsencode(self.dir.resolve())).hexdigest()[:24]
        return Path(tempfile.gettempdir()) / f"nodus-{os.getuid()}" / f"{key}.sock"

    @property
    def generations(self) -> Path:
        return self.dir / "generations"

    def earlier(self, generation: int) -> JobFiles:
        """The folder generation `generation` was set aside in when a later one launched (the same layout)."""
        return JobFiles(self.generations / str(generation))

    def earlier_generations(self) -> list[int]:
        """The generations set aside in this folder, oldest first."""
        try:
            names = [entry.name for entry in self.generations.iterdir() if entry.is_dir()]
        except FileNotFoundError:
            return []
        return sorted(int(name) for name in names if name.isdigit())

    def read_spec(self) -> JobSpec:
        data = read_json(self.spec)
        if data is None:
            raise ConfigError(f"no job in {self.dir}")
        return JobSpec.from_json(data)

    def read_status(self) -> dict[str, Any]:
        return read_json(self.status) or {}


def private_socket_dir(path: Path) -> None:
    """Make the socket's folder, refusing one in /tmp that another user made (they could swap the socket)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = path.parent.stat()
    if path.parent.parent == Path(tempfile.gettempdir()) and (info.st_uid != os.getuid() or info.st_mode & 0o077):
        raise PermanentError(f"{path.parent} belongs to another user or is open to others; remove it")


# --- locks -------------------------------------------------------------------------------------------------


def try_lock(path: Path) -> int | None:
    """An exclusive flock on `path` (a descriptor to keep open), or None when someone else holds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def lock_held(path: Path) -> bool:
    """Whether a live process holds `path`'s flock. The kernel drops it when the holder dies, SIGKILL too."""
    if not path.exists():
        return False
    fd = try_lock(path)
    if fd is None:
        return True
    os.close(fd)
    return False


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold `path`'s flock for the block, waiting for it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


# --- processes ---------------------------------------------------------------------------------------------


def start_ticks(pid: int) -> int | None:
    """When process `pid` started (clock ticks since boot), or None when it is gone or a zombie.

    Recorded next to every pid, so that a pid the kernel has since given to another process is never signalled.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = stat.rpartition(")")[2].split()
    if not fields or fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def same_process_alive(pid: object, ticks: object) -> bool:
    return isinstance(pid, int) and isinstance(ticks, int) and pid > 0 and start_ticks(pid) == ticks


def signal_verified(pid: object, ticks: object, sig: signal.Signals, *, group: bool = False) -> bool:
    """Send `sig` to `pid` (its process group with `group`) if it is still the process that started at `ticks`."""
    if not same_process_alive(pid, ticks):
        return False
    assert isinstance(pid, int)
    try:
        if group:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


def wait_gone(pid: object, ticks: object, timeout_s: float) -> bool:
    """Wait until the process is gone (or a zombie); True if it went within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while same_process_alive(pid, ticks):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True
