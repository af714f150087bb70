"""The `Ray` and `Verl` launchers of a gang: a Ray cluster of the gang's own (the inner cluster) for the command.

Who uses it: `launchers.py` registers `ray_member` and `verl_member` in `WRAPPERS`, so the coordinator asks them
what each rank runs; `ray_launcher_main.py` (the program they start on every rank) reads its argv, ports and
environment from here. Everything here is pure (no Ray, no processes), so the tests need no cluster.

What each rank runs: this Python `-m nodus.reconciler.executors.ray.ray_launcher_main` with the Job's command
after `--`. Rank 0 starts the inner head (`ray start --head --block`) on `MASTER_ADDR`, waits until
`NODUS_NUM_NODES` nodes are alive in it, runs the command with `RAY_ADDRESS` set to the inner head (and, for
`Verl`, `NODUS_VERL_OVERRIDES`) and stops its node by pid when the command ends. Ranks > 0 join the inner head
with `ray start --address ... --block` and never run the command.

Ports, derived from the gang's `MASTER_PORT` (29500, torchrun's rendezvous, left to the command) so every rank
knows the head's without being told, and never the outer cluster's (those are the outer nodes' own):
- `MASTER_PORT + 1` (29501): the inner head's GCS, the `RAY_ADDRESS` the command gets;
- `MASTER_PORT + 2` (29502): the inner head's Ray client server;
- from `MASTER_PORT + 10` (29510): `NODE_PORTS` ports per rank (rank r's at `29510 + r * NODE_PORTS`), for the
  ports Ray would otherwise pick itself or take from a fixed default: several ranks may share a host (every node
  of a test cluster does), and two raylets of one host picked the same one (`cluster.py`).

The inner cluster has no dashboard (nothing reads it; `ray.init()` needs only the GCS), reports no usage stats, and
keeps its sockets and logs in a short temp folder of its own (Ray's socket paths must fit 107 bytes), removed when
the node ends. Auth: the inner nodes keep the outer node's `RAY_AUTH_*` settings, so the inner cluster asks for
the same token every node of the outer cluster already holds; what tells a Ray process which cluster it belongs to
(`RAY_ADDRESS`, the outer job's and worker's ids) is dropped (`INNER_DROPPED`), so it joins only the inner head.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from ..process_env import RAY_SETTINGS
from ..workload import Workload
from .cluster import NODE_PORT_FLAGS
from .placement import SESSION_CPUS

MAIN_MODULE: Final = "nodus.reconciler.executors.ray.ray_launcher_main"
GCS_PORT_OFFSET: Final = 1
CLIENT_PORT_OFFSET: Final = 2
NODE_PORTS_OFFSET: Final = 10
NODE_PORTS: Final = 8
"""Ports set aside per rank: the six of `NODE_PORT_FLAGS` and two spare, so the layout can grow without moving."""
JOIN_TIMEOUT_S: Final = 900.0
"""How long rank 0 waits for every node to join (ranks > 0 for the head to answer) when the Job sets no
`distributed.startupTimeout`."""

VERL_OVERRIDES: Final = "NODUS_VERL_OVERRIDES"
NODE_VARIABLES: Final = RAY_SETTINGS
"""What a rank takes of its node's environment besides the base one (`gang_member.member_env`): Ray's settings, so
its inner nodes keep the outer node's auth (`RAY_AUTH_*`) and tuning; `inner_env` then drops the outer session's."""
INNER_DROPPED: Final = frozenset(
    {
        "RAY_ADDRESS",
        "RAY_JOB_ID",
        "RAY_RAYLET_PID",
        "RAY_NODE_ID",
        "RAY_NODE_IP_ADDRESS",
        "RAY_SESSION_DIR",
        "RAY_CLIENT_MODE",
        "RAY_JOB_CONFIG_JSON_ENV_VAR",
        "RAY_RUNTIME_ENV_HOOK",
    }
)
"""The outer session's variables a process of the inner cluster must not see (it would join or report to the outer
cluster). Ray's tuning variables (`RAY_*` a user sets) and its auth settings stay."""
INNER_NODE_DROPPED: Final = frozenset({"RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "WORLD_SIZE"})
"""The gang's one-process-per-node torch variables: every Ray worker the inner nodes start would inherit them and
take itself for that rank; the command on rank 0 keeps them (the seeds' contract), the inner nodes do not."""


@dataclass(frozen=True)
class Layout:
    """Where a rank's inner node sits in the gang: its rank, the members' addresses in rank order, its GPUs."""

    rank: int
    ips: tuple[str, ...]
    gpus: int
    master_port: int

    @property
    def nodes(self) -> int:
        return len(self.ips)

    @property
    def head_ip(self) -> str:
        return self.ips[0]

    @property
    def gcs_port(self) -> int:
        return self.master_port + GCS_PORT_OFFSET

    @property
    def head_address(self) -> str:
        """The inner head's GCS (`RAY_ADDRESS` of the command, `--address` of the other ranks)."""
        return f"{self.head_ip}:{self.gcs_port}"

    def node_ports(self) -> list[int]:
        first = self.master_port + NODE_PORTS_OFFSET + self.rank * NODE_PORTS
        return list(range(first, first + len(NODE_PORT_FLAGS)))


def layout_of(env: Mapping[str, str]) -> Layout:
    """The rank's layout from the seeds' variables `gang.rank_env` set; a ValueError naming the one missing or bad."""

    def need(name: str) -> str:
        value = env.get(name, "")
        if not value:
            raise ValueError(f"{name} is not set (the gang's rank variables)")
        return value

    def whole(name: str) -> int:
        text = need(name)
        if not text.isdigit():
            raise ValueError(f"{name} {text!r} is not a whole number")
        return int(text)

    ips = tuple(need("NODUS_NODE_IPS").split(","))
    rank, nodes = whole("NODUS_NODE_RANK"), whole("NODUS_NUM_NODES")
    if len(ips) != nodes or rank >= nodes:
        raise ValueError(f"NODUS_NODE_IPS lists {len(ips)} addresses for NODUS_NUM_NODES {nodes} and rank {rank}")
    return Layout(rank, ips, whole("NODUS_GPUS_PER_NODE"), whole("MASTER_PORT"))


# --- what the coordinator hands each rank -------------------------------------------------------------------------


def ray_member(workload: Workload, rank: int, env: Mapping[str, str]) -> list[str]:
    """The `Ray` launcher's command of rank `rank`: the node program with the Job's command after `--` (ranks > 0
    carry it too, unused, so every rank's argv reads the same but for nothing)."""
    return _member(workload, "Ray")


def verl_member(workload: Workload, rank: int, env: Mapping[str, str]) -> list[str]:
    """The `Verl` launcher's: the `Ray` launcher's, and rank 0's command gets `NODUS_VERL_OVERRIDES`."""
    return _member(workload, "Verl")


def _member(workload: Workload, launcher: str) -> list[str]:
    timeout_s = workload.resources.startup_timeout_s if workload.resources is not None else JOIN_TIMEOUT_S
    return [
        sys.executable,
        "-m",
        MAIN_MODULE,
        "--launcher",
        launcher,
        # What the member's bundle reserves (`gang.bundles`): the workload names no CPU count yet.
        "--num-cpus",
        f"{SESSION_CPUS:g}",
        "--join-timeout",
        f"{timeout_s:g}",
        "--",
        *workload.command,
    ]


# --- what the node program starts ---------------------------------------------------------------------------------


def node_argv(ray: str, layout: Layout, num_cpus: str, temp_dir: str) -> list[str]:
    """`ray start` of the rank's inner node: the head on rank 0, a node joining it on the others."""
    if layout.rank == 0:
        argv = [ray, "start", "--head", "--port", str(layout.gcs_port)]
        argv += ["--ray-client-server-port", str(layout.master_port + CLIENT_PORT_OFFSET)]
        argv += ["--include-dashboard", "false"]
    else:
        argv = [ray, "start", "--address", layout.head_address]
    argv += ["--block", "--node-ip-address", layout.ips[layout.rank]]
    argv += ["--num-cpus", num_cpus, "--num-gpus", str(layout.gpus)]
    argv += ["--disable-usage-stats", "--temp-dir", temp_dir]
    argv += [
        text for flag, port in zip(NODE_PORT_FLAGS, layout.node_ports(), strict=True) for text in (flag, str(port))
    ]
    return argv


def inner_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment of the node program and what it runs: the outer session's Ray variables dropped, usage
    stats off, this Python's scripts first on PATH (the `ray` beside it)."""
    env = {name: value for name, value in environ.items() if name not in INNER_DROPPED}
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), environ.get("PATH", os.defpath)])
    return env


def node_env(env: Mapping[str, str]) -> dict[str, str]:
    """The environment of the rank's inner node (`inner_env` less the per-node torch variables)."""
    return {name: value for name, value in env.items() if name not in INNER_NODE_DROPPED}


def command_env(env: Mapping[str, str], layout: Layout, launcher: str) -> dict[str, str]:
    """The environment of the Job's command on rank 0: `RAY_ADDRESS` the inner head; for `Verl` the overrides to
    append to the verl command (`python -m verl.trainer.main_ppo ... $NODUS_VERL_OVERRIDES`)."""
    out = {**env, "RAY_ADDRESS": layout.head_address}
    if launcher == "Verl":
        out[VERL_OVERRIDES] = verl_overrides(layout)
    return out


def verl_overrides(layout: Layout) -> str:
    return f"trainer.nnodes={layout.nodes} trainer.n_gpus_per_node={layout.gpus}"


def split_command(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(the node program's own arguments, the Job's command after the first `--`)."""
    if "--" not in argv:
        return list(argv), []
    at = list(argv).index("--")
    return list(argv[:at]), list(argv[at + 1 :])
