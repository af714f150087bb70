"""python-functions graded with hostile completions, in both sandbox modes (the issue's acceptance).

Each hostile completion gets a verdict with evidence within its timeout, no answer leaks, and the grader
goes on with the next line: reading the answers, a socket to a listener on 127.0.0.1 in the host namespace,
a fork bomb, an infinite loop, a 1 GB allocation and 100 MB of output. "No answer leaks" is tested by a
completion that would pass *only* if it could read the hidden tests; network isolation by a listener this
test opens on 127.0.0.1 in the host namespace, which must see no connection. No other address is touched.
"""

from __future__ import annotations

import os
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodus.errors import PrerequisiteError
from nodus.reconciler.grading import EnvironmentRef, GradingService, GradingSettings, Verdict
from nodus.testing.grader_image import build_grader_image

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "catalog" / "python-functions"
LOADER = "python_functions_env:load_environment"
FUNCTION = "normalize_whitespace"  # test split, index 0 (see the environment's fixture cases)
GOLD = f"```python\ndef {FUNCTION}(s):\n    return ' '.join(s.split())\n```"
TIMEOUT_S = 5  # python-functions' own limit per run; the host allows its task timeout on top

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="sandboxes with a dropped uid need root")


def _code(body: str) -> str:
    return f"```python\nimport os, sys, glob, socket, importlib.util\n\ndef {FUNCTION}(s):\n{body}\n```"


# Reads the hidden tests wherever they could be and answers from them: Correct only if the answers leak.
# Where process-mode graders stage environment files in these tests: every pytest temporary folder. (Not all of
# /tmp: walking whatever else a machine keeps there, whole virtual environments included, can take longer than
# the run's 5 s limit, and the test would measure the machine instead of the sandbox.)
PYTEST_TEMP = os.path.join(tempfile.gettempdir(), "pytest-of-*", "**", "")
CHEAT = _code(
    f"""    places = ['/opt/environment', {str(PACKAGE)!r}] + glob.glob({PYTEST_TEMP!r}, recursive=True)
    for place in places:
        path = os.path.join(place, 'python_functions_tasks.py')
        try:
            spec = importlib.util.spec_from_file_location('stolen', path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        except Exception:
            continue
        for task in module.TEST + module.TRAIN:
            for call, expected in zip(task['calls'], task['expected']):
                if call == [s]:
                    return expected
    return 'no answers'"""
)


def _hostile(port: int) -> dict[str, str]:
    return {
        "read the answers": CHEAT,
        "connect to the host": _code(
            f"""    try:
        socket.create_connection(('127.0.0.1', {port}), timeout=2).sendall(b'leak')
    except OSError:
        pass
    return 'tried'"""
        ),
        "fork bomb": _code(
            "    while True:\n        try:\n            os.fork()\n        except OSError:\n            pass"
        ),
        "infinite loop": _code("    while True:\n        pass"),
        "1 GB allocation": _code("    block = bytearray(1024 ** 3)\n    return str(len(block))"),
        "100 MB of output": _code("    sys.stdout.write('x' * (100 * 1024 * 1024))\n    return s"),
    }


@pytest.fixture
def listener() -> Iterator[tuple[int, list[bytes]]]:
    """A TCP listener on 127.0.0.1 in the host namespace; what it receives is recorded."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)
    received: list[bytes] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            with conn:
                received.append(conn.recv(100) or b"<connected>")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1], received
    stop.set()
    thread.join(timeout=2)
    server.close()


def _environment(mode: str, tmp_path: Path) -> EnvironmentRef:
    if mode == "process":
        return EnvironmentRef("python-functions", "1.0.0", paths=(PACKAGE,), loader=LOADER)
    try:
        image = build_grader_image(
            PACKAGE,
            name="python-functions",
            version="1.0.0",
            loader=LOADER,
            repository="localhost/nodus-hostile-test",
            workdir=tmp_path,
        )
    except PrerequisiteError as exc:
        pytest.skip(f"{exc.message} ({exc.hint})")
    return EnvironmentRef("python-functions", "1.0.0", image=image)


@pytest.mark.parametrize("mode", ["process", pytest.param("container", marks=pytest.mark.podman)])
def test_hostile_completions_get_verdicts_and_leak_nothing(
    mode: str, tmp_path: Path, listener: tuple[int, list[bytes]]
) -> None:
    port, received = listener
    settings = GradingSettings(mode=mode, max_parallel=1, task_timeout_s=20, stage_dir=tmp_path / "stage")  # type: ignore[arg-type]
    with GradingService(settings) as service:
        env = _environment(mode, tmp_path)
        task = next(t for t in service.tasks(env, "test", seed=0) if t["metadata"]["function"] == FUNCTION)
        hostile = _hostile(port)
        names = [*hostile, "gold answer afterwards"]
        completions = [*hostile.values(), GOLD]
        started = time.monotonic()
        verdicts: list[Verdict] = []
        for completion in completions:  # one at a time: each must come back within its own bound
            before = time.monotonic()
            verdicts += service.grade("hostile", env, [{"taskId": task["taskId"], "completion": completion}])
            assert time.monotonic() - before < TIMEOUT_S + 10, f"{names[len(verdicts) - 1]} took too long"
        elapsed = time.monotonic() - started

    outcome = {name: v.verdict for name, v in zip(names, verdicts, strict=True)}
    assert outcome == {**dict.fromkeys(hostile, "Incorrect"), "gold answer afterwards": "Correct"}, outcome
    assert received == [], "the sandbox reached a listener in the host namespace"
    for name, verdict in zip(names, verdicts, strict=True):
        evidence = verdict.evidence
        assert evidence["durationMs"] > 0 and len(evidence["outputSha256"]) == 64, name
        assert evidence["process"]["mode"] == mode, name
        execution = evidence["sandbox"]["execution"]
        assert execution["isolation"] == "uid", (name, execution)
        assert "no answers" not in str(evidence) and "expected" not in str(evidence["sandbox"]), name
    statuses = {name: v.evidence["sandbox"]["execution"]["status"] for name, v in zip(names, verdicts, strict=True)}
    assert statuses["fork bomb"] == "timeout" and statuses["infinite loop"] == "timeout"
    assert statuses["100 MB of output"] == "killed"
    assert statuses["read the answers"] == "ok"  # it ran, found nothing it could read, answered wrong
    # One grader served every line: nothing hostile made the host restart it.
    assert {v.evidence["process"]["start"] for v in verdicts} == {1}
    assert elapsed < 6 * (TIMEOUT_S + 10)
