"""The tests' Ray cluster: a head and two workers of made-up GPU types, in a network namespace of their own.

Who uses it: the session fixture `ray_cluster` of `reconciler/tests/executors/ray/conftest.py` (and any later test
of the Ray executor against real Ray); the gang restart tests, for a cluster of their own with a spare worker
(`spare_worker_cluster`) and a lost machine (`kill_node`). It starts the cluster with
`nodus.reconciler.executors.ray.cluster.up` inside a fresh namespace with only loopback (Ray binds every interface:
FACTS.md), with token auth, and stops it by pid.

How a test reaches the dashboard: `with cluster.inside(): ...` moves the calling thread into the namespace for the
block (setns(2), `netns.entered`) and back afterwards. A network namespace is per thread, so only the test's own
thread moves; `JobSubmissionClient` (requests) connects on that thread. Create the client and call it inside the
block.

pytest-xdist: one cluster per test run, shared by the workers. It lives in a folder beside the session's temporary
folders (`tmp_path_factory.getbasetemp().parent`, as conftest.py's `base_reference`); a file lock makes one worker
start it while the others wait, and `users` in that folder lists the pytest processes (pid and start time) using it.
A worker leaving removes itself; the last one out brings the cluster down. A user that died without leaving (a
killed worker) is dropped from the list by the next worker that comes or goes.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from nodus.builder.store import file_lock
from nodus.reconciler.executors.local.job import same_process_alive, signal_verified, start_ticks
from nodus.reconciler.executors.ray import cluster, netns

GPU_TYPES = ("H100:2", "A10G:1")
"""The workers' made-up GPU types, one each."""
USERS_NAME = "users.json"
SPARE_WORKER_TYPES = ("fake-a", "fake-b", "fake-c")
"""The three workers of a cluster with a spare (each known by its made-up GPU type)."""
GANG_OF_TWO_ASSEMBLED = re.compile(
    r"\[gang\] epoch (\d+) assembled: rank 0 on node (\w+) \(.*\), rank 1 on node (\w+) "
)
"""The coordinator's line when a gang of two assembles: the epoch, and each rank's node id."""


@dataclass(frozen=True)
class RayTestCluster:
    folder: Path
    record: cluster.ClusterRecord

    @property
    def dashboard_url(self) -> str:
        return self.record.dashboard_url

    @property
    def token(self) -> str:
        return self.record.token()

    @property
    def netns(self) -> str:
        assert self.record.netns is not None
        return self.record.netns

    def headers(self) -> dict[str, str]:
        """What a Jobs API client sends to be let in."""
        return {"Authorization": f"Bearer {self.token}"}

    def inside(self) -> contextlib.AbstractContextManager[None]:
        """The calling thread inside the cluster's network namespace for a `with` block."""
        return netns.entered(self.record.netns)


def namespace_name(folder: Path) -> str:
    """A namespace name of this run's own (the folder's inode and this session's pid: unique while both exist)."""
    return f"nodus-test-ray-{os.getpid()}-{folder.stat().st_ino % 100000}"


def _users(folder: Path) -> list[tuple[int, int]]:
    try:
        listed = json.loads((folder / USERS_NAME).read_text())
    except (FileNotFoundError, ValueError):
        return []
    return [(pid, ticks) for pid, ticks in listed if same_process_alive(pid, ticks)]


def _write_users(folder: Path, users: list[tuple[int, int]]) -> None:
    (folder / USERS_NAME).write_text(json.dumps(users))


def _me() -> tuple[int, int]:
    ticks = start_ticks(os.getpid())
    assert ticks is not None
    return os.getpid(), ticks


@contextlib.contextmanager
def shared_cluster(folder: Path) -> Iterator[RayTestCluster]:
    """The run's cluster in `folder` (started by whichever pytest process comes first), brought down by the last."""
    folder.mkdir(parents=True, exist_ok=True)
    with file_lock(folder / ".lock"):
        record = cluster.read_record(folder)
        if record is not None and not all(node.alive() for node in record.nodes):
            cluster.down(folder)  # a broken one (a node died): start afresh
            record = None
        if record is None:
            workers = cluster.worker_specs(len(GPU_TYPES), GPU_TYPES, 1)
            record = cluster.up(folder, workers, namespace=namespace_name(folder))
        _write_users(folder, [*_users(folder), _me()])
    try:
        yield RayTestCluster(folder, record)
    finally:
        with file_lock(folder / ".lock"):
            users = [user for user in _users(folder) if user != _me()]
            _write_users(folder, users)
            if not users and cluster.read_record(folder) is not None:
                cluster.down(folder)


@contextlib.contextmanager
def spare_worker_cluster(folder: Path) -> Iterator[cluster.ClusterRecord]:
    """A cluster of its own in `folder` (made here): a head and three one-CPU workers, in a network namespace of its
    own, so a gang of two that loses a node has a spare to go to; stopped by pid when the block ends."""
    folder.mkdir()
    workers = cluster.worker_specs(3, list(SPARE_WORKER_TYPES), 1)
    record = cluster.up(folder, workers, namespace=namespace_name(folder))
    try:
        yield record
    finally:
        cluster.down(folder)


def kill_node(record: cluster.ClusterRecord, node_prefix: str) -> str:
    """SIGKILL every process of the worker whose Ray node id starts with `node_prefix` (its `ray start`, raylet and
    what runs there: what a lost machine loses); its role."""
    (listed,) = [
        node
        for node in cluster.dashboard_nodes(record.dashboard_url, record.token())
        if node["node_id"].startswith(node_prefix)
    ]
    matching = [node for node in record.nodes if node.labels and node.labels.items() <= listed["labels"].items()]
    assert len(matching) == 1, (listed, record.nodes)
    node = matching[0]
    for process in cluster.owned_processes([node]):
        signal_verified(process.pid, process.start_ticks, signal.SIGKILL)
    return node.role
