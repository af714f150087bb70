"""The vLLM backend: the `vllm serve` command line nodus runs on CUDA hosts, and its readiness check.

Who uses it: the InferenceEndpoint controller on hosts where vLLM is installed (`nodus-runtimes[cuda]`). It is not a
Python engine: vLLM's own OpenAI-compatible server is the process, started as

    vllm serve MODEL --served-model-name NAME --host 127.0.0.1 --port P        (or --uds SOCKET)
        --enable-lora --max-loras N --max-cpu-loras N --max-lora-rank R
        --lora-modules '{"name": ..., "path": ..., "base_model_name": NAME}' ...
        [--max-model-len L] [--runner pooling --convert embed --pooler-config '{"pooling_type": "MEAN"}']

Facts this rests on (vLLM's CLI reference and `vllm/entrypoints/openai/cli_args.py`, `vllm/config/lora.py`):
- `--host` defaults to every interface, so nodus always passes 127.0.0.1 (or `--uds`, which makes vLLM ignore
  host and port).
- `--lora-modules` takes `name=path` or a JSON object with `name`, `path` and `base_model_name`; the JSON form
  is used so an adapter is listed with its base as `parent` in /v1/models, and a path holding `=` or `,` still
  parses.
- `--max-lora-rank` accepts only 1, 8, 16, 32, 64, 128, 256, 320, 512: the adapters' largest rank is rounded up
  to the next of these. `--max-loras` is how many adapters one batch may mix: all of them, so a request for any
  adapter joins the running batch.
- The API key is read from `VLLM_API_KEY` (as `--api-key` would be) so it never shows in `ps`.
- Embeddings need vLLM's pooling runner, which serves no generation: an embeddings spec is an embeddings-only
  server here (mean pooling, normalised, as the transformers server computes them), unlike the transformers
  server, which serves both from one process.
- vLLM's HTTP server starts listening only after the engine has loaded, and answers `/health` 200 and
  `/v1/models` with the base and each adapter once it does: `readiness.wait_ready` polls both.

vLLM needs CUDA and cannot run on the CPU machines nodus is tested on: the command and the readiness check are
unit-tested (the readiness check against a stand-in HTTP server answering as vLLM does), never a real vLLM.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from nodus.runtimes.serving import readiness
from nodus.runtimes.serving.backend import LaunchCommand, ServeSpec, ServingError
from nodus.runtimes.serving.model_folder import check_model, check_names, read_adapter

VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
API_KEY_ENV = "VLLM_API_KEY"
INSTALL_HINT = "install vLLM on a CUDA host: pip install 'nodus-runtimes[cuda]'"


def max_lora_rank(ranks: list[int]) -> int:
    """The smallest --max-lora-rank vLLM accepts that holds every adapter's rank."""
    largest = max(ranks)
    for allowed in VLLM_LORA_RANKS:
        if allowed >= largest:
            return allowed
    raise ServingError(
        f"--adapter: LoRA rank {largest} is above vLLM's largest --max-lora-rank ({VLLM_LORA_RANKS[-1]})"
    )


class VLLMBackend:
    """`vllm serve` on a CUDA host. `executable` is the `vllm` program (default: the one installed beside this
    interpreter, as the `cuda` extra of nodus-runtimes installs it: the same environment as the trainers)."""

    name = "vllm"

    def __init__(self, executable: str | None = None) -> None:
        self.executable = executable

    def program(self) -> str:
        if self.executable is not None:
            return self.executable
        beside = Path(sys.executable).parent / "vllm"
        if not beside.is_file():
            raise ServingError(f"vllm: not installed beside {sys.executable} ({INSTALL_HINT})")
        return str(beside)

    def command(self, spec: ServeSpec, *, api_key: str | None = None) -> LaunchCommand:
        check_model(spec.model)
        check_names(spec.served_name, spec.adapters)
        adapters = [read_adapter(adapter) for adapter in spec.adapters]
        if spec.embeddings and adapters:
            raise ServingError(
                "--embeddings: vLLM serves embeddings from its pooling runner, without generation or LoRA adapters; "
                "serve the adapters from a second server"
            )
        argv = [self.program(), "serve", str(spec.model), "--served-model-name", spec.served_name]
        if spec.listen.uds is not None:
            argv += ["--uds", str(spec.listen.uds)]
        else:
            argv += ["--host", spec.listen.host, "--port", str(spec.listen.port)]
        if adapters:
            count = str(len(adapters))
            argv += ["--enable-lora", "--max-loras", count, "--max-cpu-loras", count]
            argv += ["--max-lora-rank", str(max_lora_rank([adapter.rank for adapter in adapters]))]
            argv.append("--lora-modules")
            argv += [
                json.dumps({"name": a.spec.name, "path": str(a.spec.path), "base_model_name": spec.served_name})
                for a in adapters
            ]
        if spec.max_model_len is not None:
            argv += ["--max-model-len", str(spec.max_model_len)]
        if spec.embeddings:
            argv += [
                "--runner",
                "pooling",
                "--convert",
                "embed",
                "--pooler-config",
                json.dumps({"pooling_type": "MEAN"}),
            ]
        # The response carries X-Request-Id, as this package's server always does: the gateway's request id.
        argv += ["--enable-request-id-headers", "--disable-uvicorn-access-log"]
        return LaunchCommand(argv=argv, env={API_KEY_ENV: api_key} if api_key else {})

    def wait_ready(
        self,
        spec: ServeSpec,
        *,
        timeout: float,
        process: subprocess.Popen[bytes] | None = None,
        api_key: str | None = None,
    ) -> None:
        readiness.wait_ready(spec.listen, spec.model_names(), timeout=timeout, process=process, api_key=api_key)
