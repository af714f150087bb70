"""Named network namespaces with only loopback up: where nodus runs a Ray cluster that must not listen on the host.

Who calls it: `nodus.reconciler.executors.ray.cluster` (`nodus cluster up --netns NAME` creates one, `down` deletes it)
and `nodus.testing.ray_cluster` (the tests' cluster). Ray binds its internal ports on every interface even when told
127.0.0.1 (FACTS.md), so a cluster for trying nodus, or for tests, lives in a namespace that has nothing but `lo`.

A namespace is made with `ip netns add` (a bind mount under /run/netns that outlives this process), its loopback
brought up with `ip -n NAME link set lo up`, and commands run in it with `nsenter --net=/run/netns/NAME ...`.
`entered(NAME)` moves the calling *thread* into it for a block (setns(2) on the mount's fd, then back to the
thread's own namespace): a network namespace is a per-thread attribute, so other threads of the process keep theirs,
and a client that makes its connections on the calling thread (urllib, requests) reaches the cluster's 127.0.0.1
inside.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

from nodus.builder.host_programs import which
from nodus.errors import ConfigError, ExecutorError, PrerequisiteError

NETNS_ROOT = Path("/run/netns")
CLONE_NEWNET = 0x40000000
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")


def check_name(name: str) -> str:
    """`name` if `ip netns` takes it as a namespace name, else a ConfigError naming the flag."""
    if not _NAME.fullmatch(name):
        raise ConfigError(f"--netns {name!r}: a namespace name is letters, digits, '_', '.', '-' (at most 63)")
    return name


def exists(name: str) -> bool:
    return (NETNS_ROOT / name).exists()


def _ip(*args: str) -> None:
    if which("ip") is None:
        raise PrerequisiteError("`ip` is not installed", hint="apt-get install iproute2")
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise ExecutorError(f"ip {' '.join(args)}: {why}")


def create(name: str) -> None:
    """Create namespace `name` with loopback up; an existing one is someone else's and is never taken over."""
    check_name(name)
    if exists(name):
        raise ConfigError(f"--netns {name}: the network namespace already exists (not made by this command)")
    _ip("netns", "add", name)
    try:
        _ip("-n", name, "link", "set", "lo", "up")
    except ExecutorError:
        delete(name)
        raise


def delete(name: str) -> None:
    """Delete namespace `name` (processes still in it keep it alive until they end); gone already is fine."""
    if exists(name):
        _ip("netns", "delete", name)


def exec_prefix(name: str | None) -> list[str]:
    """The argv prefix that runs a command inside namespace `name` (nothing without one).

    `nsenter --net` and not `ip netns exec`: the latter also makes a mount namespace and mounts a fresh /sys, which
    hides /sys/fs/cgroup, and podman on the node (the container sandbox of a job's graders) then fails with "no
    cgroup mount found in mountinfo". Only the network namespace is to change."""
    if name is None:
        return []
    if which("nsenter") is None:
        raise PrerequisiteError("`nsenter` is not installed", hint="apt-get install util-linux")
    return ["nsenter", f"--net={NETNS_ROOT / name}", "--"]


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise ExecutorError(f"setns into a network namespace: {os.strerror(errno)}")


@contextlib.contextmanager
def entered(name: str | None) -> Iterator[None]:
    """Run the block with the calling thread inside namespace `name` (as it is without one), then move it back."""
    if name is None:
        yield
        return
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        target = os.open(NETNS_ROOT / name, os.O_RDONLY | os.O_CLOEXEC)
        try:
            _setns(target)
        finally:
            os.close(target)
        try:
            yield
        finally:
            _setns(own)
    finally:
        os.close(own)
