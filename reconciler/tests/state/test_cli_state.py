"""A damaged state store through the CLI (`get`, `plan`, `apply`: one line, exit 1, nothing launched) and
`nodus state check` on healthy and damaged stores, on SQLite and PostgreSQL.

Before: a 0-byte `state.db` planned every resource as new (and an apply would have launched every job again);
a truncated or bit-flipped one ended `nodus get` and `plan` in a sqlite3.DatabaseError traceback.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from nodus.cli.main import cli
from nodus.reconciler.state import migrations

from .conftest import DAMAGES, damage

VOLUME = "apiVersion: nodus.dev/v1\nkind: Volume\nmetadata: {name: scratch}\nspec: {}\n"


def nodus(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project whose store holds one applied Volume, and a Job not applied yet that would leave a marker."""
    root = tmp_path / "project"
    root.mkdir()
    (root / "nodus.lock").write_text("lockfileVersion: 1\n")
    (root / "volume.yaml").write_text(VOLUME)
    for name in ("NODUS_PRICES", "NODUS_STATE", "NODUS_HOME", "NODUS_LOCAL_PRICE_PER_HOUR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(root)
    code, out, err = nodus("apply", ".", "--yes")
    assert code == 0, out + err
    command = [sys.executable, "-c", f"open({str(tmp_path / 'launched')!r}, 'w')"]
    (root / "job.yaml").write_text(
        f"apiVersion: nodus.dev/v1beta1\nkind: Job\nmetadata: {{name: again}}\nspec:\n  command: {json.dumps(command)}\n"
    )
    return root


def one_error_line(err: str, *parts: str) -> None:
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: the state store "), err
    assert "Traceback" not in err and all(part in lines[0] for part in parts), err


def test_the_job_launches_on_a_healthy_store(project: Path) -> None:
    """The control of the next test: on the same store undamaged, the same apply launches the Job."""
    code, out, err = nodus("apply", ".", "--yes", "--wait", "--timeout", "2m")
    assert code == 0 and (project.parent / "launched").exists(), out + err


@pytest.mark.parametrize("how", DAMAGES)
def test_get_plan_and_apply_on_a_damaged_store_say_one_line_and_launch_nothing(project: Path, how: str) -> None:
    state = project / ".nodus" / "state.db"
    left = damage(state, how)
    for command in (["get", "volumes"], ["plan", "."], ["apply", ".", "--yes"], ["apply", ".", "--yes", "--wait"]):
        code, out, err = nodus(*command)
        assert code == 1, (command, out, err)
        one_error_line(err, str(state), "is damaged", "restore it from a backup", "nodus state check")
        assert "Plan:" not in out and "to add" not in out  # never planned as an empty store
    assert state.read_bytes() == left  # not started over
    assert not (project / ".nodus" / "jobs").exists() and not (project.parent / "launched").exists()


def test_a_store_from_a_newer_nodus_is_one_line_for_get_plan_and_apply(project: Path) -> None:
    connection = sqlite3.connect(project / ".nodus" / "state.db", isolation_level=None)
    connection.execute("INSERT INTO schema_migrations (version, description, applied_at) VALUES (99, 'future', 0)")
    connection.close()
    for command in (["get", "volumes"], ["plan", "."], ["apply", ".", "--yes"]):
        code, out, err = nodus(*command)
        assert code == 1, (command, out, err)
        one_error_line(err, "schema version 99, from a newer nodus", "upgrade nodus")
    assert not (project / ".nodus" / "jobs").exists()


def test_state_check_of_a_healthy_store(project: Path) -> None:
    code, out, err = nodus("state", "check")
    assert code == 0 and err == "", out + err
    names = [row.split()[0] for row in out.splitlines()[1:-1]]
    assert names == ["file", "mode", "integrity", "schema", "tables", "documents"], out
    assert all(row.split()[1] == "ok" for row in out.splitlines()[1:-1]), out
    assert f"version {migrations.LATEST_VERSION}" in out and out.splitlines()[-1] == "The state store is healthy."
    code, out, _ = nodus("state", "check", "-o", "json")
    report = json.loads(out)
    assert code == 0 and report["healthy"] is True and report["store"] == str(project / ".nodus" / "state.db")


@pytest.mark.parametrize("how", DAMAGES)
def test_state_check_of_a_damaged_store_is_one_line_per_problem(project: Path, how: str) -> None:
    state = project / ".nodus" / "state.db"
    left = damage(state, how)
    code, out, err = nodus("state", "check")
    assert code == 1, out + err
    failed = "file" if how in ("empty", "not-sqlite") else "integrity"
    lines = err.splitlines()
    assert lines and all(text.startswith(f"error: {state}: {failed}: ") for text in lines), err
    assert "Traceback" not in err and f"{failed:<10} failed" in out
    assert state.read_bytes() == left
    code, out, _ = nodus("state", "check", "-o", "json")
    assert code == 1 and json.loads(out)["healthy"] is False


def test_state_check_finds_a_flipped_bit_sqlite_cannot_see_and_a_readable_mode(project: Path) -> None:
    state = project / ".nodus" / "state.db"
    damage(state, "document")
    state.chmod(0o644)
    code, out, err = nodus("state", "check")
    assert code == 1, out + err
    assert err.splitlines() == [
        f"error: {state}: mode: others may read it (state.db is 0644): chmod 600 them (any nodus command on it does)",
        f"error: {state}: documents: Volume/default/scratch spec: a stored JSON document does not parse "
        "(Expecting value: line 1 column 1 (char 0))",
    ], err
    assert state.stat().st_mode & 0o777 == 0o644  # a check changes nothing
    code, _, err = nodus("get", "volumes")
    assert code == 1 and "a stored JSON document does not parse" in err


def test_state_check_where_there_is_no_store_creates_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NODUS_STATE", raising=False)
    monkeypatch.delenv("NODUS_HOME", raising=False)
    monkeypatch.chdir(tmp_path)
    code, _, err = nodus("state", "check")
    assert code == 1 and err.splitlines() == [
        f"error: {tmp_path / '.nodus' / 'state.db'}: file: there is no state store here (nothing was applied yet, "
        "or it was removed)"
    ], err
    assert not (tmp_path / ".nodus").exists()


def test_state_check_on_each_backend(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, raw_sql: Callable[[str], None]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "volume.yaml").write_text(VOLUME)
    assert nodus("apply", ".", "--yes", "--state", store_url)[0] == 0
    code, out, err = nodus("state", "check", "--state", store_url, "-o", "json")
    report = json.loads(out)
    assert code == 0 and report["healthy"] is True, out + err
    expected = ["file", "mode", "integrity", "schema", "tables", "documents"]
    if not store_url.startswith("sqlite"):
        expected = ["connection", "schema", "tables"]
    assert [check["name"] for check in report["checks"]] == expected
    raw_sql("DROP TABLE sync_records")
    code, out, err = nodus("state", "check", "--state", store_url)
    assert code == 1 and err.splitlines() == [f"error: {report['store']}: tables: table sync_records is missing"], err
