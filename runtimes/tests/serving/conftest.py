"""Fixtures of the model server's tests: the tiny model's folder, a LoRA adapter made here, and a real server.

The adapter is PEFT LoRA over the tiny model with random (non-zero) A and B, so it changes the model's answers.
`server_process` is a real `python -m nodus.runtimes.serving` process (the transformers backend's own command line)
on a free 127.0.0.1 port, serving the base as `tiny` and the adapter as `rev`, with embeddings; it is stopped by
its pid (`stop_process`). `server` is a plain HTTP client of it (`nodus.runtimes.serving.client`).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from nodus.runtimes.serving.backend import AdapterSpec, Listen, ServeSpec
from nodus.runtimes.serving.client import ServingClient
from nodus.runtimes.serving.transformers_backend import TransformersBackend


@pytest.fixture(scope="session")
def model_dir(tiny_model: tuple[str, str]) -> Path:
    cache, revision = tiny_model
    return Path(cache) / "models--nodus--tiny-qwen3" / "snapshots" / revision


@pytest.fixture(scope="session")
def adapter_dir(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    folder = tmp_path_factory.mktemp("adapter") / "rev"
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    # init_lora_weights=False draws B at random too (PEFT's default starts B at zero: no change to the answers).
    config = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    get_peft_model(model, config).save_pretrained(str(folder))
    return folder


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM by pid, then SIGKILL if it will not go (a test failing midway must not leave a server behind)."""
    if process.poll() is None:
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


@pytest.fixture(scope="session")
def stop_process() -> Callable[[subprocess.Popen[bytes]], None]:
    return stop


@pytest.fixture(scope="module")
def server_spec(model_dir: Path, adapter_dir: Path) -> ServeSpec:
    return ServeSpec(
        model=model_dir,
        served_name="tiny",
        listen=Listen(host="127.0.0.1", port=free_port()),
        adapters=(AdapterSpec("rev", adapter_dir),),
        embeddings=True,
    )


@pytest.fixture(scope="module")
def server_process(
    server_spec: ServeSpec, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[subprocess.Popen[bytes]]:
    backend = TransformersBackend()
    command = backend.command(server_spec)
    log = tmp_path_factory.mktemp("server") / "stderr.log"
    with log.open("wb") as stderr:
        process = subprocess.Popen(
            command.argv, env={**os.environ, **command.env}, stdout=subprocess.PIPE, stderr=stderr
        )
    try:
        backend.wait_ready(server_spec, timeout=120, process=process)
        yield process
    finally:
        stop(process)
    assert "Traceback" not in log.read_text(), log.read_text()


@pytest.fixture(scope="module")
def server(server_spec: ServeSpec, server_process: subprocess.Popen[bytes]) -> ServingClient:
    return ServingClient(server_spec.listen)
