"""The `Ray` and `Verl` launchers without Ray: what the coordinator hands each rank (the node program with the
Job's command after `--`), the `ray start` each rank's node program runs (head on MASTER_ADDR, ports derived from
MASTER_PORT, GPUs and CPUs of the bundle, no dashboard, its own temp folder), the environments of the inner nodes
and of the command (the outer cluster's address and ids dropped, `RAY_ADDRESS` the inner head, the verl overrides),
and the one-line failures of the node program."""

from __future__ import annotations

import itertools
import sys

import pytest

from nodus.reconciler.executors.ray import gang, launchers, ray_launcher, ray_launcher_main
from nodus.reconciler.executors.workload import GpuResources, Resources, Workload, WorkloadKey

IPS = ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
COMMAND = ("python", "-m", "verl.trainer.main_ppo", "data.train_files=x")


def workload(launcher: str, gpus: int = 8) -> Workload:
    return Workload(
        key=WorkloadKey(project="default", name="rl", kind="Job"),
        command=COMMAND,
        resources=Resources(
            gpu=GpuResources(types=("H100",), count=gpus), nodes=3, launcher=launcher, startupTimeoutS=300
        ),
    )


def rank_env(launcher: str, rank: int, gpus: int = 8) -> dict[str, str]:
    return gang.rank_env(workload(launcher, gpus), rank, IPS)


@pytest.mark.parametrize("launcher", ["Ray", "Verl"])
def test_every_rank_runs_the_node_program_with_the_jobs_command_after_the_separator(launcher: str) -> None:
    for rank in range(3):
        argv = launchers.member_command(workload(launcher), rank, rank_env(launcher, rank))
        assert argv == [
            sys.executable,
            "-m",
            "nodus.reconciler.executors.ray.ray_launcher_main",
            "--launcher",
            launcher,
            "--num-cpus",
            "1",
            "--join-timeout",
            "300",
            "--",
            *COMMAND,
        ]
        args, command = ray_launcher_main.parse(argv[3:])
        assert (args.launcher, args.num_cpus, args.join_timeout, command) == (launcher, "1", 300.0, list(COMMAND))


def test_ray_and_verl_are_launchers_a_gang_can_start() -> None:
    for launcher in ("Ray", "Verl"):
        launchers.check(workload(launcher))


def test_rank_0_heads_the_inner_cluster_on_master_addr_at_ports_derived_from_master_port() -> None:
    layout = ray_launcher.layout_of(rank_env("Ray", 0))
    assert (layout.head_address, layout.nodes, layout.gpus) == ("10.0.0.1:29501", 3, 8)
    argv = ray_launcher.node_argv("/venv/bin/ray", layout, "1", "/tmp/nodus-rayl-x")
    assert argv[:6] == ["/venv/bin/ray", "start", "--head", "--port", "29501", "--ray-client-server-port"]
    flags = dict(itertools.pairwise(argv))  # each flag with the word after it
    assert flags["--ray-client-server-port"] == "29502"
    assert flags["--include-dashboard"] == "false"
    assert (flags["--node-ip-address"], flags["--num-gpus"], flags["--num-cpus"]) == ("10.0.0.1", "8", "1")
    assert flags["--temp-dir"] == "/tmp/nodus-rayl-x"
    assert "--block" in argv and "--disable-usage-stats" in argv
    assert "--address" not in argv
    assert [flags[flag] for flag in ray_launcher.NODE_PORT_FLAGS] == [str(p) for p in range(29510, 29516)]


def test_a_rank_above_0_joins_rank_0s_inner_head_at_its_own_address_and_ports() -> None:
    layout = ray_launcher.layout_of(rank_env("Ray", 2, gpus=4))
    argv = ray_launcher.node_argv("ray", layout, "1", "/tmp/t")
    flags = dict(itertools.pairwise(argv))
    assert argv[:4] == ["ray", "start", "--address", "10.0.0.1:29501"]
    assert "--head" not in argv and "--include-dashboard" not in argv
    assert (flags["--node-ip-address"], flags["--num-gpus"]) == ("10.0.0.3", "4")
    # Two ranks of one host never share a port (the test cluster's nodes all run on 127.0.0.1).
    ports = {rank: ray_launcher.layout_of(rank_env("Ray", rank)).node_ports() for rank in range(3)}
    every = [port for listed in ports.values() for port in listed]
    assert len(set(every)) == len(every) and not {29500, 29501, 29502} & set(every)
    assert [flags[flag] for flag in ray_launcher.NODE_PORT_FLAGS] == [str(p) for p in ports[2]]


def test_the_inner_processes_lose_the_outer_clusters_address_and_ids_and_keep_its_auth() -> None:
    outer = {
        "RAY_ADDRESS": "10.9.9.9:6379",
        "RAY_JOB_ID": "02000000",
        "RAY_RAYLET_PID": "123",
        "RAY_NODE_ID": "abc",
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN_PATH": "/etc/ray/token",
        "RAY_DEDUP_LOGS": "0",
        "PATH": "/usr/bin",
        **rank_env("Ray", 0),
    }
    env = ray_launcher.inner_env(outer)
    assert not {"RAY_ADDRESS", "RAY_JOB_ID", "RAY_RAYLET_PID", "RAY_NODE_ID"} & set(env)
    assert (env["RAY_AUTH_MODE"], env["RAY_AUTH_TOKEN_PATH"], env["RAY_DEDUP_LOGS"]) == ("token", "/etc/ray/token", "0")
    assert env["RAY_USAGE_STATS_ENABLED"] == "0"
    assert env["PATH"].split(":")[0] == str(sys.executable.rsplit("/", 1)[0])
    node = ray_launcher.node_env(env)
    assert not {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"} & set(node)
    assert node["NODUS_NODE_RANK"] == "0"  # the seeds' variables stay


def test_the_command_gets_ray_address_and_verl_its_overrides() -> None:
    env = ray_launcher.inner_env(rank_env("Verl", 0))
    layout = ray_launcher.layout_of(env)
    ray_env = ray_launcher.command_env(env, layout, "Ray")
    assert ray_env["RAY_ADDRESS"] == "10.0.0.1:29501"
    assert ray_launcher.VERL_OVERRIDES not in ray_env
    assert ray_env["WORLD_SIZE"] == "3"  # the command keeps the seeds' contract
    verl_env = ray_launcher.command_env(env, layout, "Verl")
    assert verl_env["NODUS_VERL_OVERRIDES"] == "trainer.nnodes=3 trainer.n_gpus_per_node=8"
    assert verl_env["RAY_ADDRESS"] == "10.0.0.1:29501"


def test_a_rank_without_the_gang_variables_fails_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    env = rank_env("Ray", 1)
    for name in env:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NODUS_NODE_RANK", "1")
    assert ray_launcher_main.main(["--launcher", "Verl", "--", "true"]) == 2
    assert capsys.readouterr().out == (
        "[ray launcher] spec.launcher Verl: NODUS_NODE_IPS is not set (the gang's rank variables)\n"
    )


def test_rank_0_without_a_command_fails_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, value in rank_env("Ray", 0).items():
        monkeypatch.setenv(name, value)
    assert ray_launcher_main.main(["--launcher", "Ray"]) == 2
    assert capsys.readouterr().out.count("\n") == 1


def test_bad_rank_variables_are_named() -> None:
    env = {**rank_env("Ray", 0), "NODUS_NUM_NODES": "2"}
    with pytest.raises(ValueError, match="NODUS_NODE_IPS lists 3 addresses for NODUS_NUM_NODES 2"):
        ray_launcher.layout_of(env)
    with pytest.raises(ValueError, match="MASTER_PORT 'x' is not a whole number"):
        ray_launcher.layout_of({**rank_env("Ray", 0), "MASTER_PORT": "x"})
