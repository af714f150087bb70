"""Checks of what a server is asked to load: a Hugging Face model folder and PEFT LoRA adapter folders.

Who uses it: both backends (`transformers_backend`, `vllm_backend`) before they build a command line, and the
server's command line (`__main__`) before it loads anything, so a wrong path fails in one line naming the flag,
the file and the field, not in a traceback from transformers or vLLM minutes later on a GPU host.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodus.runtimes.serving.backend import AdapterSpec, ServingError

ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")


@dataclass(frozen=True)
class AdapterInfo:
    spec: AdapterSpec
    rank: int
    """The largest LoRA rank in the adapter (`r`, or the largest of `rank_pattern`): vLLM's --max-lora-rank."""


def read_json(path: Path, flag: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ServingError(f"{flag}: {path} not found") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ServingError(f"{flag}: {path}: not readable JSON ({error})") from None
    if not isinstance(data, dict):
        raise ServingError(f"{flag}: {path}: expected a JSON object")
    return data


def check_model(path: Path, flag: str = "--model") -> dict[str, Any]:
    """The model folder's config.json, once the folder is known to hold one (weights and tokenizer are checked
    by the loader itself)."""
    if not path.is_dir():
        raise ServingError(
            f"{flag} {path}: no such folder (a Hugging Face model folder: config.json, weights, tokenizer)"
        )
    return read_json(path / "config.json", f"{flag} {path}")


def context_length(config: dict[str, Any]) -> int | None:
    """The model's context window from its config.json, where it says one."""
    text_config = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    value = (text_config or {}).get("max_position_embeddings")
    return value if isinstance(value, int) and value > 0 else None


def parse_adapter(argument: str) -> AdapterSpec:
    """`NAME=PATH` as --adapter gives it."""
    name, sep, path = argument.partition("=")
    if not sep or not name.strip() or not path.strip():
        raise ServingError(f"--adapter {argument}: expected NAME=PATH (a PEFT LoRA adapter folder)")
    return AdapterSpec(name=name.strip(), path=Path(path.strip()))


def read_adapter(spec: AdapterSpec) -> AdapterInfo:
    flag = f"--adapter {spec.name}={spec.path}"
    if not spec.path.is_dir():
        raise ServingError(f"{flag}: no such folder (a PEFT adapter folder: adapter_config.json + adapter weights)")
    config = read_json(spec.path / "adapter_config.json", flag)
    if config.get("peft_type", "LORA") != "LORA":
        raise ServingError(
            f"{flag}: adapter_config.json: peft_type is {config.get('peft_type')!r}; only LORA is served"
        )
    rank = config.get("r")
    if not isinstance(rank, int) or rank < 1:
        raise ServingError(f"{flag}: adapter_config.json: r must be a positive integer, got {rank!r}")
    pattern = config.get("rank_pattern") or {}
    ranks = (
        [rank, *(value for value in pattern.values() if isinstance(value, int))]
        if isinstance(pattern, dict)
        else [rank]
    )
    if not any((spec.path / weights).is_file() for weights in ADAPTER_WEIGHTS):
        raise ServingError(f"{flag}: no adapter weights ({' or '.join(ADAPTER_WEIGHTS)})")
    return AdapterInfo(spec=spec, rank=max(ranks))


def check_names(served_name: str, adapters: tuple[AdapterSpec, ...]) -> None:
    """Every model name a request may give is distinct: the base's and each adapter's."""
    if not served_name.strip():
        raise ServingError("--name: the served model name is empty")
    seen = {served_name}
    for adapter in adapters:
        if adapter.name in seen:
            raise ServingError(f"--adapter {adapter.name}={adapter.path}: the name {adapter.name!r} is already served")
        seen.add(adapter.name)
