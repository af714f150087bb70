"""Session-wide test settings for every test folder of the workspace.

Who uses it: pytest, for all tests. Completion code runs as `NODUS_RUNNER_UID`, and after each run every
process of that uid is killed (that is how fork bombs are cleaned up). Parallel test workers on one host
share no pid namespace, so each worker gets its own runner uid, or one worker's sweep would kill another's
runner mid-test.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
# The pid keeps two test runs on one host (two checkouts, a developer and CI) apart as well.
# Set, not defaulted: xdist workers inherit the controller's environment, and each needs its own value.
os.environ["NODUS_RUNNER_UID"] = str(10100 + (os.getpid() * 7 + int(worker.removeprefix("gw") or 0)) % 5000)


@pytest.fixture(autouse=True)
def _host_gpus_read_afresh() -> Iterator[None]:
    """The local executor reads this machine's GPUs once per process (`executors/local/gpus.py`); a test that
    declares them (`NODUS_LOCAL_GPUS`) must not see another test's, so each test reads them afresh."""
    from nodus.reconciler.executors.local.gpus import host_gpus

    host_gpus.cache_clear()
    yield
    host_gpus.cache_clear()


@pytest.fixture
def local_registry(tmp_path: Path) -> Iterator[str]:
    """Debian's docker-registry on 127.0.0.1 and a free port, storage under tmp_path: yields `127.0.0.1:PORT`
    (`nodus.testing.registry_server`); stopped by its own pid. Skips where docker-registry is not installed."""
    from nodus.testing.registry_server import RegistryUnavailableError, installed, registry_server

    if installed() is None:
        pytest.skip("docker-registry is not installed (apt-get install docker-registry)")
    try:
        with registry_server(tmp_path / "registry") as address:
            yield address
    except RegistryUnavailableError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="session")
def base_reference(tmp_path_factory: pytest.TempPathFactory) -> str:
    """`oci:LAYOUT:nodus-env-base`: the real base image (mmdebstrap rootfs + this nodus-env), made once.

    The layout sits beside the session's temporary folders, shared by pytest-xdist workers (a file lock makes
    one build it while the others wait) and reused by later sessions while the recipe and nodus-env are
    unchanged (`current_base`). The rootfs tar itself is cached per user (`nodus.builder.store.user_cache`).
    """
    from nodus.builder.base import BASE_TAG, build_base, current_base
    from nodus.builder.store import Store, file_lock

    for tool, package in (("mmdebstrap", "mmdebstrap"), ("podman", "podman runc uidmap")):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (apt-get install {package})")
    shared = tmp_path_factory.getbasetemp().parent / "nodus-base"
    store = Store(shared / "state")
    with file_lock(shared / ".lock"):
        if current_base(store) is None:
            build_base(store)
    return f"oci:{store.images}:{BASE_TAG}"


WarmedModel = Callable[..., tuple[str, str]]


@pytest.fixture(scope="session")
def warmed_model(tmp_path_factory: pytest.TempPathFactory) -> WarmedModel:
    """A maker of tiny models: `warmed_model(module, name, recipe=None)` is (HF_HUB_CACHE, revision) of
    `nodus/tiny-qwen3` warmed up on the environment module at `module` (`Recipe()` unless `recipe`).

    Built like the base image: beside the session's temporary folders (`nodus-tiny-model-<name>`), under a file
    lock, so xdist workers share one build, and later sessions reuse it while the recipe is unchanged.
    """
    pytest.importorskip("trl", reason="the training stack (nodus-runtimes) is not installed")
    from nodus.builder.store import file_lock
    from nodus.runtimes.tiny_model import Recipe, install

    root = tmp_path_factory.getbasetemp().parent

    def make(module: Path, name: str, recipe: Recipe | None = None) -> tuple[str, str]:
        shared = root / f"nodus-tiny-model-{name}"
        with file_lock(shared / ".lock"):
            revision, _, _ = install(recipe or Recipe(), module, shared / "hub")
        return str(shared / "hub"), revision

    return make


@pytest.fixture(scope="session")
def tiny_model(warmed_model: WarmedModel) -> tuple[str, str]:
    """(HF_HUB_CACHE, revision) holding `nodus/tiny-qwen3` warmed up on the quickstart task, made once (about
    30 s on two cores). The recipe is the quickstart's, so its revision is the one
    examples/quickstart/trainingjob.yaml pins."""
    return warmed_model(Path(__file__).parent / "examples" / "quickstart" / "env" / "reverse_words.py", "quickstart")


@pytest.fixture
def ray_cluster(shared_ray_cluster: Any) -> Iterator[Any]:
    """The run's Ray cluster (`shared_ray_cluster`), held by this test alone while it runs: a gang takes every
    worker, so two tests on it at once (xdist's workers) would wait for each other's nodes. A file lock beside the
    cluster's record serialises them; the cluster itself is started once."""
    from nodus.builder.store import file_lock

    with file_lock(shared_ray_cluster.folder / ".in-use.lock"):
        yield shared_ray_cluster


@pytest.fixture(scope="session")
def shared_ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One real Ray cluster per test run (`nodus.testing.ray_cluster.RayTestCluster`): a head and two workers of
    made-up GPU types in a network namespace of their own, with token auth, stopped by pid; shared by xdist workers
    under a file lock beside the session's temporary folders. For the tests marked `ray`; it skips where Ray is not
    installed (the `nodus[ray]` extra) or network namespaces cannot be made (`ip netns` needs root and iproute2).
    Teardown checks what `nodus cluster down` promises: no process of the cluster left, no record, no namespace."""
    import importlib.util

    if importlib.util.find_spec("ray") is None:
        pytest.skip("Ray is not installed (pip install 'nodus[ray]')")
    from nodus.builder.host_programs import which
    from nodus.reconciler.executors.ray import cluster, netns
    from nodus.testing.ray_cluster import shared_cluster

    if which("ip") is None or os.geteuid() != 0:
        pytest.skip("network namespaces need `ip` (iproute2) and root")
    folder = tmp_path_factory.getbasetemp().parent / "nodus-ray-cluster"
    with shared_cluster(folder) as running:
        yield running
    if cluster.read_record(folder) is None:  # this process brought it down: check it is all gone
        assert cluster.owned_processes(running.record.nodes) == []
        assert not netns.exists(running.netns)
