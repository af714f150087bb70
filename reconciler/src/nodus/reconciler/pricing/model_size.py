"""A model's parameter count, which picks the runtime preset (and so the GPUs) a TrainingJob is priced on.

Who calls it: `nodus.reconciler.pricing.facts` (reads the files) and the estimator (parses counts). Sources, the
first that answers wins:
1. the job's `metadata.annotations["nodus.dev/parameters"]` (`600M`, `8B`): what the person says;
2. the model's files, when they are on this host (imported into the project, or in the local Hugging Face cache;
   never downloaded): the tensor shapes in the `*.safetensors` headers (exact), else `config.json`'s sizes;
3. the repository name: `Qwen/Qwen3-0.6B` -> 0.6B, `openai/gpt-oss-120b` -> 120B.
Otherwise the size is unknown, and the estimate says so.
"""

from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ANNOTATION = "nodus.dev/parameters"
UNITS = {"K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}
_COUNT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMBT])\s*$", re.IGNORECASE)
# A size inside a repository name: `0.6B` in `Qwen3-0.6B`, `30B` in `Qwen3-30B-A3B` (not `A3B`, not `Qwen3`).
_IN_NAME = re.compile(r"(?<![A-Za-z0-9.])(\d+(?:\.\d+)?)([KMBT])(?![A-Za-z0-9])", re.IGNORECASE)
SAFETENSORS_HEADER_LIMIT = 100 * 2**20
DTYPE_BYTES = {"F64": 8, "I64": 8, "F32": 4, "I32": 4, "F16": 2, "BF16": 2, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}


@dataclass(frozen=True)
class ModelSize:
    parameters: int
    source: str
    """Where the count came from, for the estimate's basis: `annotation nodus.dev/parameters`, `model.safetensors
    headers`, `config.json`, `the name Qwen3-0.6B`."""


def parse_count(text: str) -> int | None:
    """`600M` -> 600_000_000; `0.6B` -> 600_000_000; None when it is not such a count."""
    match = _COUNT.match(text)
    if match is None:
        return None
    return round(float(match.group(1)) * UNITS[match.group(2).upper()])


def format_count(count: int) -> str:
    """600_000_000 -> `600M`; 140_000 -> `140K` (at most three significant digits)."""
    for unit in ("T", "B", "M", "K"):
        size = UNITS[unit]
        if count >= size:
            return f"{count / size:.3g}{unit}"
    return str(count)


def from_annotation(annotations: dict[str, Any]) -> ModelSize | None:
    text = annotations.get(ANNOTATION)
    if not isinstance(text, str):
        return None
    count = parse_count(text)
    return ModelSize(count, f"annotation {ANNOTATION}: {text}") if count is not None else None


def from_name(uri: str) -> ModelSize | None:
    """A size written in the repository name of `hf://org/name@rev` (or `org/name`)."""
    name = uri.removeprefix("hf://").partition("@")[0].rpartition("/")[2]
    match = _IN_NAME.search(name)
    if match is None:
        return None
    count = round(float(match.group(1)) * UNITS[match.group(2).upper()])
    return ModelSize(count, f"the name {name}")


def from_folder(folder: Path) -> ModelSize | None:
    """The count of a model folder: its safetensors headers (exact), else its config.json."""
    files = sorted(folder.glob("*.safetensors"))
    if files:
        total = 0
        for path in files:
            counted = _safetensors_parameters(path)
            if counted is None:
                total = 0
                break
            total += counted
        if total:
            return ModelSize(total, f"{len(files)} safetensors file{'s' if len(files) > 1 else ''} in {folder.name}")
    config = folder / "config.json"
    if config.is_file():
        try:
            data = json.loads(config.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        counted = config_parameters(data if isinstance(data, dict) else {})
        if counted:
            return ModelSize(counted, f"config.json of {folder.name}")
    return None


def _safetensors_parameters(path: Path) -> int | None:
    """Parameters in one safetensors file, from its JSON header (8-byte length, then the header): no tensors read."""
    try:
        with path.open("rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            if length > SAFETENSORS_HEADER_LIMIT:
                return None
            header = json.loads(handle.read(length))
    except (OSError, ValueError, struct.error):
        return None
    total = 0
    for name, tensor in header.items():
        if name == "__metadata__" or not isinstance(tensor, dict):
            continue
        count = 1
        for size in tensor.get("shape") or []:
            count *= int(size)
        total += count
    return total


def config_parameters(config: dict[str, Any]) -> int | None:
    """A decoder-only transformer's parameters from its config.json (Llama/Qwen/Mistral shapes): embeddings,
    attention (grouped KV heads), a gated MLP per layer and the output head unless tied. An approximation
    (norms and biases left out), good enough to pick a preset; None without the sizes it needs."""
    try:
        hidden = int(config["hidden_size"])
        layers = int(config["num_hidden_layers"])
        vocab = int(config["vocab_size"])
        heads = int(config.get("num_attention_heads") or 1)
        kv_heads = int(config.get("num_key_value_heads") or heads)
        head_dim = int(config.get("head_dim") or hidden // heads)
        intermediate = int(config.get("intermediate_size") or 4 * hidden)
    except (KeyError, TypeError, ValueError):
        return None
    attention = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2
    mlp = 3 * hidden * intermediate
    embeddings = vocab * hidden * (1 if config.get("tie_word_embeddings", True) else 2)
    return embeddings + layers * (attention + mlp)
