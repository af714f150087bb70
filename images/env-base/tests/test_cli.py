"""`nodus-env` as the host runs it: separate processes, JSON lines on stdout only, exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

CHATTY = """
import sys
print("loading...")
WORDS = [f"w{i:03d}" for i in range(60)]
def tasks(split):
    return [{"prompt": f"Reverse {w}", "answer": w[::-1]} for w in (WORDS[:48] if split == "train" else WORDS[48:])]
def reward(completion, answer):
    print("scoring", completion)
    sys.stdout.flush()
    if completion == "raise":
        raise RuntimeError("bad grader")
    return completion.strip() == f"<answer>{answer}</answer>"
"""


@pytest.fixture
def env_dir(tmp_path: Path) -> Path:
    (tmp_path / "chatty_env.py").write_text(textwrap.dedent(CHATTY))
    return tmp_path


def nodus_env(env_dir: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "NODUS_ENVIRONMENT_PATH": str(env_dir),
        "NODUS_ENVIRONMENT_LOADER": "chatty_env",
        "NODUS_ENVIRONMENT": "chatty",
        "NODUS_ENVIRONMENT_VERSION": "1.0.0",
    }
    return subprocess.run(
        [sys.executable, "-m", "nodus.env", *args], input=stdin, capture_output=True, text=True, env=env, timeout=60
    )


def test_two_processes_print_byte_identical_task_lists(env_dir: Path) -> None:
    first = nodus_env(env_dir, "tasks", "--split", "train", "--seed", "7")
    second = nodus_env(env_dir, "tasks", "--split", "train", "--seed", "7")
    assert first.returncode == 0
    assert first.stdout == second.stdout
    lines = [json.loads(x) for x in first.stdout.splitlines()]
    assert len(lines) == 48
    assert set(lines[0]) == {"taskId", "prompt", "metadata"}
    other_seed = nodus_env(env_dir, "tasks", "--split", "train", "--seed", "8")
    assert other_seed.stdout != first.stdout
    assert sorted(other_seed.stdout.splitlines()) == sorted(first.stdout.splitlines())


def test_grade_streams_one_line_per_line_and_keeps_stdout_clean(env_dir: Path) -> None:
    tasks = [json.loads(x) for x in nodus_env(env_dir, "tasks", "--split", "test").stdout.splitlines()]
    answer = tasks[0]["prompt"].split()[-1][::-1]
    requests = [
        {"taskId": tasks[0]["taskId"], "completion": f"<answer>{answer}</answer>"},
        {"taskId": tasks[0]["taskId"], "completion": "raise"},
        {"taskId": tasks[1]["taskId"], "completion": "wrong"},
    ]
    stdin = "\n".join(json.dumps(r) for r in requests) + "\nnot json\n"
    result = nodus_env(env_dir, "grade", stdin=stdin)
    assert result.returncode == 0
    out = [json.loads(x) for x in result.stdout.splitlines()]
    assert [o["verdict"] for o in out] == ["Correct", "InfrastructureFailure", "Incorrect", "InfrastructureFailure"]
    assert [o["taskId"] for o in out[:3]] == [r["taskId"] for r in requests]
    assert "scoring" in result.stderr and "loading..." in result.stderr


def test_info_and_selfcheck(env_dir: Path) -> None:
    info = json.loads(nodus_env(env_dir, "info").stdout)
    assert info["splits"] == {"train": 48, "test": 12}
    assert info["name"] == "chatty" and info["adapter"] == "module"
    check = nodus_env(env_dir, "selfcheck")
    report = json.loads(check.stdout)
    assert check.returncode == 0 and report["ok"] is True
    assert len(report["checks"]) == 4


def test_unloadable_environment_exits_2(tmp_path: Path) -> None:
    (tmp_path / "chatty_env.py").write_text("raise ImportError('missing dependency foo')\n")
    result = nodus_env(tmp_path, "info")
    assert result.returncode == 2
    assert (
        "cannot load the environment: loader 'chatty_env' failed: ImportError: missing dependency foo" in result.stderr
    )


def test_manifests_writes_what_info_and_tasks_print_in_one_load(env_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "manifests"
    out.mkdir()
    written = nodus_env(env_dir, "manifests", "--out", str(out), "--seed", "42", "--seed", "0")
    assert written.returncode == 0, written.stderr
    assert written.stdout == ""
    assert written.stderr.count("loading...") == 1  # the environment loaded once for all four lists
    assert (out / "info.json").read_text() == nodus_env(env_dir, "info").stdout
    for split in ("train", "test"):
        for seed in ("0", "42"):
            expected = nodus_env(env_dir, "tasks", "--split", split, "--seed", seed).stdout
            assert (out / f"tasks-{split}-{seed}.jsonl").read_text() == expected
