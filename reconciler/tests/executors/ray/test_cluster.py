"""`nodus cluster` without Ray: the record file, the pid and start-time check `down` relies on, and the CLI's errors.

A fake record names processes this test starts itself (`sleep`), so `down` is shown ending exactly the recorded
sessions and never a process whose pid matches but whose start time does not.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from nodus.cli.main import cli
from nodus.errors import ConfigError
from nodus.reconciler.executors.local.job import start_ticks
from nodus.reconciler.executors.ray import cluster


@pytest.fixture
def sleepers() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait()


def _record(folder: Path, nodes: list[cluster.NodeRecord]) -> cluster.ClusterRecord:
    token = cluster.write_token(folder)
    record = cluster.ClusterRecord(
        "127.0.0.1:1", "http://127.0.0.1:2", str(token), None, False, str(folder / "t"), nodes
    )
    cluster.write_record(folder, record)
    return record


def test_record_round_trips_and_the_token_is_private(tmp_path: Path) -> None:
    node = cluster.NodeRecord(
        "worker-1", 123, 456, {"CPU": 1.0, "nodus.dev/gpu-type/H100": 2.0}, {"nodus.dev/gpu-type": "H100"}, "l"
    )
    record = _record(tmp_path, [node])
    assert cluster.read_record(tmp_path) == record
    assert (tmp_path / "token").stat().st_mode & 0o777 == 0o600
    assert len(record.token()) == 64


def test_a_damaged_record_names_the_file_and_the_field(tmp_path: Path) -> None:
    (tmp_path / "cluster.json").write_text(json.dumps({"nodes": [{"role": "head", "pid": "x"}]}))
    with pytest.raises(ConfigError, match=r"cluster.json: nodes\[0\].pid is missing or not a whole number"):
        cluster.read_record(tmp_path)
    (tmp_path / "cluster.json").write_text("{")
    with pytest.raises(ConfigError, match=r"cluster\.json: not a cluster record"):
        cluster.read_record(tmp_path)


def test_gpu_types_and_worker_flags() -> None:
    assert cluster.parse_gpu_type("H100") == ("H100", 1)
    assert cluster.parse_gpu_type("H100:8") == ("H100", 8)
    specs = cluster.worker_specs(3, ["H100:2", "A10G"], 2)
    assert [s.resources() for s in specs] == [{"nodus.dev/gpu-type/H100": 2.0}, {"nodus.dev/gpu-type/A10G": 1.0}, {}]
    assert specs[0].labels() == {"nodus.dev/gpu-type": "H100"} and specs[2].cpus == 2
    for bad, message in ((["H100:0"], "COUNT"), (["a/b"], "TYPE"), (["A", "B", "C", "D"], "one type per worker")):
        with pytest.raises(ConfigError, match=message):
            cluster.worker_specs(3, bad, 1)


def test_down_ends_the_recorded_session_and_everything_in_it(
    tmp_path: Path, sleepers: list[subprocess.Popen[bytes]]
) -> None:
    # A node's `ray start` stand-in: a shell in its own session with a child of its own (as raylet is).
    leader = subprocess.Popen(["sh", "-c", "sleep 300 & wait"], start_new_session=True)
    sleepers.append(leader)
    ticks = start_ticks(leader.pid)
    assert ticks is not None
    _record(tmp_path, [cluster.NodeRecord("head", leader.pid, ticks)])
    # The shell forks its child when it gets the CPU: on a loaded host, not yet at the first look.
    deadline = time.monotonic() + 30
    while len(owned := cluster.owned_processes(cluster.status(tmp_path)[0].nodes)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert leader.pid in {p.pid for p in owned} and len(owned) == 2
    result = CliRunner().invoke(cli, ["cluster", "down", "--dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "ended 1 node(s)" in result.output
    assert leader.wait(timeout=5) is not None
    assert cluster.owned_processes([cluster.NodeRecord("head", leader.pid, ticks)]) == []
    assert not (tmp_path / "cluster.json").exists() and not (tmp_path / "token").exists()


def test_down_never_signals_a_pid_whose_start_time_differs(
    tmp_path: Path, sleepers: list[subprocess.Popen[bytes]]
) -> None:
    stranger = subprocess.Popen(["sleep", "300"], start_new_session=True)
    sleepers.append(stranger)
    ticks = start_ticks(stranger.pid)
    assert ticks is not None
    _record(tmp_path, [cluster.NodeRecord("head", stranger.pid, ticks - 1)])  # the pid, reused by someone else
    status = CliRunner().invoke(cli, ["cluster", "status", "--dir", str(tmp_path)])
    assert status.exit_code == 0 and status.output.splitlines()[1].split()[:3] == ["head", str(stranger.pid), "no"]
    result = CliRunner().invoke(cli, ["cluster", "down", "--dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "was running; removed its record" in result.output
    assert stranger.poll() is None  # still running
    assert not (tmp_path / "cluster.json").exists()


def test_up_refuses_while_a_recorded_node_is_alive(tmp_path: Path, sleepers: list[subprocess.Popen[bytes]]) -> None:
    alive = subprocess.Popen(["sleep", "300"], start_new_session=True)
    sleepers.append(alive)
    ticks = start_ticks(alive.pid)
    assert ticks is not None
    _record(tmp_path, [cluster.NodeRecord("head", alive.pid, ticks)])
    result = CliRunner().invoke(cli, ["cluster", "up", "--netns", "nodus-unused", "--dir", str(tmp_path)])
    assert result.exit_code == 1
    assert "cluster.json: a Ray cluster is already running here (1 of 1 nodes alive" in result.output
    assert alive.poll() is None and (tmp_path / "cluster.json").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["status"], "cluster.json: no Ray cluster is recorded here"),
        (["down"], "cluster.json: no Ray cluster is recorded here"),
        (["up", "--workers", "1", "--gpu-type", "A", "--gpu-type", "B"], "--gpu-type given 2 times for 1 worker(s)"),
        (["up", "--netns", "bad name!"], "--netns 'bad name!': a namespace name is"),
    ],
)
def test_cli_errors_are_one_line_and_exit_1(tmp_path: Path, args: list[str], message: str) -> None:
    result = CliRunner().invoke(cli, ["cluster", *args, "--dir", str(tmp_path)])
    assert result.exit_code == 1
    assert message in result.output.splitlines()[-2 if "hint:" in result.output else -1]
    assert not (tmp_path / "cluster.json").exists() and not (tmp_path / "token").exists()
