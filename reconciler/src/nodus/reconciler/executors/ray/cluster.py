"""Local Ray clusters that nodus starts and stops by pid: the library behind `nodus cluster up/down/status`.

Who calls it: `nodus.cli.cluster` (the commands) and `nodus.testing.ray_cluster` (the tests' cluster). It is for
trying the Ray executor on one machine; a real cluster (KubeRay, `ray up`) is pointed at, not started, by nodus.

What `up` starts: a head with no CPUs (`--num-cpus 0`: jobs go to workers, the head only schedules) and N workers,
each a `ray start --block` in a session of its own (`start_new_session`), so every process Ray forks for that node
(gcs_server, raylet, dashboard, agents, workers) is in a process group and session nodus created. Every node binds
127.0.0.1, with its own dashboard-agent port (several nodes share one host). With `netns` they run inside a network
namespace that has only loopback (`netns.py`): Ray also listens on every interface (FACTS.md). A node's environment
is the base one of `process_env.py` with Ray's settings and a node session's (`_node_env`), not the whole shell `up`
ran in: job entrypoints on the node inherit it.

GPU types (the spelling the Ray executor places jobs by): a worker started with GPU type TYPE and COUNT carries the
custom resource `nodus.dev/gpu-type/TYPE` = COUNT (`gpu_type_resource`) and the node label `nodus.dev/gpu-type=TYPE`
(`GPU_TYPE_LABEL`, Ray 2.60's `--labels`). Workers claim no Ray GPUs (`--num-gpus 0`): the types are made up, and on a
host with real GPUs every local node would otherwise claim all of them.

Token auth always: a random token in `token` (0600) beside the record, handed to every node as `RAY_AUTH_MODE=token`
and `RAY_AUTH_TOKEN_PATH` (Ray 2.60's variables, `ray._private.authentication`); clients send it as
`Authorization: Bearer TOKEN`.

The record, `cluster.json` in the cluster's folder: the GCS address, the dashboard URL, the token file, the network
namespace (and whether nodus made it), Ray's temp folder, and per node its role, pid, start time (clock ticks since
boot, from /proc: a pid the kernel gave to another process since is never taken for ours), resources and labels.
`down` ends exactly those nodes' sessions (`owned_processes`): SIGTERM to each node's process group and to every
other process of its sessions or below it, a wait, SIGKILL to what is left, then it checks /proc that nothing of
ours remains. It never runs `ray stop`, which ends every Ray process of the machine by name.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

from nodus.builder.host_programs import which
from nodus.errors import ConfigError, ExecutorError, PrerequisiteError
from nodus.reconciler.executors.local.job import same_process_alive, signal_verified, start_ticks
from nodus.reconciler.executors.process_env import NODE_SESSION_SETTINGS, RAY_SETTINGS, base_environment
from nodus.reconciler.executors.ray import netns
from nodus.reconciler.executors.ray.jobs_client import EXTRA
from nodus.reconciler.executors.ray.placement import GPU_TYPE_LABEL
from nodus.reconciler.executors.ray.placement import GPU_TYPE_RESOURCE as GPU_TYPE_RESOURCE_PREFIX

RECORD_NAME = "cluster.json"
TOKEN_NAME = "token"
LOGS_NAME = "logs"
RAY_INSTALL_HINT = f"pip install '{EXTRA}'"
UP_TIMEOUT_S = 180.0
STOP_GRACE_S = 10.0  # `ray start --block` drains up to 30 s on SIGTERM; what is left then is killed
OBJECT_STORE_BYTES = 256 * 1024 * 1024
_GPU_TYPE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def gpu_type_resource(gpu_type: str) -> str:
    """The custom resource a worker of GPU type `gpu_type` carries (one unit per made-up GPU)."""
    return GPU_TYPE_RESOURCE_PREFIX + gpu_type


@dataclass(frozen=True)
class WorkerSpec:
    """One worker node to start: its CPUs and, optionally, a made-up GPU type with a count."""

    cpus: int = 1
    gpu_type: str | None = None
    gpu_count: int = 1

    def resources(self) -> dict[str, float]:
        return {} if self.gpu_type is None else {gpu_type_resource(self.gpu_type): float(self.gpu_count)}

    def labels(self) -> dict[str, str]:
        return {} if self.gpu_type is None else {GPU_TYPE_LABEL: self.gpu_type}


def parse_gpu_type(text: str) -> tuple[str, int]:
    """`TYPE[:COUNT]` of `--gpu-type` as (TYPE, COUNT); COUNT defaults to 1."""
    name, _, count = text.partition(":")
    if not _GPU_TYPE.fullmatch(name):
        raise ConfigError(f"--gpu-type {text!r}: TYPE is letters, digits, '_', '.', '-' (e.g. H100 or H100:8)")
    if not count:
        return name, 1
    if not count.isdigit() or int(count) < 1:
        raise ConfigError(f"--gpu-type {text!r}: COUNT must be a whole number of 1 or more")
    return name, int(count)


def worker_specs(workers: int, gpu_types: Sequence[str], cpus: int) -> list[WorkerSpec]:
    """The workers of `up --workers N --gpu-type ... --cpus N`: the i-th worker gets the i-th GPU type.

    More types than workers is an error (a type no node would carry); fewer leave the rest without a GPU type."""
    if workers < 0:
        raise ConfigError(f"--workers {workers}: must be 0 or more")
    if cpus < 1:
        raise ConfigError(f"--cpus {cpus}: a worker needs at least 1 CPU")
    if len(gpu_types) > workers:
        raise ConfigError(f"--gpu-type given {len(gpu_types)} times for {workers} worker(s): one type per worker")
    parsed = [parse_gpu_type(text) for text in gpu_types]
    return [WorkerSpec(cpus, *(parsed[index] if index < len(parsed) else (None, 1))) for index in range(workers)]


@dataclass
class NodeRecord:
    role: str
    """`head` or `worker-N`."""
    pid: int
    start_ticks: int
    resources: dict[str, float] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    log: str = ""

    def alive(self) -> bool:
        return same_process_alive(self.pid, self.start_ticks)


@dataclass
class ClusterRecord:
    address: str
    """The GCS address workers and drivers join (`127.0.0.1:PORT`)."""
    dashboard_url: str
    """Where the Jobs API is (`http://127.0.0.1:PORT`): the executor setting's address."""
    token_file: str
    netns: str | None
    netns_created: bool
    temp_dir: str
    nodes: list[NodeRecord]

    def token(self) -> str:
        return Path(self.token_file).read_text().strip()


# --- the record -----------------------------------------------------------------------------------------------


def record_path(folder: Path) -> Path:
    return folder / RECORD_NAME


def read_record(folder: Path) -> ClusterRecord | None:
    """The cluster recorded in `folder` (None if none); a damaged record is a ConfigError naming the field."""
    path = record_path(folder)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: not a cluster record ({exc})") from None
    return _parse_record(path, data)


def _parse_record(path: Path, data: Any) -> ClusterRecord:
    def need(obj: Any, key: str, kind: type, where: str) -> Any:
        if not isinstance(obj, dict) or not isinstance(obj.get(key), kind) or isinstance(obj.get(key), bool):
            raise ConfigError(f"{path}: {where}{key} is missing or not a {_kind_name(kind)}")
        return obj[key]

    nodes = []
    for index, node in enumerate(need(data, "nodes", list, "")):
        where = f"nodes[{index}]."
        nodes.append(
            NodeRecord(
                role=need(node, "role", str, where),
                pid=need(node, "pid", int, where),
                start_ticks=need(node, "start_ticks", int, where),
                resources={str(k): float(v) for k, v in need(node, "resources", dict, where).items()},
                labels={str(k): str(v) for k, v in need(node, "labels", dict, where).items()},
                log=need(node, "log", str, where),
            )
        )
    namespace = data.get("netns")
    if namespace is not None and not isinstance(namespace, str):
        raise ConfigError(f"{path}: netns is not a string")
    return ClusterRecord(
        address=need(data, "address", str, ""),
        dashboard_url=need(data, "dashboard_url", str, ""),
        token_file=need(data, "token_file", str, ""),
        netns=namespace,
        netns_created=bool(data.get("netns_created", False)),
        temp_dir=need(data, "temp_dir", str, ""),
        nodes=nodes,
    )


def _kind_name(kind: type) -> str:
    return {list: "list", dict: "mapping", str: "string", int: "whole number"}.get(kind, "value")


def write_record(folder: Path, record: ClusterRecord) -> None:
    """Write `cluster.json` whole (a temporary file renamed over it: never half a record)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = record_path(folder)
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    temporary.write_text(json.dumps(asdict(record), indent=2, sort_keys=True) + "\n")
    temporary.replace(path)


def write_token(folder: Path) -> Path:
    """A fresh random token in `folder/token`, readable by its owner only (created 0600, never widened)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / TOKEN_NAME
    path.unlink(missing_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(secrets.token_hex(32) + "\n")
    return path


# --- our processes ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Process:
    pid: int
    start_ticks: int
    command: str


def _stat(pid: int) -> tuple[int, int, int] | None:
    """(ppid, session id, start ticks) of `pid`, None when it is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = stat.rpartition(")")[2].split()
    if len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    return int(fields[1]), int(fields[3]), int(fields[19])


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def owned_processes(nodes: Iterable[NodeRecord]) -> list[Process]:
    """Every live process of ours: the nodes' `ray start` processes (pid and start time match the record), the
    members of the sessions they lead, and everything below them (a Ray process that left the session still has
    its parent chain). A session whose leader's pid now belongs to another process is not ours; a session whose
    leader is gone is ours only for members that started after the leader did (the kernel does not give a pid to
    a new process while a session of that id still has members)."""
    nodes = list(nodes)
    table: dict[int, tuple[int, int, int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None:
            table[int(entry.name)] = stat
    sessions: dict[int, int] = {}
    for node in nodes:
        leader = table.get(node.pid)
        if leader is None or leader[2] == node.start_ticks:
            sessions[node.pid] = node.start_ticks
    ours = {pid for pid, (_, sid, ticks) in table.items() if sid in sessions and ticks >= sessions[sid]}
    changed = True
    while changed:  # add the descendants of what is ours
        changed = False
        for pid, (ppid, _, _) in table.items():
            if pid not in ours and ppid in ours:
                ours.add(pid)
                changed = True
    return sorted((Process(pid, table[pid][2], _command(pid)) for pid in ours), key=lambda p: p.pid)


def _alive(processes: Iterable[Process]) -> list[Process]:
    return [p for p in processes if same_process_alive(p.pid, p.start_ticks)]


def end_processes(nodes: Sequence[NodeRecord], *, grace_s: float = STOP_GRACE_S) -> list[Process]:
    """SIGTERM every process of ours (each node's group first, so `ray start` ends its children its own way),
    wait up to `grace_s`, SIGKILL what is left; returns what is still there afterwards (normally nothing)."""
    found = owned_processes(nodes)
    for node in nodes:
        signal_verified(node.pid, node.start_ticks, signal.SIGTERM, group=True)
    for process in found:
        signal_verified(process.pid, process.start_ticks, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        found = _alive({*found, *owned_processes(nodes)})
        if not found:
            return []
        time.sleep(0.2)
    for process in _alive({*found, *owned_processes(nodes)}):
        signal_verified(process.pid, process.start_ticks, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        found = _alive({*found, *owned_processes(nodes)})
        if not found:
            return []
        time.sleep(0.1)
    return found


# --- up, down, status --------------------------------------------------------------------------------------------


def ray_command() -> str:
    """The `ray` script of this Python (so nodes run the Ray nodus imports), or a PrerequisiteError."""
    beside = Path(sys.executable).parent / "ray"
    if beside.is_file():
        return str(beside)
    found = which("ray")
    if found is None:
        raise PrerequisiteError("`nodus cluster` needs Ray", hint=RAY_INSTALL_HINT)
    return found


def _free_ports(count: int) -> list[int]:
    """`count` distinct ports free on this host's 127.0.0.1 (held together while chosen, so no two are the same)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for sock in sockets:
            sock.close()


# The ports each node binds that Ray would otherwise pick itself: nodes started at once on one host picked the
# same one ("bind: Address already in use" in a raylet's log), and the dashboard agent's has a fixed default.
NODE_PORT_FLAGS: Final = (
    "--node-manager-port",
    "--object-manager-port",
    "--dashboard-agent-listen-port",
    "--dashboard-agent-grpc-port",
    "--runtime-env-agent-port",
    "--metrics-export-port",
)
NODE_PORTS = len(NODE_PORT_FLAGS)


def _node_ports(ports: Sequence[int], index: int) -> list[str]:
    """The port flags of node `index` (0 is the head), from its slice of `ports`."""
    mine = ports[index * NODE_PORTS : (index + 1) * NODE_PORTS]
    return [text for flag, port in zip(NODE_PORT_FLAGS, mine, strict=True) for text in (flag, str(port))]


def _node_env(token_file: Path) -> dict[str, str]:
    """A node's environment: the base one (`process_env`), Ray's settings and a node session's own; never the token
    itself (nodes read its file) or another cluster's address. Job entrypoints on the node inherit it."""
    env = base_environment(extra=(*RAY_SETTINGS, *NODE_SESSION_SETTINGS))
    env = {k: v for k, v in env.items() if k not in ("RAY_AUTH_TOKEN", "RAY_ADDRESS")}
    env.update(
        RAY_AUTH_MODE="token",
        RAY_AUTH_TOKEN_PATH=str(token_file),
        RAY_USAGE_STATS_ENABLED="0",  # no usage report leaves the machine
        # Job entrypoints inherit this PATH (FACTS.md): this Python's scripts first.
        PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", os.defpath)]),
    )
    return env


def _start_node(argv: list[str], namespace: str | None, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        return subprocess.Popen(
            [*netns.exec_prefix(namespace), *argv],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )


def log_cause(log: Path) -> str:
    """The one line of a node's log that says why it failed: the last error-looking line, else the last line."""
    try:
        lines = [text.strip() for text in log.read_text(errors="replace").splitlines() if text.strip()]
    except OSError:
        return f"no log at {log}"
    for text in reversed(lines):
        if re.search(r"error|exception|failed|cannot|refused|denied|no such", text, re.IGNORECASE):
            return text
    return lines[-1] if lines else f"nothing in {log}"


def dashboard_nodes(url: str, token: str, *, timeout_s: float = 5.0) -> list[dict[str, Any]]:
    """The nodes the dashboard's state API lists (`/api/v0/nodes`), with the token; raises OSError/ValueError."""
    request = urllib.request.Request(
        f"{url}/api/v0/nodes?limit=1000&detail=true", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        body = json.loads(response.read())
    nodes = body["data"]["result"]["result"]
    if not isinstance(nodes, list):
        raise ValueError("the dashboard's node list is not a list")
    return nodes


def _wait_up(
    record: ClusterRecord, processes: Sequence[subprocess.Popen[bytes]], left_s: float, timeout_s: float
) -> None:
    """Wait until the dashboard lists every node started so far ALIVE; a node process that exits, or the end of
    `left_s` (of `up`'s bound `timeout_s`), is an error."""
    deadline = time.monotonic() + left_s
    token, last = record.token(), "the dashboard did not answer"
    while True:
        for node, process in zip(record.nodes, processes, strict=True):
            if process.poll() is not None:
                raise ExecutorError(
                    f"Ray {node.role} exited with status {process.returncode}: {log_cause(Path(node.log))}",
                    hint=f"its log: {node.log}",
                )
        try:
            with netns.entered(record.netns):
                listed = dashboard_nodes(record.dashboard_url, token)
            alive = sum(1 for entry in listed if entry.get("state") == "ALIVE")
            if alive >= len(record.nodes):
                return
            last = f"{alive} of {len(record.nodes)} nodes alive"
        except (OSError, ValueError, KeyError, TypeError) as exc:
            last = f"the dashboard at {record.dashboard_url} did not answer ({exc})"
        if time.monotonic() >= deadline:
            head = record.nodes[0]
            raise ExecutorError(
                f"the Ray cluster did not come up within {timeout_s:.0f} s: {last}; "
                f"head log: {log_cause(Path(head.log))}",
                hint=f"the nodes' logs: {Path(head.log).parent}",
            )
        time.sleep(0.5)


def up(
    folder: Path,
    workers: Sequence[WorkerSpec],
    *,
    namespace: str | None = None,
    timeout_s: float = UP_TIMEOUT_S,
    object_store_bytes: int = OBJECT_STORE_BYTES,
) -> ClusterRecord:
    """Start a head and `workers` on this machine, wait until all are alive, and record them in `folder`.

    A recorded cluster with a live node is an error (end it with `down` first); a record whose processes are all
    gone is replaced. Whatever fails after the first node started ends every process started, deletes the
    namespace it made and leaves no record."""
    existing = read_record(folder)
    if existing is not None:
        live = [node for node in existing.nodes if node.alive()]
        if live:
            raise ConfigError(
                f"{record_path(folder)}: a Ray cluster is already running here ({len(live)} of "
                f"{len(existing.nodes)} nodes alive, dashboard {existing.dashboard_url})",
                hint="nodus cluster down first, or --dir for another cluster",
            )
        _forget(folder, existing)
    if namespace is not None:
        netns.check_name(namespace)
    ray = ray_command()
    token_file = write_token(folder)
    temp_dir = tempfile.mkdtemp(prefix="nodus-ray-")  # short: Ray's socket paths under it must fit 107 bytes
    gcs_port, dashboard_port, client_port, *ports = _free_ports(3 + NODE_PORTS * (1 + len(workers)))
    address = f"127.0.0.1:{gcs_port}"
    common = ["--block", "--node-ip-address", "127.0.0.1", "--disable-usage-stats", "--temp-dir", temp_dir]
    common += ["--object-store-memory", str(object_store_bytes)]
    head = [ray, "start", "--head", "--port", str(gcs_port), "--num-cpus", "0", "--num-gpus", "0"]
    head += ["--dashboard-host", "127.0.0.1", "--dashboard-port", str(dashboard_port)]
    head += ["--ray-client-server-port", str(client_port)]
    plans: list[tuple[str, list[str], WorkerSpec | None]] = [("head", [*head, *_node_ports(ports, 0)], None)]
    for index, spec in enumerate(workers, start=1):
        argv = [ray, "start", "--address", address, "--num-cpus", str(spec.cpus), "--num-gpus", "0"]
        argv += _node_ports(ports, index)
        if spec.resources():
            argv += ["--resources", json.dumps(spec.resources())]
        if spec.labels():
            argv += ["--labels", ",".join(f"{k}={v}" for k, v in spec.labels().items())]
        plans.append((f"worker-{index}", argv, spec))
    made_namespace = False
    started: list[subprocess.Popen[bytes]] = []
    record = ClusterRecord(
        address, f"http://127.0.0.1:{dashboard_port}", str(token_file), namespace, False, temp_dir, []
    )
    try:
        if namespace is not None:
            netns.create(namespace)
            made_namespace = True
            record.netns_created = True
        env = _node_env(token_file)
        deadline = time.monotonic() + timeout_s
        for role, argv, node_spec in plans:
            log = folder / LOGS_NAME / f"{role}.log"
            process = _start_node([*argv, *common], namespace, env, log)
            started.append(process)
            ticks = start_ticks(process.pid)
            record.nodes.append(
                NodeRecord(
                    role,
                    process.pid,
                    ticks if ticks is not None else -1,
                    {"CPU": 0.0} if node_spec is None else {"CPU": float(node_spec.cpus), **node_spec.resources()},
                    {} if node_spec is None else node_spec.labels(),
                    str(log),
                )
            )
            write_record(folder, record)  # recorded as soon as it runs: an interrupted `up` can still be brought down
            # One node at a time, each alive before the next starts: `ray start` gives its raylet a fixed 30 s to
            # register with the GCS, and nodes starting together on two busy cores missed it.
            _wait_up(record, started, deadline - time.monotonic(), timeout_s)
    except BaseException:
        end_processes(record.nodes)
        for process in started:
            if process.poll() is None:
                process.wait(timeout=5)
        if made_namespace and namespace is not None:
            netns.delete(namespace)
        _forget(folder, record)
        raise
    return record


def _forget(folder: Path, record: ClusterRecord) -> None:
    """Remove what a cluster left (the record, its token, Ray's temp folder); the nodes' logs stay for reading."""
    shutil.rmtree(record.temp_dir, ignore_errors=True)
    Path(record.token_file).unlink(missing_ok=True)
    record_path(folder).unlink(missing_ok=True)


@dataclass(frozen=True)
class DownResult:
    ended: list[NodeRecord]
    """The nodes that were still running and were ended."""
    already_gone: bool
    """No node of the record was running any more (only the record was cleaned)."""


def down(folder: Path, *, grace_s: float = STOP_GRACE_S) -> DownResult:
    """End every process of the cluster recorded in `folder` (by pid and start time only), delete the namespace it
    made, and remove the record. Nothing recorded is a ConfigError; processes that would not end are an
    ExecutorError and the record stays (so a second `down` can try again)."""
    record = read_record(folder)
    if record is None:
        raise ConfigError(f"{record_path(folder)}: no Ray cluster is recorded here", hint="nodus cluster up starts one")
    running = [node for node in record.nodes if node.alive()]
    found = owned_processes(record.nodes)
    left = end_processes(record.nodes, grace_s=grace_s)
    if left:
        listed = ", ".join(f"{p.pid} ({p.command[:60]})" for p in left[:5])
        raise ExecutorError(
            f"{record_path(folder)}: {len(left)} Ray process(es) of this cluster would not end: {listed}"
        )
    if record.netns is not None and record.netns_created:
        netns.delete(record.netns)
    _forget(folder, record)
    return DownResult(running, already_gone=not found)


@dataclass(frozen=True)
class NodeStatus:
    node: NodeRecord
    alive: bool


def status(folder: Path) -> tuple[ClusterRecord, list[NodeStatus]]:
    """The recorded cluster and whether each node's process is still the one recorded; ConfigError if none."""
    record = read_record(folder)
    if record is None:
        raise ConfigError(f"{record_path(folder)}: no Ray cluster is recorded here", hint="nodus cluster up starts one")
    return record, [NodeStatus(node, node.alive()) for node in record.nodes]
