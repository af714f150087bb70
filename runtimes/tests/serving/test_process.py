"""The server process's life: ready on a Unix socket with an API key, cut streams on SIGTERM, one-line refusals.

The server here is started the way the InferenceEndpoint controller starts it: `TransformersBackend.command` for a
`ServeSpec`, the key in the environment, `wait_ready` over the socket; it is stopped by its pid.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import nodus.runtimes.serving.__main__ as serving_main
from nodus.runtimes.serving.__main__ import main
from nodus.runtimes.serving.backend import Listen, ServeSpec, ServingError
from nodus.runtimes.serving.client import ServingClient, UnixHTTPConnection
from nodus.runtimes.serving.server import bind
from nodus.runtimes.serving.transformers_backend import TransformersBackend

pytestmark = pytest.mark.slow
KEY = "sk-test-only"


def test_a_socket_server_with_a_key_cuts_its_streams_on_sigterm(
    model_dir: Path, tmp_path: Path, stop_process: Callable[[subprocess.Popen[bytes]], None]
) -> None:
    socket_path = tmp_path / "serve.sock"
    spec = ServeSpec(model=model_dir, served_name="tiny", listen=Listen(uds=socket_path))
    backend = TransformersBackend()
    command = backend.command(spec, api_key=KEY)
    assert KEY not in command.argv
    stderr_path = tmp_path / "stderr.log"
    with stderr_path.open("wb") as stderr:
        process = subprocess.Popen(
            command.argv, env={**os.environ, **command.env}, stdout=subprocess.PIPE, stderr=stderr
        )
    try:
        backend.wait_ready(spec, timeout=120, process=process, api_key=KEY)
        assert process.stdout is not None
        ready = json.loads(process.stdout.readline())
        assert (ready["uds"], ready["pid"]) == (str(socket_path), process.pid)
        assert oct(socket_path.stat().st_mode & 0o777) == "0o600"

        status, body = ServingClient(spec.listen).post("/v1/completions", {"model": "tiny", "prompt": "a"})
        assert (status, body["error"]["code"]) == (401, "Unauthorized")
        status, body = ServingClient(spec.listen, api_key=KEY).post("/v1/embeddings", {"model": "tiny", "input": "a"})
        assert (status, body["error"]["code"]) == (400, "Unsupported")
        assert "--embeddings" in body["error"]["message"]

        with pytest.raises(ServingError, match="another server is listening there"):
            bind(Listen(uds=socket_path))

        conn = UnixHTTPConnection(str(socket_path), timeout=60)
        body = {"model": "tiny", "prompt": "apple", "max_tokens": 480, "ignore_eos": True, "stream": True}
        conn.request(
            "POST", "/v1/completions", body=json.dumps(body).encode(), headers={"Authorization": f"Bearer {KEY}"}
        )
        response = conn.getresponse()
        assert response.status == 200
        assert response.readline().startswith(b"data: ")
        os.kill(process.pid, signal.SIGTERM)
        lines = [line for line in response.read().decode().splitlines() if line.startswith("data: ")]
        conn.close()
        assert lines, "the stream ended without a last event"
        assert lines[-1] != "data: [DONE]"  # a cut stream is not a complete answer
        assert json.loads(lines[-1][len("data: ") :])["error"]["code"] == "Unavailable"
        assert process.wait(timeout=30) == 0
    finally:
        stop_process(process)
    log = stderr_path.read_text()
    assert "Traceback" not in log, log
    assert log.strip().splitlines()[-1] == "nodus serving: stopped by SIGTERM"
    assert not socket_path.exists()


def test_bind_never_replaces_a_file_that_is_not_a_socket(tmp_path: Path) -> None:
    precious = tmp_path / "notes.txt"
    precious.write_text("keep me")
    with pytest.raises(ServingError, match=r"--uds .*notes.txt: exists and is not a socket; not replaced"):
        bind(Listen(uds=precious))
    assert precious.read_text() == "keep me"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--model", "/nonexistent/model", "--port", "0"], "nodus serving: --model /nonexistent/model: no such folder"),
        (
            ["--model", ".", "--host", "0.0.0.0", "--port", "0"],
            "nodus serving: --host 0.0.0.0: the model server binds only",
        ),
        (
            ["--model", ".", "--port", "0", "--adapter", "nameless"],
            "nodus serving: --adapter nameless: expected NAME=PATH",
        ),
    ],
)
def test_bad_input_exits_2_with_one_line(
    arguments: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(arguments) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith(message)


def test_a_port_in_use_is_refused_before_the_model_loads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as other_server:
        other_server.bind(("127.0.0.1", 0))
        other_server.listen()
        port = other_server.getsockname()[1]
        # The model folder is bad too: the port is claimed first, so the port is what the line names.
        assert main(["--model", str(tmp_path), "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"nodus serving: --port {port}: cannot bind 127.0.0.1:{port}: Address already in use"


def test_a_model_that_fails_to_load_releases_its_socket(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "config.json").write_text("{}")  # a folder with a config and nothing else
    socket_path = tmp_path / "s.sock"
    assert main(["--model", str(tmp_path), "--uds", str(socket_path)]) == 2
    assert capsys.readouterr().err.startswith(f"nodus serving: --model {tmp_path}: cannot load:")
    assert not socket_path.exists()


def test_sigterm_while_the_model_loads_releases_the_socket_and_exits_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    class SlowLoad:  # a model load long enough for a SIGTERM to arrive in the middle of it
        def __init__(self, *args: object) -> None:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(30)

    monkeypatch.setattr(serving_main, "TransformersEngine", SlowLoad)
    (tmp_path / "config.json").write_text("{}")
    socket_path = tmp_path / "s.sock"
    before = signal.getsignal(signal.SIGTERM)
    started = time.monotonic()
    assert serving_main.main(["--model", str(tmp_path), "--uds", str(socket_path)]) == 0
    assert time.monotonic() - started < 10
    assert capsys.readouterr().err == "nodus serving: stopped by SIGTERM while loading the model\n"
    assert not socket_path.exists()
    assert signal.getsignal(signal.SIGTERM) == before  # the handlers of before are back
