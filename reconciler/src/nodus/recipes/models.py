"""Which base model a recipe trains: a Hugging Face repository pinned to a commit found in the local cache.

Who calls it: `nodus.recipes.rl` (`train`, `grpo_lora`, `evaluate`) for `model=`. nodus never downloads
weights at run time, so `"org/name"` is pinned to the commit the local Hugging Face cache has as `refs/main`
(`HF_HUB_CACHE`, else `HF_HOME/hub`, else `~/.cache/huggingface/hub`: the layout `huggingface-cli download`
writes); `"org/name@<commit>"` and `"hf://org/name@<commit>"` are used as given, and the TrainingJob
controller imports that revision when the run starts. A mapping (`{"volume": {"name": ..., "revision": 3}}`)
is passed through as the TrainingJob's `spec.model`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nodus.errors import ConfigError
from nodus.reconciler.model_cache import hub_cache

DEFAULT_MODEL = "Qwen/Qwen3-0.6B"
"""The seeds' base model when `model=` is left out."""
TINY_MODEL = "nodus/tiny-qwen3"
"""What `python -m nodus.runtimes.tiny_model` builds into the local cache (tests, the quickstart, examples)."""
_REPOSITORY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


def model_source(model: Any) -> dict[str, Any]:
    """`spec.model` of the TrainingJob for `model=` (None: the default model)."""
    if model is None:
        model = DEFAULT_MODEL
    if isinstance(model, Mapping):
        return dict(model)
    if not isinstance(model, str):
        raise ConfigError(f"model= must be a Hugging Face repository such as {DEFAULT_MODEL!r}, not {model!r}")
    repository, at, revision = model.removeprefix("hf://").partition("@")
    if not _REPOSITORY.match(repository):
        raise ConfigError(f"model={model!r} is not a Hugging Face repository such as {DEFAULT_MODEL!r}")
    if at and not _COMMIT.match(revision):
        raise ConfigError(
            f"model={model!r}: {revision!r} is not a 40-character commit",
            hint=f"name a commit ({repository}@<40 hex digits>), or leave it out to use the cached one",
        )
    return {"uri": f"hf://{repository}@{revision if at else cached_revision(repository)}"}


def cached_revision(repository: str, cache: Path | None = None) -> str:
    """The commit `refs/main` names for `repository` in the local cache, whose snapshot is there."""
    cache = cache or hub_cache()
    folder = cache / f"models--{repository.replace('/', '--')}"
    reference = folder / "refs" / "main"
    try:
        commit = reference.read_text(encoding="utf-8").strip()
    except OSError:
        commit = ""
    if commit and not _COMMIT.match(commit):
        raise ConfigError(f"{reference}: {commit[:60]!r} is not a 40-character commit")
    if not commit or not (folder / "snapshots" / commit).is_dir():
        raise ConfigError(
            f"model {repository} is not in the local Hugging Face cache ({cache}); nodus never downloads weights "
            "at run time",
            hint=f"fetch it once with `huggingface-cli download {repository}`, or build the tiny test model with "
            f'`python -m nodus.runtimes.tiny_model` and pass model="{TINY_MODEL}"',
        )
    return commit
