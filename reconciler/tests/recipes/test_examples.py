"""The SDK and the catalog by name: `TrainingJob.from_example("nodus/graph-coloring@1.0.0")` returns the
catalog's ready template as a job to change and preview or run, and a recipe naming `nodus/gsm8k@1.0.0` (what
`rl.train("nodus/gsm8k@1.0.0")` compiles) plans the catalog Environment with it. The real catalog of this
checkout; nothing is applied or built."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodus.errors import ConfigError
from nodus.recipes import TrainingJob, rl
from nodus.recipes.apply import Options


@pytest.fixture(autouse=True)
def _real_catalog(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NODUS_CATALOG_DIR", raising=False)


def test_from_example_returns_the_template_to_change_and_preview(project: Path, grpo_runtime: Path) -> None:
    job = TrainingJob.from_example("nodus/graph-coloring@1.0.0", options=Options(path=project))
    assert job.spec["runtime"] == "nodus/grpo-lora"
    assert job.spec["environment"] == {
        "name": "nodus/graph-coloring@1.0.0",
        "trainTasks": 50,
        "heldOutTasks": 64,
        "seed": 42,
    }
    job.spec["parameters"]["steps"] = 3  # the user's change, kept in what would be applied
    job.spec["model"] = {"uri": "hf://nodus/tiny-qwen3@c1899de289a04d12100db370d81485cdf75e47ca"}
    preview = job.preview(idempotency_key="gc-grpo")
    assert preview.document["spec"]["parameters"]["steps"] == 3
    sources = {str(action.key): action.source for action in preview.plan.actions}
    assert sources["Environment/nodus/graph-coloring"] == "managed:catalog/graph-coloring/environment.yaml"
    assert preview.blocking == []
    again = TrainingJob.from_example("graph-coloring@1.0.0", "grpo-lora", options=Options(path=project))
    assert again.spec["parameters"]["steps"] == 50  # a fresh copy each time: the template itself never changes


def test_from_example_says_what_the_catalog_has(project: Path) -> None:
    with pytest.raises(ConfigError, match="no catalog Environment nothing"):
        TrainingJob.from_example("nodus/nothing@1.0.0")
    with pytest.raises(ConfigError, match=r"no example 'sft' \(it has: grpo-lora\)"):
        TrainingJob.from_example("nodus/graph-coloring@1.0.0", "sft")
    with pytest.raises(ConfigError, match=r"at version 1\.0\.0, not 9\.9\.9"):
        TrainingJob.from_example("nodus/graph-coloring@9.9.9")


def test_a_recipe_naming_a_catalog_environment_plans_it(project: Path, grpo_runtime: Path) -> None:
    job = rl.grpo_lora(model="nodus/tiny-qwen3", environment="nodus/gsm8k@1.0.0", options=Options(path=project))
    preview = job.preview(max_cost=5, idempotency_key="gsm8k-run")
    sources = {str(action.key): action.source for action in preview.plan.actions}
    assert sources["Environment/nodus/gsm8k"] == "managed:catalog/gsm8k/environment.yaml"
    assert preview.blocking == []  # before: spec.environment.name: Environment nodus/gsm8k does not exist
