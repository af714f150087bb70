"""`rl.train` up to the point where a build or a trainer would start, and the example that ships with the SDK.

The slow end-to-end run (a built grader image, the real trainer on the tiny model) is the lead's test; here
every check that stops a run before it costs anything is exercised without podman.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import nodus.recipes.jobs as jobs
from nodus.errors import ConfigError, SpecError
from nodus.examples import rl as example
from nodus.recipes import rl
from nodus.recipes.environment import package
from nodus.recipes.precheck import precheck
from nodus.reconciler.project import Project

Load = Callable[[str], ModuleType]
TASKS = [(f"Spell backwards: w{i}x", f"x{i}w") for i in range(40)]


def stored(project: Path) -> list[str]:
    store = Project.find(project).open_state()
    try:
        return [str(record.key) for record in store.list()]
    finally:
        store.close()


def test_train_packages_checks_and_is_refused_by_admission_before_any_build(project: Path, runtimes: Path) -> None:
    # No nodus/grpo-lora in the (empty) catalog: admission refuses, so nothing is built, written or started.
    with pytest.raises(SpecError) as refused:
        rl.train(example.tasks, example.reward, model=rl.TINY_MODEL, max_cost=2, steps=5, top_p=0.9)
    assert "RuntimeNotFound: spec.runtime: TrainingRuntime nodus/grpo-lora does not exist" in refused.value.message
    assert stored(project) == []
    assert not (project / "nodus.lock").read_text()  # nothing was built
    bundles = list((project / ".nodus" / "bundles").iterdir())
    assert len(bundles) == 1 and (bundles[0] / "nodus_rl_env.py").is_file()


def test_train_builds_the_packaged_environment_once_admission_passes(
    project: Path, grpo_runtime: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, object] = {}

    def no_build(
        where: Project, spec_file: Path, name: str, version: str, options: rl.Options, namespace: str | None = None
    ) -> None:
        seen.update(spec_file=spec_file, name=name, version=version, namespace=namespace)
        raise ConfigError("stopped where the build starts")

    monkeypatch.setattr(jobs, "ensure_built", no_build)
    with pytest.raises(ConfigError, match="stopped where the build starts"):
        rl.train(TASKS, example.reward, model=rl.TINY_MODEL, max_cost=2, steps=5, lora=rl.LoRA(r=8), temperature=0.7)
    assert str(seen["name"]).startswith("reward-") and seen["version"] == "1.0.0"
    assert Path(str(seen["spec_file"])).parent.parent == project / ".nodus" / "bundles"
    assert stored(project) == []


def test_train_compiles_the_trainingjob_the_seeds_describe(
    project: Path, grpo_runtime: Path, reward_file: Load, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = reward_file("def score_answer(completion, answer):\n    return float(completion.strip() == answer)\n")
    documents: list[dict[str, Any]] = []

    def capture(job: jobs.RecipeJob, gpu: Any = None, max_cost: Any = None, idempotency_key: str | None = None) -> Any:
        documents.append(job.document("captured", gpu=gpu, max_cost=max_cost))
        raise ConfigError("captured")

    monkeypatch.setattr(jobs.RecipeJob, "run", capture)
    with pytest.raises(ConfigError, match="captured"):
        rl.train(TASKS, module.score_answer, model=rl.TINY_MODEL, max_cost="2.5", seed=7, top_p=0.9)
    spec = documents[0]["spec"]
    assert spec["runtime"] == "nodus/grpo-lora" and spec["maxCostUSD"] == "2.50"
    assert spec["environment"]["name"].startswith("score-answer-") and spec["environment"]["name"].endswith("@1.0.0")
    assert spec["environment"]["trainTasks"] == 24 and spec["environment"]["heldOutTasks"] == 16
    assert spec["environment"]["seed"] == 7
    assert spec["evaluation"] == {"baseline": True, "final": True, "minComparisonTasks": 16}
    assert spec["parameters"] == {
        "steps": 50,
        "groupSize": 8,
        "groupsPerStep": 4,
        "maxTokens": 256,
        "learningRate": 4e-5,
        "topP": 0.9,
    }


def test_a_reward_that_fails_the_check_stops_train_before_anything_is_applied(project: Path, reward_file: Load) -> None:
    module = reward_file("def reward(completion, answer):\n    return completion.split()[0] == answer\n")
    with pytest.raises(ConfigError) as failed:
        rl.train(TASKS, module.reward, model=rl.TINY_MODEL)
    assert "reward('', answer) raised IndexError" in failed.value.message
    assert stored(project) == []


def test_a_model_that_is_not_cached_stops_train_before_anything_is_written(project: Path) -> None:
    with pytest.raises(ConfigError, match=r"Qwen/Qwen3-0\.6B is not in the local Hugging Face cache"):
        rl.train(TASKS, example.reward)  # the default model, not in this test's cache
    assert not (project / ".nodus" / "bundles").exists()


def test_train_on_an_environment_takes_no_reward(project: Path) -> None:
    with pytest.raises(ConfigError, match="pass no reward"):
        rl.train("nodus/gsm8k@1.0.0", example.reward)
    with pytest.raises(ConfigError, match="the reward function is missing"):
        rl.train(TASKS)


# --- the example ------------------------------------------------------------------------------------------


def test_the_example_has_enough_short_words_and_its_reward_packages(tmp_path: Path) -> None:
    assert len(example.WORDS) >= 80 and len(set(example.WORDS)) == len(example.WORDS)
    assert all(3 <= len(w) <= 5 and w != w[::-1] for w in example.WORDS)
    from nodus.builder.store import Store

    packaged = package(example.tasks, example.reward, store=Store(tmp_path / "state"), project="default")
    precheck(packaged)
    body = packaged.extracted.body
    assert "import re" in body and "ANSWER = re.compile" in body
    assert "WORDS" not in body and "def main" not in body and "rl.train" not in body
    assert len(packaged.split.test) == len(example.WORDS) // 5


def test_the_example_without_the_tiny_model_prints_one_line_and_exits_1(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    assert example.main() == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("error: model nodus/tiny-qwen3 is not in the local Hugging Face cache")
    assert err[1].startswith("hint: ") and "python -m nodus.runtimes.tiny_model" in err[1]


def test_the_example_says_why_it_passes_the_tiny_model() -> None:
    source = Path(example.__file__).read_text()
    assert "model=rl.TINY_MODEL" in source and "downloads no weights" in source
