"""The transformers backend: this package's own model server, for CPU hosts (it runs on CUDA as well).

Who uses it: the InferenceEndpoint controller (or its executor) to start a model server where vLLM is not
installed: `TransformersBackend.command` is the command line of `python -m nodus.runtimes.serving` for a
`ServeSpec`, `wait_ready` its readiness check. This module imports no torch, so the controller and the CLI can use
it; the server process itself runs `transformers_engine.TransformersEngine` (model and adapters loaded with
transformers and PEFT, request batching in `batching`).
"""

from __future__ import annotations

import subprocess
import sys

from nodus.runtimes.serving import readiness
from nodus.runtimes.serving.backend import API_KEY_ENV, LaunchCommand, ServeSpec
from nodus.runtimes.serving.model_folder import check_model, check_names, read_adapter


class TransformersBackend:
    """Starts this package's server (`python -m nodus.runtimes.serving`) with the interpreter running nodus."""

    name = "transformers"

    def __init__(self, python: str | None = None, *, max_batch_size: int | None = None) -> None:
        self.python = python or sys.executable
        self.max_batch_size = max_batch_size

    def command(self, spec: ServeSpec, *, api_key: str | None = None) -> LaunchCommand:
        check_model(spec.model)
        check_names(spec.served_name, spec.adapters)
        for adapter in spec.adapters:
            read_adapter(adapter)
        argv = [self.python, "-m", "nodus.runtimes.serving", "--model", str(spec.model), "--name", spec.served_name]
        for adapter in spec.adapters:
            argv += ["--adapter", f"{adapter.name}={adapter.path}"]
        if spec.embeddings:
            argv.append("--embeddings")
        if spec.listen.uds is not None:
            argv += ["--uds", str(spec.listen.uds)]
        else:
            argv += ["--host", spec.listen.host, "--port", str(spec.listen.port)]
        if spec.max_model_len is not None:
            argv += ["--max-model-len", str(spec.max_model_len)]
        if self.max_batch_size is not None:
            argv += ["--max-batch-size", str(self.max_batch_size)]
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
