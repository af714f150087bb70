"""Fixtures for the Ray executor's tests: `ray_cluster`, one real Ray cluster per test run (`nodus.testing.ray_cluster`):
a head and two workers of made-up GPU types in a network namespace of their own, with token auth, stopped by pid.

Who uses it: the tests marked `ray` in this folder. It skips where Ray is not installed (the `nodus[ray]` extra) or
network namespaces cannot be made (`ip netns` needs root and iproute2). Teardown checks what `down` promises: no
process of the cluster left, no record, no namespace.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator

import pytest

from nodus.builder.host_programs import which
from nodus.reconciler.executors.ray import cluster, netns
from nodus.testing.ray_cluster import RayTestCluster, shared_cluster


@pytest.fixture(scope="session")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayTestCluster]:
    if importlib.util.find_spec("ray") is None:
        pytest.skip("Ray is not installed (pip install 'nodus[ray]')")
    if which("ip") is None or os.geteuid() != 0:
        pytest.skip("network namespaces need `ip` (iproute2) and root")
    folder = tmp_path_factory.getbasetemp().parent / "nodus-ray-cluster"
    with shared_cluster(folder) as running:
        yield running
    if cluster.read_record(folder) is None:  # this process brought it down: check it is all gone
        assert cluster.owned_processes(running.record.nodes) == []
        assert not netns.exists(running.netns)
