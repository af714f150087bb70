"""What a rank of a `Ray` or `Verl` gang runs on its node: one node of the gang's inner Ray cluster, and on rank 0
the Job's command on it.

Who runs it: a gang member (`gang_member.GangMember.run`), as `python -m
nodus.reconciler.executors.ray.ray_launcher_main --launcher Ray --num-cpus N --join-timeout S -- COMMAND...`
(the argv `ray_launcher.ray_member` builds), with the seeds' rank variables in its environment.

- Rank 0 starts the inner head (`ray start --head --block`, argv from `ray_launcher.node_argv`), waits until its
  GCS answers and `NODUS_NUM_NODES` nodes are alive in it (at most `--join-timeout`, the Job's
  `distributed.startupTimeout`), runs the command with `RAY_ADDRESS` set to the inner head (in this process's
  group, so the member's `stop` reaches it) and exits with the command's status.
- A rank > 0 waits for the inner head's GCS to answer, joins it (`ray start --address ... --block`) and exits 0 once
  the head has stopped answering for `HEAD_GONE_S` (rank 0's command ended) or it is stopped; it never runs the
  command.

Every exit path ends the inner node's processes by pid (`cluster.end_processes` on the `ray start` this program
started, in a session of its own: its session and everything below it, never `ray stop`) and removes its temp
folder: the command's end, a failure, and SIGTERM (the member's `stop`, which then SIGKILLs the group after
`gang_member.STOP_GRACE_S`: the cleanup here fits well inside it). Should this program be SIGKILLed first, `ray
start` and the command get SIGKILL with it (`PR_SET_PDEATHSIG`) and Ray ends its own processes with `ray start`
(its kernel fate sharing); only the temp folder is left then.

Its lines on stdout (the rank's output in the Ray job's log) start `[ray launcher] `; a failure is one such line
naming the inner cluster's address and the cause, and a non-zero exit.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Final

from ..local.job import start_ticks
from . import ray_launcher
from .cluster import NodeRecord, end_processes, log_cause, ray_command
from .ray_launcher import Layout

POLL_S: Final = 0.5
HEAD_GONE_S: Final = 5.0
"""How long the inner head's GCS must stay silent before a rank > 0 takes it for ended (not a blip)."""
COMMAND_GRACE_S: Final = 3.0
NODE_GRACE_S: Final = 4.0
"""SIGTERM to SIGKILL, for the command and then the inner node: together well inside the member's stop grace."""
TEMP_PREFIX: Final = "nodus-rayl-"
"""Short: Ray's socket paths under the temp folder must fit 107 bytes."""
PR_SET_PDEATHSIG: Final = 1


class Stopped(BaseException):
    """SIGTERM arrived: unwind through every `finally` (the cleanup), then exit 143."""


class LauncherError(Exception):
    """A one-line reason this rank's inner node or the command could not run."""


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def say(text: str) -> None:
    print(f"[ray launcher] {text}", flush=True)


class InnerNode:
    """This rank's `ray start --block`, in a session of its own, with its temp folder; ended by pid."""

    def __init__(self, layout: Layout, num_cpus: str, env: Mapping[str, str]) -> None:
        self.layout = layout
        self.temp_dir = tempfile.mkdtemp(prefix=TEMP_PREFIX)
        self.log = Path(self.temp_dir) / "ray-start.log"
        argv = ray_launcher.node_argv(ray_command(), layout, num_cpus, self.temp_dir)
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                argv,
                env=ray_launcher.node_env(env),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its processes are this session: `end` finds each of them
                preexec_fn=_die_with_parent,
            )
        ticks = start_ticks(self.process.pid)
        role = "inner-head" if layout.rank == 0 else f"inner-{layout.rank}"
        self.record = NodeRecord(role, self.process.pid, ticks if ticks is not None else -1)
        role = "head" if layout.rank == 0 else "node"
        say(f"inner {role} starting: ray start pid {self.process.pid}, temp dir {self.temp_dir}")

    def exited(self) -> int | None:
        return self.process.poll()

    def cause(self) -> str:
        return log_cause(self.log)

    def end(self) -> None:
        """End every process of this node by pid (SIGTERM, then SIGKILL), then remove its temp folder."""
        left = end_processes([self.record], grace_s=NODE_GRACE_S)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=2)
        if left:
            say(f"inner node: {len(left)} process(es) would not end: {', '.join(str(p.pid) for p in left[:5])}")
        else:
            say(f"inner node stopped (ray start pid {self.process.pid}); removed {self.temp_dir}")
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def answers(host: str, port: int, timeout_s: float = 1.0) -> bool:
    """True when a TCP connection to the inner head's GCS opens."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def wait_for_head(layout: Layout, deadline: float, node: InnerNode | None) -> None:
    """Until the inner head's GCS answers; a LauncherError when `node` (this rank's own) exits or time is up."""
    while not answers(layout.head_ip, layout.gcs_port):
        if node is not None and (status := node.exited()) is not None:
            raise LauncherError(
                f"the inner Ray head at {layout.head_address} exited with status {status}: {node.cause()}"
            )
        if time.monotonic() >= deadline:
            raise LauncherError(f"the inner Ray head at {layout.head_address} did not answer in time")
        time.sleep(POLL_S)


def wait_for_nodes(layout: Layout, node: InnerNode, deadline: float, timeout_s: float) -> None:
    """Until `layout.nodes` nodes are alive in the inner cluster (asked of its GCS, as a short-lived driver)."""
    import ray

    ours = signal.getsignal(signal.SIGTERM)
    ray.init(address=layout.head_address, log_to_driver=False, logging_level=logging.ERROR)
    signal.signal(signal.SIGTERM, ours)  # ray.init put in its own (exit at once): ours unwinds through the cleanup
    try:
        while True:
            listed: list[dict[str, object]] = ray.nodes()  # type: ignore[no-untyped-call]
            alive = sum(1 for entry in listed if entry.get("Alive"))
            if alive >= layout.nodes:
                say(f"{alive} of {layout.nodes} nodes alive in the inner Ray cluster at {layout.head_address}")
                return
            if (status := node.exited()) is not None:
                raise LauncherError(
                    f"the inner Ray head at {layout.head_address} exited with status {status}: {node.cause()}"
                )
            if time.monotonic() >= deadline:
                raise LauncherError(
                    f"only {alive} of {layout.nodes} nodes joined the inner Ray cluster at {layout.head_address} "
                    f"within {timeout_s:g}s (distributed.startupTimeout)"
                )
            time.sleep(POLL_S)
    finally:
        ray.shutdown()
        signal.signal(signal.SIGTERM, ours)


def run_command(command: Sequence[str], env: Mapping[str, str]) -> int:
    """The Job's command, in this process's group (the member's stop signals it too); its exit status."""
    try:
        process = subprocess.Popen(list(command), env=dict(env), stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)
    except OSError as exc:
        raise LauncherError(f"{command[0]}: {exc.strerror or exc}") from None
    try:
        status = process.wait()
    finally:
        if process.poll() is None:  # stopped while it ran: it got the member's SIGTERM too, or gets ours now
            process.terminate()
            try:
                process.wait(timeout=COMMAND_GRACE_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    return status if status >= 0 else 128 - status


def head(layout: Layout, args: argparse.Namespace, command: Sequence[str], env: Mapping[str, str]) -> int:
    deadline = time.monotonic() + args.join_timeout
    node = InnerNode(layout, args.num_cpus, env)
    try:
        wait_for_head(layout, deadline, node)
        wait_for_nodes(layout, node, deadline, args.join_timeout)
        say(f"running the command with RAY_ADDRESS={layout.head_address}")
        return run_command(command, ray_launcher.command_env(env, layout, args.launcher))
    finally:
        node.end()


def member(layout: Layout, args: argparse.Namespace, env: Mapping[str, str]) -> int:
    wait_for_head(layout, time.monotonic() + args.join_timeout, None)
    node = InnerNode(layout, args.num_cpus, env)
    try:
        silent_since: float | None = None
        while True:
            if answers(layout.head_ip, layout.gcs_port):
                silent_since = None
            else:
                silent_since = silent_since or time.monotonic()
                if time.monotonic() - silent_since >= HEAD_GONE_S:
                    say(f"the inner Ray head at {layout.head_address} is gone: this node is done")
                    return 0
            if (status := node.exited()) is not None and silent_since is None:
                raise LauncherError(
                    f"the inner Ray node of rank {layout.rank} (joining {layout.head_address}) exited with status "
                    f"{status}: {node.cause()}"
                )
            time.sleep(POLL_S)
    finally:
        node.end()


def parse(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    own, command = ray_launcher.split_command(argv)
    parser = argparse.ArgumentParser(prog=ray_launcher.MAIN_MODULE)
    parser.add_argument("--launcher", choices=("Ray", "Verl"), default="Ray")
    parser.add_argument("--num-cpus", default="1")
    parser.add_argument("--join-timeout", type=float, default=ray_launcher.JOIN_TIMEOUT_S)
    return parser.parse_args(own), command


def _stopped(number: int, frame: FrameType | None) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the cleanup short
    raise Stopped


def main(argv: Sequence[str] | None = None) -> int:
    args, command = parse(sys.argv[1:] if argv is None else argv)
    env = ray_launcher.inner_env(os.environ)
    try:
        layout = ray_launcher.layout_of(env)
    except ValueError as exc:
        say(f"spec.launcher {args.launcher}: {exc}")
        return 2
    if layout.rank == 0 and not command:
        say(f"spec.launcher {args.launcher}: no command after `--` to run on the inner Ray cluster")
        return 2
    os.environ.clear()
    os.environ.update(env)  # this process's own driver (rank 0) joins only the inner head too
    signal.signal(signal.SIGTERM, _stopped)
    try:
        return head(layout, args, command, env) if layout.rank == 0 else member(layout, args, env)
    except LauncherError as exc:
        say(f"spec.launcher {args.launcher}: {exc}")
        return 1
    except Stopped:
        say("stopped")
        return 143


if __name__ == "__main__":
    sys.exit(main())
