"""The job folder's pieces: the spec and its checks, JSON files written whole, the outputs manifest, the
socket path, grading settings as JSON and verified process signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from nodus.errors import ConfigError, PermanentError
from nodus.reconciler.executors.local.job import (
    MAX_UNIX_SOCKET_PATH,
    EnvironmentSpec,
    JobFiles,
    JobSpec,
    grading_from_json,
    grading_to_json,
    log_tail,
    manifest_of,
    read_json,
    signal_verified,
    start_ticks,
    write_json,
)
from nodus.reconciler.grading import GradingSettings


def _spec(**fields: object) -> JobSpec:
    values: dict[str, object] = {"name": "tj", "project": "proj", "command": ("python3", "train.py"), **fields}
    return JobSpec(**values)  # type: ignore[arg-type]


def test_a_spec_survives_json_unchanged() -> None:
    environment = EnvironmentSpec("arithmetic", "2.0.0", paths=("/c/a",), loader="m", train_tasks=5, seed=9)
    spec = _spec(
        kind="Job",
        generation=3,
        attempt=2,
        env={"A": "1"},
        environment=environment,
        params={"parameters": {"steps": 2}},
        price_per_hour_usd="2.50",
        max_cost_usd="10",
        accounting_interval_s=0.5,
    )
    text = json.dumps(spec.to_json())
    assert JobSpec.from_json(json.loads(text)) == spec
    assert spec.to_json()["environment"]["trainTasks"] == 5 and spec.to_json()["maxCostUSD"] == "10"
    assert environment.ref().paths == (Path("/c/a"),)


def test_one_interval_costs_price_times_interval() -> None:
    assert _spec(price_per_hour_usd="36", accounting_interval_s=10).interval_cost() == Decimal("0.1")
    assert _spec(max_cost_usd=None).max_cost is None


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"name": "../etc"}, "job name '../etc' must be a DNS label"),
        ({"project": "Proj"}, "job project 'Proj' must be a DNS label"),
        ({"command": ()}, "command must be a non-empty list"),
        ({"kind": "Pod"}, "kind must be TrainingJob or Job"),
        ({"attempt": 0}, "attempt must be a whole number >= 1"),
        ({"price_per_hour_usd": "cheap"}, "pricePerHourUSD must be a decimal number"),
        ({"max_cost_usd": "-1"}, "maxCostUSD must be a finite amount"),
        ({"max_cost_usd": "NaN"}, "maxCostUSD must be a finite amount"),
        ({"accounting_interval_s": 0}, "accountingIntervalS must be a positive number"),
        ({"env": {"A": 1}}, "env must map names to strings"),
    ],
)
def test_a_bad_spec_is_a_one_line_config_error(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("[", r"\[")):
        _spec(**fields)


def test_a_spec_missing_a_field_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="a job spec needs 'command'"):
        JobSpec.from_json({"name": "tj", "project": "p"})
    with pytest.raises(ConfigError, match="give an image or the folders"):
        EnvironmentSpec("e", "1")


def test_json_files_are_replaced_whole(tmp_path: Path) -> None:
    path = tmp_path / "d" / "status.json"
    assert read_json(path) is None
    write_json(path, {"phase": "Running"})
    write_json(path, {"phase": "Succeeded"}, durable=True)
    assert read_json(path) == {"phase": "Succeeded"}
    assert os.listdir(path.parent) == ["status.json"]  # no temporary file left behind
    path.write_text("{half")
    with pytest.raises(PermanentError, match="is not JSON"):
        read_json(path)


def test_the_manifest_hashes_regular_files_and_skips_links(tmp_path: Path) -> None:
    (tmp_path / "adapter").mkdir()
    (tmp_path / "adapter" / "w.bin").write_bytes(b"abc")
    (tmp_path / "results.json").write_text("{}")
    (tmp_path / "leak").symlink_to("/etc/passwd")
    (tmp_path / "dirlink").symlink_to(tmp_path / "adapter")
    manifest = manifest_of(tmp_path)
    assert manifest["files"] == {
        "adapter/w.bin": {"sha256": "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", "size": 3},
        "results.json": {"sha256": "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a", "size": 2},
    }
    assert manifest["skipped"] == ["dirlink", "leak"]


def test_the_log_tail_reads_only_this_attempts_lines(tmp_path: Path) -> None:
    log = tmp_path / "trainer.log"
    log.write_text("old 1\nold 2\n")
    offset = log.stat().st_size
    with log.open("a") as out:
        out.write("new 1\n\nnew 2\n")
    assert log_tail(log, offset=offset) == ["new 1", "new 2"]
    assert log_tail(log, offset=0, lines=1) == ["new 2"]
    assert log_tail(tmp_path / "missing.log") == []


def test_a_socket_path_too_long_for_unix_sockets_moves_to_a_private_folder(tmp_path: Path) -> None:
    short = JobFiles(Path("/tmp/j/p/n"))
    assert short.socket == Path("/tmp/j/p/n/attempt.sock")
    deep = JobFiles(tmp_path / ("x" * 60) / ("y" * 60))
    assert len(os.fsencode(deep.socket)) <= MAX_UNIX_SOCKET_PATH
    assert deep.socket.parent.name == f"nodus-{os.getuid()}" and deep.socket == deep.socket
    assert JobFiles(tmp_path / ("x" * 60) / ("z" * 60)).socket != deep.socket


def test_grading_settings_survive_json(tmp_path: Path) -> None:
    settings = GradingSettings(mode="process", stage_dir=tmp_path, max_parallel=3, variables={"NODUS_X": "1"})
    assert grading_from_json(json.loads(json.dumps(grading_to_json(settings)))) == settings
    assert grading_from_json({}) == GradingSettings()


def test_signals_go_only_to_the_process_that_was_recorded() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        ticks = start_ticks(child.pid)
        assert ticks is not None
        assert not signal_verified(child.pid, ticks + 1, signal.SIGKILL)  # another process with that pid
        assert child.poll() is None
        assert signal_verified(child.pid, ticks, signal.SIGKILL)
        child.wait(10)
        assert start_ticks(child.pid) is None
        assert not signal_verified(child.pid, ticks, signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
