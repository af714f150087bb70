"""The generation seam: prompts in, replies out, from transformers `generate` (CPU, any host) or vLLM.

Who uses it: `evaluation.run_episodes` (baseline and final evaluation of `grpo_lora`, and the `evaluate`
runtime), and `multiturn.rollout` during multi-turn training. A backend only turns chat messages into reply
texts; grading stays with the platform. A task whose metadata carries `tools` (OpenAI-style function schemas)
has them rendered by the chat template's `tools=` argument (`tools_of`), one list per conversation. vLLM is in
the optional extra `nodus-runtimes[cuda]` (`make setup EXTRA=cuda`), for CUDA hosts; `make_generator("auto")`
takes it where it imports and a GPU is present, else transformers.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

Messages = list[dict[str, str]]
Tools = list[dict[str, Any]] | None
"""The tools a conversation offers (OpenAI-style function schemas), or None."""


@dataclass(frozen=True)
class Sampling:
    max_tokens: int = 256
    greedy: bool = True
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0


class Generator(Protocol):
    name: str

    def generate(
        self, conversations: Sequence[Messages], sampling: Sampling, tools: Sequence[Tools] | None = None
    ) -> list[str]:
        """One reply per conversation; `tools[i]` (when given) is what conversation i offers the model."""
        ...


def as_messages(prompt: Any) -> Messages:
    """A task prompt (a string or a list of {role, content}) as chat messages."""
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    return [{"role": str(m["role"]), "content": str(m["content"])} for m in prompt]


def tools_of(task: Any) -> Tools:
    """The tools a task offers: its `metadata.tools` when that is a non-empty list of schemas, else None."""
    tools = ((task or {}).get("metadata") or {}).get("tools") if isinstance(task, dict) else None
    if isinstance(tools, list) and tools and all(isinstance(tool, dict) for tool in tools):
        return tools
    return None


def next_message(verdict: Any) -> dict[str, str] | None:
    """The environment's next message of a multi-turn verdict as a chat message: a tool's result when the
    grader says `nextRole: tool`, else the user's turn; None when there is none."""
    message = verdict.get("next")
    if message is None:
        return None
    return {"role": "tool" if verdict.get("nextRole") == "tool" else "user", "content": str(message)}


class TransformersGenerator:
    """Batched, left-padded `model.generate`; thinking is switched off in the chat template where it has one."""

    name = "transformers"

    def __init__(self, model: Any, tokenizer: Any, *, batch_size: int = 32) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size

    def render(self, conversation: Messages, tools: Tools = None) -> str:
        return str(
            self.tokenizer.apply_chat_template(
                conversation, tools=tools, tokenize=False, add_generation_prompt=True, enable_thinking=False
            )
        )

    def generate(
        self, conversations: Sequence[Messages], sampling: Sampling, tools: Sequence[Tools] | None = None
    ) -> list[str]:
        offered = list(tools) if tools is not None else [None] * len(conversations)
        import torch

        tokenizer = self.tokenizer
        side, tokenizer.padding_side = tokenizer.padding_side, "left"
        was_training = self.model.training
        self.model.eval()
        replies: list[str] = []
        try:
            with torch.no_grad():
                for start in range(0, len(conversations), self.batch_size):
                    end = start + self.batch_size
                    texts = [
                        self.render(c, t) for c, t in zip(conversations[start:end], offered[start:end], strict=True)
                    ]
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

    def generate(
        self, conversations: Sequence[Messages], sampling: Sampling, tools: Sequence[Tools] | None = None
    ) -> list[str]:
        from vllm import SamplingParams

        params = SamplingParams(
            max_tokens=sampling.max_tokens,
            temperature=0.0 if sampling.greedy else sampling.temperature,
            top_p=1.0 if sampling.greedy else sampling.top_p,
            top_k=-1 if sampling.greedy or sampling.top_k <= 0 else sampling.top_k,
        )
        offered = list(tools) if tools is not None else [None] * len(conversations)
        # `LLM.chat` takes one tools list for its whole batch: conversations offering the same tools go together.
        groups: dict[str, list[int]] = {}
        for index, listed in enumerate(offered):
            groups.setdefault(json.dumps(listed, sort_keys=True), []).append(index)
        replies = [""] * len(conversations)
        for indexes in groups.values():
            batch = [list(conversations[i]) for i in indexes]
            outputs = self.llm.chat(batch, params, use_tqdm=False, tools=offered[indexes[0]])
            for i, output in zip(indexes, outputs, strict=True):
                replies[i] = output.outputs[0].text
        return replies


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
