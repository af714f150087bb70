"""A base model with LoRA adapters merged into it: what a run trains on when its model is an exported adapter.

Who calls it: `RunContext.from_environment` (`nodus.runtimes.contract`), once per run, when the supervisor names
adapters (`NODUS_INPUT_ADAPTERS`, in the order they were trained) beside the base model (`NODUS_INPUT_MODEL`).
Every managed runtime (SFT, DPO, ORPO, KTO, reward model, distillation, GRPO) then loads the merged folder as it
would any full model: peft's `merge_and_unload` folds each adapter's low-rank update into the base weights, so
nothing downstream needs to know the model came from an adapter, and a new LoRA (or full fine-tuning) starts from
the merged weights. The folder is written under the run's state (`<state>/input-model`) through a `.partial`
rename, so a resumed attempt reuses it and a run that dies while merging leaves no half-written model.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

MARKER = ".nodus-merged.json"
"""Written last into a complete merged folder: the base and adapters it was merged from."""


def merge_adapters(base: Path, adapters: Sequence[Path], into: Path) -> Path:
    """`into`, holding `base` with every adapter merged in order, and the tokenizer of the last adapter that has one
    (a run may have changed the chat template), else the base's. Kept when it already holds this very merge."""
    inputs = {"base": str(base), "adapters": [str(folder) for folder in adapters]}
    if _merged_from(into) == inputs:
        return into
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model: Any = AutoModelForCausalLM.from_pretrained(str(base), dtype="auto")
    for folder in adapters:
        model = PeftModel.from_pretrained(model, str(folder)).merge_and_unload()
    with_tokenizer = next(
        (folder for folder in reversed(adapters) if (folder / "tokenizer_config.json").is_file()), base
    )
    partial = into.with_name(f"{into.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    model.save_pretrained(partial)
    AutoTokenizer.from_pretrained(str(with_tokenizer)).save_pretrained(partial)
    (partial / MARKER).write_text(json.dumps(inputs) + "\n")
    if _merged_from(into) == inputs:  # another rank of the same run finished first: its copy is the same
        shutil.rmtree(partial, ignore_errors=True)
        return into
    shutil.rmtree(into, ignore_errors=True)  # a merge of other inputs (an earlier generation's): not this run's
    partial.rename(into)
    return into


def _merged_from(folder: Path) -> object:
    try:
        return json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return None
