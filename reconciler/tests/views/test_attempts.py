"""Attempts (`views.attempts`, `controllers.attempts`, `nodus get attempts`): each rank's attempts of a job with the
seeds' labels, picked by `-l nodus.dev/job=NAME,nodus.dev/rank=1`, from what the executors report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from nodus.cli.main import cli
from nodus.errors import ConfigError
from nodus.reconciler.controllers.attempts import attempts_of
from nodus.reconciler.project import Project
from nodus.reconciler.state.records import ResourceKey
from nodus.reconciler.views.attempts import attempts, matches, parse_selector, table

NOW = 1_800_000_000.0


def gang_row(rank: int, epoch: int, node: str, **fields: Any) -> dict[str, Any]:
    return {
        "rank": rank,
        "epoch": epoch,
        "run": 0,
        "node": node,
        "ip": f"10.0.0.{rank + 1}",
        "start": "Boot" if epoch == 1 else "Restore",
        "requestedAt": NOW - 300 + 100 * epoch,
        "readyAt": NOW - 290 + 100 * epoch,
        "readySeconds": 10.0,
        **fields,
    }


GANG = [
    gang_row(0, 1, "node-aaaa", phase="Cancelled", reason="CancelRequested", costUSD="0.0100"),
    gang_row(1, 1, "node-bbbb", phase="Failed", reason="NodeLost", costUSD="0.0100"),
    gang_row(
        0, 2, "node-aaaa", phase="Succeeded", reason="TrainerSucceeded", costUSD="0.0200", restoreFrom="file:///c"
    ),
    gang_row(
        1, 2, "node-cccc", phase="Succeeded", reason="TrainerSucceeded", costUSD="0.0200", restoreFrom="file:///c"
    ),
]


def test_the_selector_is_kubectls_equality_selector() -> None:
    terms = parse_selector("nodus.dev/job=torchrun-2-node, nodus.dev/rank==1,nodus.dev/epoch!=1")
    assert terms == [
        ("nodus.dev/job", "=", "torchrun-2-node"),
        ("nodus.dev/rank", "=", "1"),
        ("nodus.dev/epoch", "!=", "1"),
    ]
    assert matches({"nodus.dev/job": "torchrun-2-node", "nodus.dev/rank": "1", "nodus.dev/epoch": "2"}, terms)
    assert not matches({"nodus.dev/job": "torchrun-2-node", "nodus.dev/rank": "1", "nodus.dev/epoch": "1"}, terms)
    assert matches({}, parse_selector("nodus.dev/rank!=1"))  # a missing label is not 1
    assert parse_selector(None) == [] and parse_selector("") == []
    assert parse_selector("a=1,,b=2") == [("a", "=", "1"), ("b", "=", "2")]  # an empty term is skipped
    for bad in ("nodus.dev/rank", "=1"):
        with pytest.raises(ConfigError, match="is not key=value or key!=value"):
            parse_selector(bad)


def test_local_sessions_and_the_running_one_are_rank_0_attempts_on_this_host() -> None:
    raw = {
        "phase": "Running",
        "attempt": 2,
        "sessionStartedAt": NOW - 5,
        "sessions": [
            {"attempt": 1, "startedAt": NOW - 60, "endedAt": NOW - 30, "costUSD": "0.0300", "reason": "SupervisorLost"}
        ],
    }
    rows = attempts_of(raw)
    assert rows == [
        {
            "rank": 0,
            "attempt": 1,
            "node": "local",
            "startedAt": NOW - 60,
            "endedAt": NOW - 30,
            "costUSD": "0.0300",
            "reason": "SupervisorLost",
        },
        {"rank": 0, "attempt": 2, "node": "local", "startedAt": NOW - 5, "phase": "Running"},
    ]
    assert attempts_of({"attempts": GANG, "sessions": raw["sessions"]}) == GANG  # the executor's own list wins


def record_store(root: Path, records: dict[str, list[dict[str, Any]]]) -> None:
    (root / "nodus.lock").write_text("lockfileVersion: 1\nenvironments: {}\n")
    store = Project.find(root).open_state()
    try:
        for name, rows in records.items():
            key = ResourceKey("Job", "default", name)
            spec = {
                "apiVersion": "nodus.dev/v1beta1",
                "kind": "Job",
                "metadata": {"name": name},
                "spec": {"command": ["x"]},
            }
            store.put(key, spec)
            store.set_status(key, {"phase": "Succeeded", "attempts": rows})
    finally:
        store.close()


def test_get_attempts_lists_one_ranks_attempts_across_restarts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    record_store(tmp_path, {"torchrun-2-node": GANG, "other": [gang_row(1, 1, "node-dddd", phase="Succeeded")]})
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    result = runner.invoke(cli, ["get", "attempts", "-l", "nodus.dev/job=torchrun-2-node,nodus.dev/rank=1"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    assert lines[0].split() == ["NAME", "JOB", "RANK", "EPOCH", "NODE", "PHASE", "START", "READY", "COST", "AGE"]
    assert [line.split()[:9] for line in lines[1:]] == [
        ["torchrun-2-node-e1-1", "Job/torchrun-2-node", "1", "1", "node-bbbb", "Failed", "Boot", "10.0s", "$0.0100"],
        [
            "torchrun-2-node-e2-1",
            "Job/torchrun-2-node",
            "1",
            "2",
            "node-cccc",
            "Succeeded",
            "Restore",
            "10.0s",
            "$0.0200",
        ],
    ]
    result = runner.invoke(cli, ["get", "attempts", "-l", "nodus.dev/rank=1", "-o", "json"])
    items = json.loads(result.stdout)["items"]
    assert [item["metadata"]["name"] for item in items] == [
        "other-e1-1",
        "torchrun-2-node-e1-1",
        "torchrun-2-node-e2-1",
    ]
    assert items[1]["metadata"]["labels"] == {
        "nodus.dev/job": "torchrun-2-node",
        "nodus.dev/kind": "Job",
        "nodus.dev/project": "default",
        "nodus.dev/rank": "1",
        "nodus.dev/epoch": "1",
    }
    assert items[1]["status"]["reason"] == "NodeLost"
    result = runner.invoke(cli, ["get", "attempts", "-l", "nodus.dev/job=nothing"])
    assert result.exit_code == 0 and result.stdout.strip() == "No attempts found."
    result = runner.invoke(cli, ["get", "attempts", "-l", "nodus.dev/rank"])
    assert result.exit_code == 1 and "'nodus.dev/rank' is not key=value or key!=value" in result.output


def test_the_wide_table_adds_the_reason_the_address_and_the_restore(tmp_path: Path) -> None:
    record_store(tmp_path, {"g": GANG})
    store = Project.find(tmp_path).open_state()
    try:
        found = attempts(store.list("Job"))
    finally:
        store.close()
    titles, rows = table(found, wide=True, now=NOW)
    assert titles[-3:] == ["REASON", "IP", "RESTORE-FROM"]
    assert rows[3][-3:] == ["TrainerSucceeded", "10.0.0.2", "file:///c"]
    assert rows[0][-1] == "-" and rows[0][9] == "3m"  # asked for 200 s ago
