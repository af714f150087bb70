"""Running completion code: results come back, limits hold, another uid cannot read the answers."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from nodus.env.execute import run_function

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="switching to the runner uid needs root")
RUNNER_UID = int(os.environ.get("NODUS_RUNNER_UID", "10002"))


def alive(uid: int) -> list[str]:
    from nodus.env.execute import _alive

    return ["alive"] if _alive(uid) else []


def test_values_and_errors_per_call() -> None:
    result = run_function("def add(a, b):\n    return a + b\n", "add", [[1, 2], ["a", "b"], [1, "x"]])
    assert result.status == "ok"
    assert result.values == [3, "ab", None]
    assert result.errors[:2] == [None, None] and "TypeError" in (result.errors[2] or "")


def test_code_that_does_not_load() -> None:
    assert run_function("def f(:\n", "f", [[]]).status == "error"
    missing = run_function("x = 1\n", "f", [[]])
    assert missing.status == "error" and "does not define a function named 'f'" in missing.errors[0]


def test_infinite_loop_times_out() -> None:
    result = run_function("def f():\n    while True:\n        pass\n", "f", [[]], timeout_s=1)
    assert result.status == "timeout"
    assert result.duration_s < 4


def test_huge_allocation_fails_inside_the_runner() -> None:
    result = run_function("def f():\n    b = bytearray(1024 ** 3)\n    return len(b)\n", "f", [[]], memory_mb=256)
    assert result.status == "ok" and result.values == [None]
    assert result.errors[0].startswith("MemoryError")


def test_flood_of_output_is_cut() -> None:
    code = "import sys\ndef f():\n    sys.stdout.write('x' * (100 * 1024 * 1024))\n    return 1\n"
    result = run_function(code, "f", [[]], output_limit=65536)
    assert result.status == "killed"
    assert len(result.stdout) == 65536


@as_root
def test_runner_is_another_uid_and_cannot_read_grader_files(tmp_path: Path) -> None:
    private = tmp_path / "answers"
    private.mkdir()
    (private / "answers.json").write_text('{"secret": 42}')
    shutil.chown(private, 10001, 10001)
    shutil.chown(private / "answers.json", 10001, 10001)
    private.chmod(0o700)
    code = f"import os\ndef f():\n    return [os.getuid(), open({str(private / 'answers.json')!r}).read()]\n"
    result = run_function(code, "f", [[]])
    assert result.isolation == "uid"
    assert result.values == [None]
    assert "PermissionError" in (result.errors[0] or "")
    uid = run_function("import os\ndef f():\n    return os.getuid()\n", "f", [[]])
    assert uid.values == [RUNNER_UID]


@as_root
def test_fork_bomb_is_contained_and_cleaned_up() -> None:
    code = "import os\ndef f():\n    while True:\n        try:\n            os.fork()\n        except OSError:\n            pass\n"
    result = run_function(code, "f", [[]], timeout_s=2)
    assert result.status == "timeout"
    assert alive(RUNNER_UID) == []
    after = run_function("def f():\n    return 'still works'\n", "f", [[]])
    assert after.values == ["still works"]
