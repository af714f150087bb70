"""`model=` of the recipes (`nodus.recipes.models`): pinned from the local Hugging Face cache, never downloaded."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from nodus.errors import ConfigError
from nodus.recipes.models import DEFAULT_MODEL, model_source

OTHER = "0e9e39f249a16976918f6564b8830bc894c89659"


def test_a_repository_is_pinned_to_the_commit_the_cache_has(hub: Callable[..., str]) -> None:
    commit = hub("Qwen/Qwen3-0.6B")
    assert model_source("Qwen/Qwen3-0.6B") == {"uri": f"hf://Qwen/Qwen3-0.6B@{commit}"}
    assert model_source(None) == {"uri": f"hf://{DEFAULT_MODEL}@{commit}"}  # the seeds' default
    assert model_source("hf://Qwen/Qwen3-0.6B") == {"uri": f"hf://Qwen/Qwen3-0.6B@{commit}"}


def test_a_pinned_revision_is_used_as_given_cached_or_not(hub: Callable[..., str]) -> None:
    assert model_source(f"Qwen/Qwen3-4B@{OTHER}") == {"uri": f"hf://Qwen/Qwen3-4B@{OTHER}"}
    assert model_source(f"hf://Qwen/Qwen3-4B@{OTHER}") == {"uri": f"hf://Qwen/Qwen3-4B@{OTHER}"}
    assert model_source({"volume": {"name": "my-model", "revision": 3}}) == {
        "volume": {"name": "my-model", "revision": 3}
    }


def test_the_cache_is_found_like_huggingface_hub_finds_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def cache_at(hub_folder: Path) -> None:
        repository = hub_folder / "models--nodus--tiny-qwen3"
        (repository / "snapshots" / OTHER).mkdir(parents=True)
        (repository / "refs").mkdir()
        (repository / "refs" / "main").write_text(OTHER)

    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    cache_at(tmp_path / "hf-home" / "hub")
    assert model_source("nodus/tiny-qwen3") == {"uri": f"hf://nodus/tiny-qwen3@{OTHER}"}
    monkeypatch.delenv("HF_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    cache_at(tmp_path / "user" / ".cache" / "huggingface" / "hub")
    assert model_source("nodus/tiny-qwen3") == {"uri": f"hf://nodus/tiny-qwen3@{OTHER}"}


def test_a_model_that_is_not_cached_is_one_line_naming_it_and_the_tiny_model(hub: Callable[..., str]) -> None:
    with pytest.raises(ConfigError) as refused:
        model_source("Qwen/Qwen3-4B")
    assert "Qwen/Qwen3-4B is not in the local Hugging Face cache" in refused.value.message
    assert "\n" not in refused.value.message
    assert refused.value.hint is not None and "python -m nodus.runtimes.tiny_model" in refused.value.hint
    assert 'model="nodus/tiny-qwen3"' in refused.value.hint


def test_a_reference_without_its_snapshot_or_with_a_bad_commit_is_refused(
    tmp_path: Path, hub: Callable[..., str]
) -> None:
    folder = tmp_path / "hub" / "models--org--half"
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text(OTHER)
    with pytest.raises(ConfigError, match="org/half is not in the local Hugging Face cache"):
        model_source("org/half")
    (folder / "refs" / "main").write_text("main-branch")
    with pytest.raises(ConfigError, match="is not a 40-character commit"):
        model_source("org/half")
    for bad, message in [
        ("org/name@main", "is not a 40-character commit"),
        ("just-a-name", "not a Hugging Face"),
        (3, "must be"),
    ]:
        with pytest.raises(ConfigError, match=message):
            model_source(bad)


def test_the_managed_runtimes_default_to_the_sdk_s_model_at_the_seeds_commit() -> None:
    """A TrainingJob that names no model trains what `rl.train` would: the runtimes' defaultModel is
    DEFAULT_MODEL, pinned (admission refuses an unpinned default)."""
    from nodus.reconciler.planning.managed import catalog_folders, read_catalog

    catalog, problems = read_catalog(catalog_folders())
    assert problems == []
    defaults = {key.name: item.document["spec"].get("defaultModel") for key, item in catalog.items()}
    assert set(defaults) >= {"grpo-lora", "evaluate"}
    for name, default in defaults.items():
        assert default == {"uri": f"hf://{DEFAULT_MODEL}@c1899de289a04d12100db370d81485cdf75e47ca"}, name
