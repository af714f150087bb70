"""The generation seam: prompts in, replies out, from transformers `generate` (CPU, any host) or vLLM.

Who uses it: `evaluation.run_episodes` (baseline and final evaluation of `grpo_lora`, and the `evaluate`
runtime), and `multiturn.rollout` during multi-turn training. A backend only turns chat messages into reply
texts; grading stays with the platform. vLLM is in the optional extra `nodus-runtimes[cuda]` (`make setup EXTRA=cuda`),
for CUDA hosts; `make_generator("auto")` takes it where it imports and a GPU is present, else transformers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

Messages = list[dict[str, str]]


@dataclass(frozen=True)
class Sampling:
    max_tokens: int = 256
    greedy: bool = True
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0


class Generator(Protocol):
    name: str

    def generate(self, conversations: Sequence[Messages], sampling: Sampling) -> list[str]: ...


def as_messages(prompt: Any) -> Messages:
    """A task prompt (a string or a list of {role, content}) as chat messages."""
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    return [{"role": str(m["role"]), "content": str(m["content"])} for m in prompt]


class TransformersGenerator:
    """Batched, left-padded `model.generate`; thinking is switched off in the chat template where it has one."""

    name = "transformers"

    def __init__(self, model: Any, tokenizer: Any, *, batch_size: int = 32) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size

    def render(self, conversation: Messages) -> str:
        return str(
            self.tokenizer.apply_chat_template(
                conversation, tokenize=False, add_generation_prompt=True, enable_thinking=False
            )
        )

    def generate(self, conversations: Sequence[Messages], sampling: Sampling) -> list[str]:
        import torch

        tokenizer = self.tokenizer
        side, tokenizer.padding_side = tokenizer.padding_side, "left"
        was_training = self.model.training
        self.model.eval()
        replies: list[str] = []
        try:
            with torch.no_grad():
                for start in range(0, len(conversations), self.batch_size):
                    texts = [self.render(c) for c in conversations[start : start + self.batch_size]]
                    encoded = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
                    encoded = {key: value.to(self.model.device) for key, value in encoded.items()}
                    options: dict[str, Any] = {"max_new_tokens": sampling.max_tokens, "do_sample": not sampling.greedy}
                    if not sampling.greedy:
                        options.update(temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k)
                    out = self.model.generate(**encoded, **options, pad_token_id=tokenizer.pad_token_id)
                    new = out[:, encoded["input_ids"].shape[1] :]
                    replies.extend(tokenizer.batch_decode(new, skip_special_tokens=True))
        finally:
            tokenizer.padding_side = side
            if was_training:
                self.model.train()
        return replies


class VLLMGenerator:
    """vLLM's offline engine on a GPU host (the model folder, with the LoRA adapter merged in when given)."""

    name = "vllm"

    def __init__(self, model_path: str, *, max_model_len: int = 4096) -> None:
        from vllm import LLM  # optional extra: only on GPU hosts

        self.llm = LLM(model=model_path, max_model_len=max_model_len)

    def generate(self, conversations: Sequence[Messages], sampling: Sampling) -> list[str]:
        from vllm import SamplingParams

        params = SamplingParams(
            max_tokens=sampling.max_tokens,
            temperature=0.0 if sampling.greedy else sampling.temperature,
            top_p=1.0 if sampling.greedy else sampling.top_p,
            top_k=-1 if sampling.greedy or sampling.top_k <= 0 else sampling.top_k,
        )
        outputs = self.llm.chat([list(c) for c in conversations], params, use_tqdm=False)
        return [output.outputs[0].text for output in outputs]


def vllm_available() -> bool:
    try:
        import torch
        import vllm  # noqa: F401
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def make_generator(backend: str, model: Any, tokenizer: Any, model_path: str) -> Generator:
    """`transformers`, `vllm`, or `auto` (vLLM where it can run, transformers elsewhere)."""
    if backend == "vllm" or (backend == "auto" and vllm_available()):
        if not vllm_available():
            raise SystemExit("generation backend vllm: vLLM is not installed or no GPU is present")
        return VLLMGenerator(model_path)
    return TransformersGenerator(model, tokenizer)
