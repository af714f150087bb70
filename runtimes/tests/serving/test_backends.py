"""The serving seam: the command lines both backends start, the checks before them, and the readiness check.

vLLM needs CUDA and does not run here: its command line is checked flag by flag against vLLM's CLI reference
(see nodus.runtimes.serving.vllm_backend), and its readiness check runs against a stand-in HTTP server on
127.0.0.1 that answers as `vllm serve` does (nothing listening while the engine loads, then /health 200 and
/v1/models with the base and each adapter).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from nodus.runtimes.serving.backend import AdapterSpec, Listen, ServeSpec, ServingError
from nodus.runtimes.serving.model_folder import parse_adapter, read_adapter
from nodus.runtimes.serving.readiness import wait_ready
from nodus.runtimes.serving.transformers_backend import TransformersBackend
from nodus.runtimes.serving.vllm_backend import VLLMBackend, max_lora_rank


def make_model(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen3", "max_position_embeddings": 512}))
    return folder


def make_adapter(folder: Path, rank: int, **extra: object) -> Path:
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": rank, **extra}))
    (folder / "adapter_model.safetensors").write_bytes(b"weights")
    return folder


@pytest.fixture
def spec(tmp_path: Path) -> ServeSpec:
    return ServeSpec(
        model=make_model(tmp_path / "base"),
        served_name="acme/base",
        listen=Listen(host="127.0.0.1", port=8123),
        adapters=(
            AdapterSpec("support", make_adapter(tmp_path / "support", 12)),
            AdapterSpec("sql", make_adapter(tmp_path / "sql", 8, rank_pattern={"q_proj": 24})),
        ),
    )


def test_vllm_command_serves_base_and_adapters_on_loopback(spec: ServeSpec) -> None:
    command = VLLMBackend(executable="/opt/vllm/bin/vllm").command(spec, api_key="k-123")
    argv = command.argv
    assert argv[:5] == ["/opt/vllm/bin/vllm", "serve", str(spec.model), "--served-model-name", "acme/base"]
    assert argv[argv.index("--host") + 1] == "127.0.0.1"  # vLLM's default is every interface
    assert argv[argv.index("--port") + 1] == "8123"
    assert "--enable-lora" in argv
    assert argv[argv.index("--max-loras") + 1] == "2"
    assert argv[argv.index("--max-lora-rank") + 1] == "32"  # the largest rank (24, in rank_pattern) rounded up
    modules = argv[argv.index("--lora-modules") + 1 : argv.index("--lora-modules") + 3]
    assert [json.loads(m) for m in modules] == [
        {"name": "support", "path": str(spec.adapters[0].path), "base_model_name": "acme/base"},
        {"name": "sql", "path": str(spec.adapters[1].path), "base_model_name": "acme/base"},
    ]
    assert "k-123" not in " ".join(argv)
    assert command.env == {"VLLM_API_KEY": "k-123"}


def test_vllm_command_on_a_unix_socket_and_for_embeddings(spec: ServeSpec, tmp_path: Path) -> None:
    plain = ServeSpec(model=spec.model, served_name="embed", listen=Listen(uds=tmp_path / "m.sock"), embeddings=True)
    argv = VLLMBackend(executable="vllm").command(plain).argv
    assert argv[argv.index("--uds") + 1] == str(tmp_path / "m.sock")
    assert "--host" not in argv and "--enable-lora" not in argv
    assert argv[argv.index("--runner") + 1] == "pooling"
    assert json.loads(argv[argv.index("--pooler-config") + 1]) == {"pooling_type": "MEAN"}
    with pytest.raises(ServingError, match="--embeddings: vLLM serves embeddings from its pooling runner"):
        VLLMBackend(executable="vllm").command(ServeSpec(**{**spec.__dict__, "embeddings": True}))


def test_vllm_lora_ranks_round_up_to_what_vllm_accepts() -> None:
    assert [max_lora_rank([r]) for r in (1, 2, 8, 9, 64, 300, 512)] == [1, 8, 8, 16, 64, 320, 512]
    with pytest.raises(ServingError, match="above vLLM's largest"):
        max_lora_rank([1024])


def test_vllm_missing_is_a_prerequisite_error(spec: ServeSpec) -> None:
    # This environment has no vllm beside its interpreter (no CUDA here): the one line says where it looked.
    with pytest.raises(ServingError, match=r"vllm: not installed beside .*python.* \(install vLLM on a CUDA host"):
        VLLMBackend().command(spec)


def test_transformers_command_runs_this_package(spec: ServeSpec) -> None:
    command = TransformersBackend(python="/venv/bin/python", max_batch_size=8).command(spec, api_key="k")
    assert command.argv == [
        "/venv/bin/python", "-m", "nodus.runtimes.serving", "--model", str(spec.model), "--name", "acme/base",
        "--adapter", f"support={spec.adapters[0].path}", "--adapter", f"sql={spec.adapters[1].path}",
        "--host", "127.0.0.1", "--port", "8123", "--max-batch-size", "8",
    ]  # fmt: skip
    assert command.env == {"NODUS_SERVING_API_KEY": "k"}


def test_bad_folders_fail_in_one_line_naming_flag_and_file(tmp_path: Path, spec: ServeSpec) -> None:
    backend = VLLMBackend(executable="vllm")
    with pytest.raises(ServingError, match=r"^--model .*/nope: no such folder"):
        backend.command(ServeSpec(**{**spec.__dict__, "model": tmp_path / "nope"}))
    bare = tmp_path / "bare"
    bare.mkdir()
    with pytest.raises(ServingError, match=r"^--model .*/bare: .*/bare/config.json not found$"):
        backend.command(ServeSpec(**{**spec.__dict__, "model": bare}))
    no_config = AdapterSpec("x", bare)
    with pytest.raises(ServingError, match=r"^--adapter x=.*/bare: .*adapter_config.json not found$"):
        read_adapter(no_config)
    wrong = AdapterSpec("y", make_adapter(tmp_path / "ia3", 4, peft_type="IA3"))
    with pytest.raises(ServingError, match="peft_type is 'IA3'; only LORA is served"):
        read_adapter(wrong)
    twice = ServeSpec(
        **{**spec.__dict__, "adapters": (spec.adapters[0], AdapterSpec("support", spec.adapters[1].path))}
    )
    with pytest.raises(ServingError, match="the name 'support' is already served"):
        backend.command(twice)
    with pytest.raises(ServingError, match="expected NAME=PATH"):
        parse_adapter("just-a-path")


def test_only_loopback_or_a_socket_unless_it_takes_a_key() -> None:
    with pytest.raises(ServingError, match=r"--host 0.0.0.0: the model server binds only a loopback address"):
        Listen(host="0.0.0.0", port=80)
    # A Ray node's server, which the gateway on another machine calls with the endpoint's key.
    assert Listen(host="10.0.0.7", port=80, keyed=True).url == "http://10.0.0.7:80"
    with pytest.raises(ServingError, match="give exactly one"):
        Listen()
    assert Listen(host="::1", port=9).url == "http://[::1]:9"


class VLLMStandIn(BaseHTTPRequestHandler):
    """Answers as `vllm serve` does once its engine is up."""

    models: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        if self.path == "/health":
            self.send_response(200)
            self.end_headers()
            return
        if self.path == "/v1/models":
            body = json.dumps({"object": "list", "data": [{"id": m, "object": "model"} for m in self.models]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_response(404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def late_server() -> Iterator[tuple[Listen, threading.Thread]]:
    """A port that nothing listens on for 0.6 s (vLLM loading), then a vLLM-like server."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), VLLMStandIn)
    port = server.server_address[1]
    server.server_close()  # free the port until the "engine" is up

    def start() -> None:
        time.sleep(0.6)
        late = ThreadingHTTPServer(("127.0.0.1", port), VLLMStandIn)
        thread.server = late  # type: ignore[attr-defined]
        late.serve_forever()

    thread = threading.Thread(target=start, daemon=True)
    thread.start()
    yield Listen(host="127.0.0.1", port=port), thread
    for _ in range(50):
        if hasattr(thread, "server"):
            thread.server.shutdown()
            thread.server.server_close()
            break
        time.sleep(0.05)


def test_readiness_waits_for_the_server_and_every_model(late_server: tuple[Listen, threading.Thread]) -> None:
    listen, _ = late_server
    VLLMStandIn.models = ["acme/base", "support"]
    started = time.monotonic()
    wait_ready(listen, ["acme/base", "support"], timeout=10, interval=0.05)
    assert time.monotonic() - started >= 0.5  # it waited through the connection refusals
    with pytest.raises(ServingError, match=r"not ready after 0\.3 s: /v1/models does not list sql"):
        wait_ready(listen, ["acme/base", "sql"], timeout=0.3, interval=0.05)


def test_readiness_stops_when_the_server_process_ends() -> None:
    process = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(3)"])
    process.wait()
    with pytest.raises(ServingError, match="exited with code 3 before it was ready"):
        wait_ready(Listen(host="127.0.0.1", port=9), ["m"], timeout=30, process=process)


def test_the_launch_seam_imports_no_torch() -> None:
    """The controller and the CLI import the backends; torch takes seconds to import and is not theirs to load."""
    code = (
        "import sys\n"
        "import nodus.runtimes.serving.transformers_backend, nodus.runtimes.serving.vllm_backend\n"
        "import nodus.runtimes.serving.client, nodus.runtimes.serving.readiness\n"
        "print(sorted(m for m in ('torch', 'transformers', 'peft') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"
