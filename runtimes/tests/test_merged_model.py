"""`merge_adapters`: a base model with LoRA adapters merged in computes what the base with those adapters computes,
the merged folder is reused by a second call (a resumed attempt) and replaced when its inputs differ. Slow: the tiny
model is built once per session; the merge itself takes a second."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nodus.runtimes.merged_model import MARKER, merge_adapters

pytestmark = pytest.mark.slow


@pytest.fixture
def base(tiny_model: tuple[str, str]) -> Path:
    cache, revision = tiny_model
    return Path(cache) / "models--nodus--tiny-qwen3" / "snapshots" / revision


def adapter(base: Path, folder: Path, seed: int) -> Any:
    """A LoRA adapter over `base` with random (non-zero) B matrices, saved to `folder`; the PEFT model."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32),
        LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False),
    )
    model.save_pretrained(str(folder))
    return model


def test_the_merged_model_computes_what_the_base_with_its_adapters_computes(base: Path, tmp_path: Path) -> None:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    first, second = tmp_path / "first", tmp_path / "second"
    adapter(base, first, seed=1)
    adapter(base, second, seed=2)
    merged = merge_adapters(base, [first, second], tmp_path / "state" / "input-model")
    assert (merged / "config.json").is_file() and (merged / "tokenizer_config.json").is_file()
    assert json.loads((merged / MARKER).read_text()) == {"base": str(base), "adapters": [str(first), str(second)]}

    ids = torch.tensor([[1, 5, 9, 13, 17]])
    expected: Any = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
    for folder in (first, second):
        expected = PeftModel.from_pretrained(expected, str(folder)).merge_and_unload()
    plain = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
    loaded = AutoModelForCausalLM.from_pretrained(str(merged), dtype=torch.float32)
    with torch.no_grad():
        want, got, untouched = (model(ids).logits for model in (expected, loaded, plain))
    assert torch.allclose(want, got, atol=1e-4), (want - got).abs().max()
    assert not torch.allclose(untouched, got, atol=1e-3)  # the adapters changed the model

    stamp = (merged / "config.json").stat().st_mtime_ns
    assert merge_adapters(base, [first, second], merged) == merged
    assert (merged / "config.json").stat().st_mtime_ns == stamp  # a resumed attempt reuses the merge
    merge_adapters(base, [first], merged)
    assert json.loads((merged / MARKER).read_text())["adapters"] == [str(first)]  # other inputs: merged again
    assert not list(merged.parent.glob("*.partial-*"))
