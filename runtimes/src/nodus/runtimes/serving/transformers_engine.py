"""The transformers engine: the model server's generation and embeddings, on transformers and PEFT.

Who uses it: `__main__` builds one `TransformersEngine` per server process and hands it to `server` (it is the
`engine.Engine` of the transformers backend, `transformers_backend`). It loads a Hugging Face model folder and any
number of named PEFT LoRA adapters over it; a request names the base (the served name) or an adapter. Generation
goes through `batching.Scheduler` (request batching over a shared KV cache, base and adapter requests in one batch);
embeddings are the mean of the last hidden state over the input's tokens, L2-normalised, computed with the same
model (and the named adapter). CPU hosts run float32; on CUDA the config's dtype.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache
from transformers.utils import logging as transformers_logging_module

from nodus.runtimes.serving.backend import ServeSpec, ServingError
from nodus.runtimes.serving.batching import Scheduler
from nodus.runtimes.serving.engine import EngineError, GenerationRequest, ModelCard, Ticket
from nodus.runtimes.serving.model_folder import check_model, check_names, context_length, read_adapter

transformers_logging: Any = transformers_logging_module
BASE = "__base__"
"""PEFT's name for "no adapter" in a mixed-adapter batch."""
EMBEDDING_BATCH = 16
DEFAULT_CONTEXT = 2048
"""The context window when neither --max-model-len nor the model's config says one."""


@dataclass(frozen=True)
class EngineOptions:
    device: str = "auto"
    """`auto` (CUDA where torch sees a GPU, else CPU), `cpu`, `cuda`, `cuda:N`."""
    max_batch_size: int = 32
    batch_window: float = 0.01


def pick_device(choice: str) -> torch.device:
    if choice == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if choice.startswith("cuda") and not torch.cuda.is_available():
        raise ServingError(f"--device {choice}: torch sees no CUDA device on this host")
    return torch.device(choice)


class TransformersModel:
    """The loaded model, its tokenizer and adapters: the `batching.ModelRunner` of this backend. One lock
    serialises forward passes (the scheduler's and embeddings'), since adapter routing is model state."""

    def __init__(self, spec: ServeSpec, device: torch.device) -> None:
        config = check_model(spec.model)
        check_names(spec.served_name, spec.adapters)
        adapters = [read_adapter(adapter) for adapter in spec.adapters]
        # Loading bars and warnings would go into the server's log as noise; failures still raise.
        transformers_logging.set_verbosity_error()
        transformers_logging.disable_progress_bar()
        self.spec = spec
        self.device = device
        self.lock = threading.Lock()
        try:
            self.tokenizer: Any = AutoTokenizer.from_pretrained(spec.model)
            # CPUs run float32 (half precision is slow or missing there); GPUs take the dtype the config names.
            dtype: Any = "auto" if device.type == "cuda" else torch.float32
            model: Any = AutoModelForCausalLM.from_pretrained(spec.model, dtype=dtype)
        except Exception as error:  # whatever the folder's files make transformers raise: bad input, one line
            raise ServingError(f"--model {spec.model}: cannot load: {one_line(error)}") from None
        model.to(device)
        self.adapter_names = tuple(adapter.spec.name for adapter in adapters)
        for index, adapter in enumerate(adapters):
            try:
                if index == 0:
                    model = PeftModel.from_pretrained(model, str(adapter.spec.path), adapter_name=adapter.spec.name)
                else:
                    model.load_adapter(str(adapter.spec.path), adapter_name=adapter.spec.name)
            except Exception as error:  # as for the model: the adapter folder's content is the cause
                flag = f"--adapter {adapter.spec.name}={adapter.spec.path}"
                raise ServingError(f"{flag}: cannot load over {spec.model}: {one_line(error)}") from None
        model.to(device)
        model.eval()
        self.model = model
        self._routing: str | None = None
        self.max_model_len = spec.max_model_len or context_length(config) or DEFAULT_CONTEXT
        pad = self.tokenizer.pad_token_id
        self.pad_token_id = int(pad if pad is not None else (self.tokenizer.eos_token_id or 0))
        self.eos_token_ids = frozenset(eos_ids(spec.model, self.tokenizer))

    # --- ModelRunner ---------------------------------------------------------------------------------------

    def decode(self, token_ids: list[int]) -> str:
        return str(self.tokenizer.decode(token_ids, skip_special_tokens=True))

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        cache: DynamicCache,
        models: list[str],
    ) -> torch.Tensor:
        with self.lock, torch.no_grad():
            extra = self._route(models)
            output = self.model(
                input_ids=input_ids,
                attention_mask=attention_mask,
                position_ids=position_ids,
                past_key_values=cache,
                use_cache=True,
                logits_to_keep=1,
                **extra,
            )
            logits: torch.Tensor = output.logits[:, -1, :].float()
            return logits

    def _route(self, models: list[str]) -> dict[str, Any]:
        """Put the adapter layers in the state this batch needs; the extra forward arguments, if any. Switching
        walks every module, so it happens only when the batch's adapters change, not at every step."""
        if not self.adapter_names:
            return {}
        names = [BASE if name == self.spec.served_name else name for name in models]
        wanted = names[0] if len(set(names)) == 1 else "mixed"
        if wanted != self._routing:
            if wanted == BASE:
                self.model.base_model.disable_adapter_layers()
            else:
                self.model.base_model.enable_adapter_layers()
                if wanted != "mixed":
                    self.model.set_adapter(wanted, inference_mode=True)
            self._routing = wanted
        return {"adapter_names": names} if wanted == "mixed" else {}

    # --- prompts and embeddings ----------------------------------------------------------------------------

    def chat_prompt(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, template_kwargs: dict[str, Any]
    ) -> list[int]:
        if not getattr(self.tokenizer, "chat_template", None):
            raise EngineError("unsupported", f"{self.spec.served_name} has no chat template: use /v1/completions")
        try:
            text = self.tokenizer.apply_chat_template(
                messages, tools=tools, add_generation_prompt=True, tokenize=False, **template_kwargs
            )
        except Exception as error:  # jinja2's errors (roles out of order, a raise_exception in the template)
            raise EngineError("invalid", f"messages: the chat template refused them: {one_line(error)}") from None
        return list(self.tokenizer(str(text), add_special_tokens=False)["input_ids"])

    def text_prompt(self, prompt: str) -> list[int]:
        return list(self.tokenizer(prompt)["input_ids"])

    def embed(self, model: str, texts: Sequence[str]) -> tuple[list[list[float]], int]:
        encoded = [list(self.tokenizer(text)["input_ids"]) for text in texts]
        for index, ids in enumerate(encoded):
            if not ids:
                raise EngineError("invalid", f"input[{index}]: empty input")
            if len(ids) > self.max_model_len:
                raise EngineError(
                    "invalid", f"input[{index}]: {len(ids)} tokens, over the model's context of {self.max_model_len}"
                )
        vectors: list[list[float]] = []
        for start in range(0, len(encoded), EMBEDDING_BATCH):
            vectors += self._embed_batch(model, encoded[start : start + EMBEDDING_BATCH])
        return vectors, sum(len(ids) for ids in encoded)

    def _embed_batch(self, model: str, batch: list[list[int]]) -> list[list[float]]:
        length = max(len(ids) for ids in batch)
        input_ids = torch.tensor([ids + [self.pad_token_id] * (length - len(ids)) for ids in batch], device=self.device)
        mask = torch.tensor([[1] * len(ids) + [0] * (length - len(ids)) for ids in batch], device=self.device)
        with self.lock, torch.no_grad():
            extra = self._route([model] * len(batch))
            output = self.model(
                input_ids=input_ids,
                attention_mask=mask,
                output_hidden_states=True,
                use_cache=False,
                logits_to_keep=1,
                **extra,
            )
            hidden = output.hidden_states[-1].float()
        weights = mask.unsqueeze(-1).to(hidden.dtype)
        mean = (hidden * weights).sum(dim=1) / weights.sum(dim=1)
        return [[float(x) for x in row] for row in torch.nn.functional.normalize(mean, p=2, dim=-1).cpu().tolist()]

    def default_sampling(self) -> dict[str, float | int]:
        """temperature, top_p and top_k where the model's generation_config.json sets them (vLLM's `auto`)."""
        path = self.spec.model / "generation_config.json"
        try:
            config = json.loads(path.read_text()) if path.is_file() else {}
        except (OSError, ValueError):
            config = {}
        return {
            key: config[key] for key in ("temperature", "top_p", "top_k") if isinstance(config.get(key), int | float)
        }


def eos_ids(model: Path, tokenizer: Any) -> set[int]:
    """The tokens that end a reply: generation_config.json's eos_token_id (an id or a list) and the tokenizer's."""
    ids: set[int] = set()
    path = model / "generation_config.json"
    try:
        value = json.loads(path.read_text()).get("eos_token_id") if path.is_file() else None
    except (OSError, ValueError):
        value = None
    for item in value if isinstance(value, list) else [value]:
        if isinstance(item, int):
            ids.add(item)
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return ids


def one_line(error: BaseException) -> str:
    text = f"{error.__class__.__name__}: {' '.join(str(error).split())}"
    return text[:300] + ("..." if len(text) > 300 else "")


class TransformersEngine:
    """The `engine.Engine` of this backend: a `TransformersModel` driven by a `batching.Scheduler`."""

    backend = "transformers"

    def __init__(self, spec: ServeSpec, options: EngineOptions | None = None) -> None:
        options = options or EngineOptions()
        self.spec = spec
        self.served_name = spec.served_name
        self.embeddings = spec.embeddings
        self.runner = TransformersModel(spec, pick_device(options.device))
        self.max_model_len = self.runner.max_model_len
        self.scheduler = Scheduler(
            self.runner, max_batch_size=options.max_batch_size, batch_window=options.batch_window
        )

    def models(self) -> list[ModelCard]:
        base = ModelCard(self.served_name, str(self.spec.model), None, self.max_model_len)
        return [base] + [
            ModelCard(adapter.name, str(adapter.path), self.served_name, self.max_model_len)
            for adapter in self.spec.adapters
        ]

    def chat_prompt(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, template_kwargs: dict[str, Any]
    ) -> list[int]:
        return self.runner.chat_prompt(messages, tools, template_kwargs)

    def text_prompt(self, prompt: str) -> list[int]:
        return self.runner.text_prompt(prompt)

    def default_sampling(self) -> dict[str, float | int]:
        return self.runner.default_sampling()

    def submit(self, request: GenerationRequest, loop: asyncio.AbstractEventLoop) -> Ticket:
        ticket = Ticket(request, loop)
        self.scheduler.submit(ticket)
        return ticket

    def embed(self, model: str, texts: Sequence[str]) -> tuple[list[list[float]], int]:
        return self.runner.embed(model, texts)

    def stats(self) -> dict[str, Any]:
        return {"backend": self.backend, "device": str(self.runner.device), **self.scheduler.stats()}

    def request_record(self, request_id: str) -> dict[str, Any] | None:
        return self.scheduler.record(request_id)

    def shutdown(self) -> None:
        self.scheduler.shutdown()

    def close(self) -> None:
        self.scheduler.close()
