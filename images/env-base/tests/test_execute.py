"""Running completion code: results come back, limits hold, the runner sees nothing but its interpreter."""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

import pytest

from nodus.env.execute import RunnerUnavailableError, _runner_python, run_function
from nodus.env.runner_view import runner_view

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
def test_runner_is_another_uid_and_cannot_see_grader_files(tmp_path: Path) -> None:
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
    assert "FileNotFoundError" in (result.errors[0] or "")  # not even there: the runner has a root of its own
    uid = run_function("import os\ndef f():\n    return os.getuid()\n", "f", [[]])
    assert uid.values == [RUNNER_UID]


VIEW_PROBE = """
import os, socket
def f():
    seen = []
    for folder, subfolders, files in os.walk("/"):
        seen += [os.path.join(folder, name) for name in files]
    try:
        socket.create_connection(("127.0.0.1", PORT), timeout=1)
        network = "reached"
    except OSError as exc:
        network = type(exc).__name__
    return {
        "root": sorted(os.listdir("/")),
        "files": seen,
        "pid": os.getpid(),
        "cwd": os.getcwd(),
        "environ": dict(os.environ),
        "writable_root": os.access("/", os.W_OK) or os.access("/usr", os.W_OK),
        "tmp": os.listdir("/tmp"),
        "network": network,
    }
"""


@as_root
def test_the_runner_sees_only_its_interpreter_its_library_and_an_empty_tmp(tmp_path: Path) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    try:
        port = listener.getsockname()[1]
        result = run_function(VIEW_PROBE.replace("PORT", str(port)), "f", [[]], timeout_s=10)
    finally:
        listener.close()
    assert result.status == "ok", result
    (seen,) = result.values
    view = runner_view(_runner_python(RUNNER_UID))
    allowed = [*view.binds, *view.devices, *(link for link, _ in view.links)]
    outside = [path for path in seen["files"] if not any(path == a or path.startswith(a + "/") for a in allowed)]
    assert outside == [], outside[:20]
    assert not any("site-packages" in path or "dist-packages" in path for path in seen["files"])
    assert set(seen["root"]) <= {"usr", "lib", "lib64", "bin", "etc", "dev", "tmp"}, seen["root"]
    assert "proc" not in seen["root"] and "sys" not in seen["root"] and "opt" not in seen["root"]
    assert seen["pid"] == 1  # its own PID namespace: no other process to see or signal
    assert seen["cwd"] == "/tmp" and seen["tmp"] == [] and not seen["writable_root"]
    assert seen["environ"] == {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/tmp", "TMPDIR": "/tmp"}
    assert seen["network"] in ("OSError", "ConnectionRefusedError"), seen["network"]  # no route out of its namespace


@as_root
def test_runners_do_not_share_their_tmp() -> None:
    write = "import os\ndef f(n):\n    open('/tmp/mine', 'w').write(str(n))\n    return sorted(os.listdir('/tmp'))\n"
    assert run_function(write, "f", [[1]]).values == [["mine"]]
    assert run_function("import os\ndef f():\n    return os.listdir('/tmp')\n", "f", [[]]).values == [[]]


def test_a_view_that_cannot_be_built_refuses_to_run_the_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No weaker runner: the grader raises, so the verdict is an InfrastructureFailure, never a wrong answer."""
    monkeypatch.setenv("NODUS_RUNNER_PYTHON", str(tmp_path / "no-such-python"))
    with pytest.raises(RunnerUnavailableError, match="no-such-python"):
        run_function("def f():\n    return 1\n", "f", [[]])


@as_root
def test_fork_bomb_is_contained_and_cleaned_up() -> None:
    code = "import os\ndef f():\n    while True:\n        try:\n            os.fork()\n        except OSError:\n            pass\n"
    result = run_function(code, "f", [[]], timeout_s=2)
    assert result.status == "timeout"
    assert alive(RUNNER_UID) == []
    after = run_function("def f():\n    return 'still works'\n", "f", [[]])
    assert after.values == ["still works"]
