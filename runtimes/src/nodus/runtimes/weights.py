"""Which weights a run trains (Full, LoRA, QLoRA) and loading the model, the teacher and the tokenizer for it.

Who calls it: `finetune.run` (the method and its refusals, before any data or model is read) and the runtimes'
`load_model` hooks. The method follows the same rule as the planner's presets
(`nodus.reconciler.pricing.estimate.method_of`), so a run trains what its preset was priced for: a `lora` block
is LoRA, with `quantization: 4bit` (beside the block or in it) QLoRA; no block is full fine-tuning, which writes
`model/` instead of `adapter/`. Quantized weights (4bit or 8bit, through bitsandbytes) need a CUDA GPU; where there
is none, or no bitsandbytes, the run is refused at the start in one line naming the parameter.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodus.runtimes.refusal import Refusal

QUANTIZATIONS = ("None", "8bit", "4bit")


@dataclass(frozen=True)
class LoRA:
    r: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: Any = "all-linear"

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> LoRA:
        return cls(
            r=int(raw.get("r", cls.r)),
            alpha=int(raw.get("alpha", cls.alpha)),
            dropout=float(raw.get("dropout", cls.dropout)),
            target_modules=raw.get("targetModules", cls.target_modules),
        )


@dataclass(frozen=True)
class Weights:
    """How a run trains: `method` Full, LoRA or QLoRA; `quantization` of the frozen base (None, 8bit, 4bit)."""

    method: str = "Full"
    quantization: str = "None"
    lora: LoRA | None = None

    @classmethod
    def from_parameters(cls, raw: dict[str, Any]) -> Weights:
        block = raw.get("lora")
        quantization = raw.get("quantization")
        where = "spec.parameters.quantization"
        if isinstance(block, dict) and block.get("quantization") is not None:
            quantization, where = block["quantization"], "spec.parameters.lora.quantization"
        quantization = "None" if quantization in (None, False, "") else str(quantization)
        if quantization not in QUANTIZATIONS:
            raise Refusal(f"{where}: {quantization!r} is not one of {', '.join(QUANTIZATIONS)}")
        if not isinstance(block, dict):
            if quantization != "None":
                raise Refusal(
                    f"{where}: {quantization} weights are frozen, so only a LoRA adapter can train on them; "
                    "add a lora block (QLoRA) or leave quantization out (full fine-tuning)"
                )
            return cls()
        method = "QLoRA" if quantization == "4bit" else "LoRA"
        return cls(method=method, quantization=quantization, lora=LoRA.from_json(block))

    @property
    def folder(self) -> str:
        """Where the trained weights go in the outputs: the adapter, or the whole model."""
        return "model" if self.lora is None else "adapter"


def check_quantization(weights: Weights) -> None:
    """Refuse quantized weights where they cannot load: no CUDA device, or no bitsandbytes."""
    if weights.quantization == "None":
        return
    import torch

    what = f"spec.parameters.quantization: {weights.quantization}" + (" (QLoRA)" if weights.method == "QLoRA" else "")
    if not torch.cuda.is_available():
        raise Refusal(
            f"{what} needs a CUDA GPU and this host has none (torch {torch.__version__}); "
            "run it on a GPU preset, or leave quantization out to train LoRA on full-precision weights"
        )
    if importlib.util.find_spec("bitsandbytes") is None:
        raise Refusal(f"{what} needs bitsandbytes, which is not installed here (pip install bitsandbytes)")


def dtype() -> Any:
    """bf16 where the GPU has it, else fp32 (CPU runs, and GPUs without bf16, train in full precision)."""
    import torch

    return torch.bfloat16 if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else torch.float32


def bf16() -> bool:
    import torch

    return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())


def quantization_config(weights: Weights) -> Any:
    if weights.quantization == "None":
        return None
    import torch
    from transformers import BitsAndBytesConfig

    if weights.quantization == "8bit":
        return BitsAndBytesConfig(load_in_8bit=True)  # type: ignore[no-untyped-call, unused-ignore]
    return BitsAndBytesConfig(  # type: ignore[no-untyped-call, unused-ignore]
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=dtype() if bf16() else torch.float16,
    )


def load_tokenizer(folder: Path, *, padding_side: str = "right") -> Any:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = padding_side
    return tokenizer


def _placement(weights: Weights) -> dict[str, Any]:
    import torch

    kwargs: dict[str, Any] = {"dtype": dtype()}
    config = quantization_config(weights)
    if config is not None:
        kwargs["quantization_config"] = config
        kwargs["device_map"] = {"": torch.cuda.current_device()}
    return kwargs


def load_causal_lm(folder: Path, weights: Weights, *, scratch: bool = False, seed: int = 0) -> Any:
    """The model to train; `scratch`: its architecture only, with fresh weights drawn from `seed`."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    if scratch:
        torch.manual_seed(seed)
        config = AutoConfig.from_pretrained(str(folder))
        fresh: Any = AutoModelForCausalLM.from_config(config, dtype=dtype())  # type: ignore[no-untyped-call, unused-ignore]
        return fresh
    model: Any = AutoModelForCausalLM.from_pretrained(str(folder), **_placement(weights))
    return model


def load_reward_model(folder: Path, weights: Weights, tokenizer: Any) -> Any:
    """The model with a one-output score head in place of its language-model head (fresh, from the seed set
    by the caller), for a reward model."""
    from transformers import AutoModelForSequenceClassification

    model: Any = AutoModelForSequenceClassification.from_pretrained(str(folder), num_labels=1, **_placement(weights))
    # The score is read at the last token that is not padding, which the model finds by the pad id.
    model.config.pad_token_id = tokenizer.pad_token_id
    return model


def load_teacher(folder: Path) -> Any:
    """The teacher, frozen, in the training dtype (never quantized: its distributions are the target)."""
    from transformers import AutoModelForCausalLM

    teacher: Any = AutoModelForCausalLM.from_pretrained(str(folder), dtype=dtype())
    teacher.eval()
    for parameter in teacher.parameters():
        parameter.requires_grad_(False)
    return teacher


def lora_config(weights: Weights, task_type: str) -> Any:
    """PEFT's LoraConfig for the run, or None for full fine-tuning."""
    if weights.lora is None:
        return None
    from peft import LoraConfig

    return LoraConfig(
        r=weights.lora.r,
        lora_alpha=weights.lora.alpha,
        lora_dropout=weights.lora.dropout,
        target_modules=weights.lora.target_modules,
        task_type=task_type,
    )
