"""`nodus controller` through the CLI: options, one-line errors, `--once`, and what `nodus get` shows after it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from nodus.cli.main import cli

SECRET = "apiVersion: nodus.dev/v1\nkind: Secret\nmetadata: {name: creds}\nspec: {keys: [A]}\n"


@pytest.fixture
def service(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "service"
    folder.mkdir()
    monkeypatch.setenv("NODUS_HOME", str(folder / ".nodus"))
    monkeypatch.delenv("NODUS_STATE", raising=False)
    monkeypatch.chdir(folder)
    return folder


def nodus(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def test_once_syncs_and_get_shows_sync_health_and_revision(service: Path, git_repo: Any) -> None:
    sha = git_repo.commit("creds", {"secret.yaml": SECRET})
    code, output = nodus("controller", "--repo", str(git_repo.folder), "--once")
    assert code == 0, output
    assert f'synced {sha[:7]} "creds": 1 changed' in output and "Secret/creds: created" not in output  # not -v
    code, output = nodus("get", "secret", "-o", "wide")
    assert code == 0 and output.split()[:7] == ["NAME", "PHASE", "AGE", "REASON", "SYNC", "HEALTH", "REVISION"]
    assert "Synced" in output and "Healthy" in output and sha[:7] in output  # a Secret: Ready once stored
    code, output = nodus("get", "secret", "creds", "-o", "json")
    sync = json.loads(output)["sync"]
    assert (sync["status"], sync["health"], sync["revision"], sync["outcome"]) == ("Synced", "Healthy", sha, "Applied")
    code, output = nodus("get", "secret")
    assert "SYNC" not in output  # the default columns stay the seeds'
    code, output = nodus("controller", "--repo", str(git_repo.folder), "--once", "-v")
    assert code == 0 and f"in sync at {sha[:7]}; 1 Synced, 1 Healthy" in output


def test_once_exits_1_when_the_sync_fails(service: Path, git_repo: Any) -> None:
    git_repo.commit("nothing for nodus", {"README.md": "hello"})
    code, output = nodus("controller", "--repo", str(git_repo.folder), "--once")
    sha = git_repo.git("rev-parse", "--short=7", "HEAD")
    assert code == 1 and f"failed: {git_repo.folder}@{sha}: no nodus resources found" in output, output
    assert "hint: check --path" in output


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--repo", "nowhere"], "error: --repo nowhere: no such folder"),
        (["--repo", "REPO", "--branch", "release"], "there is no branch release"),
        (["--repo", "REPO", "--interval", "soon"], "error: --interval 'soon': must be a duration"),
        (["--repo", "REPO", "--interval", "500ms"], "error: --interval 500ms: at least 1s"),
    ],
)
def test_bad_options_are_one_line_errors(service: Path, git_repo: Any, args: list[str], says: str) -> None:
    git_repo.commit("creds", {"secret.yaml": SECRET})
    code, output = nodus("controller", *[str(git_repo.folder) if arg == "REPO" else arg for arg in args], "--once")
    assert code == 1 and says in output and "Traceback" not in output


TYPO_JOB = """apiVersion: nodus.dev/v1beta1
kind: TrainingJob
metadata: {name: typo}
spec:
  runtime: no-such-runtime
  environment: {name: reverse-words@1.0.0}
"""


def test_get_lists_what_git_has_and_the_store_does_not_as_missing(service: Path, git_repo: Any) -> None:
    git_repo.commit("a job whose runtime does not exist", {"secret.yaml": SECRET, "job.yaml": TYPO_JOB})
    code, output = nodus("controller", "--repo", str(git_repo.folder), "--once")
    assert code == 1 and "no-such-runtime" in output, output
    code, output = nodus("get", "tj", "-o", "json")
    assert code == 0, output
    document = json.loads(output)
    assert document["metadata"]["name"] == "typo" and document["status"] == {}, document
    sync = document["sync"]
    assert (sync["status"], sync["health"], sync["outcome"]) == ("OutOfSync", "Missing", "Failed"), sync
    assert "no-such-runtime" in sync["message"]
    code, output = nodus("get", "tj")
    rows = [line.split() for line in output.splitlines()[1:]]
    assert code == 0 and [row[0] for row in rows] == ["typo"] and "Missing" in rows[0], output  # PHASE
    code, output = nodus("get", "tj", "typo", "-o", "jsonpath={.sync.health}")
    assert code == 0 and output.strip() == "Missing", output
    code, output = nodus("get", "tj", "-n", "elsewhere")
    assert code == 0 and "typo" not in output, output
