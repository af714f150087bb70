"""The TrainingJobs recipes compile (`nodus.recipes.jobs`, through `rl.grpo_lora` and `rl.evaluate`): documents
that `nodus.specs` reads like a file, previews with the plan and admission's reasons, and runs applied through
the functions of `nodus apply`."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from nodus.errors import ConfigError, SpecError
from nodus.recipes import rl
from nodus.recipes.jobs import max_cost_usd, parameters
from nodus.reconciler.project import Project
from nodus.reconciler.state.records import ResourceKey
from nodus.specs.parse import parse_text

COMMIT = "c1899de289a04d12100db370d81485cdf75e47ca"


def validates(document: dict[str, object]) -> None:
    result = parse_text(yaml.safe_dump(document), "job.yaml")
    assert result.ok, [str(problem) for problem in result.errors]


def test_grpo_lora_compiles_a_trainingjob_that_validates(
    project: Path, grpo_runtime: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "no-catalog").mkdir()
    monkeypatch.setenv("NODUS_CATALOG_DIR", str(tmp_path / "no-catalog"))  # an empty catalog: nothing named exists
    monkeypatch.setenv("NODUS_LOCAL_GPUS", "rtx4090-24g")  # the GPU it asks for is on this host
    job = rl.grpo_lora(
        model="nodus/tiny-qwen3",
        environment="nodus/arithmetic@2.0.0",
        steps=20,
        held_out=32,
        seed=42,
        lora=rl.LoRA(r=8, target_modules=("q_proj", "v_proj")),
        task_filter={"level": "easy"},
        learning_rate=1e-4,
        groupSize=4,
    )
    preview = job.preview(gpu="RTX4090-24G", max_cost=5, idempotency_key="gc-001")
    validates(preview.document)
    spec = preview.document["spec"]
    assert spec["runtime"] == "nodus/grpo-lora" and spec["mode"] == "Train"
    assert spec["model"] == {"uri": f"hf://nodus/tiny-qwen3@{COMMIT}"}
    assert spec["environment"] == {
        "name": "nodus/arithmetic@2.0.0",
        "heldOutTasks": 32,
        "seed": 42,
        "taskFilter": {"level": "easy"},
    }
    assert spec["evaluation"]["baseline"] is True and spec["evaluation"]["final"] is True
    assert spec["evaluation"]["minComparisonTasks"] == 16
    assert spec["parameters"] == {
        "steps": 20,
        "lora": {"r": 8, "alpha": 32, "dropout": 0.0, "targetModules": ["q_proj", "v_proj"]},
        "learningRate": 1e-4,
        "groupSize": 4,
    }
    assert spec["maxCostUSD"] == "5.00" and spec["resources"]["gpu"] == {"type": ["rtx4090-24g"], "count": 1}
    assert preview.name == "gc-001" and preview.etag.startswith("sha256:")
    assert preview.estimate is None  # issue 7 adds the estimator
    # The environment does not exist: admission would refuse it, and the preview says so without writing.
    assert len(preview.blocking) == 1 and "EnvironmentNotFound" in preview.blocking[0]
    assert "+ TrainingJob/gc-001" in str(preview) and "blocked: " in str(preview)
    store = Project.find(project).open_state()
    try:
        assert store.list() == []
    finally:
        store.close()


def test_the_same_settings_give_the_same_etag(project: Path, grpo_runtime: Path) -> None:
    job = rl.grpo_lora(model="nodus/tiny-qwen3", environment="nodus/arithmetic@2.0.0")
    assert job.preview(idempotency_key="a").etag == job.preview(idempotency_key="a").etag
    assert job.preview(idempotency_key="a").etag != job.preview(idempotency_key="a", max_cost=1).etag


def test_a_parameter_the_runtime_does_not_know_blocks_with_its_field(small: str, grpo_runtime: Path) -> None:
    preview = rl.grpo_lora(model="nodus/tiny-qwen3", environment=small, learning_rte=0.1).preview()
    assert preview.blocking and all(
        "InvalidParameters: spec.parameters.learningRte" in reason for reason in preview.blocking
    )


def test_a_missing_runtime_blocks_and_run_refuses_before_anything_is_written(project: Path) -> None:
    job = rl.grpo_lora(model="nodus/tiny-qwen3", environment="nodus/arithmetic@2.0.0")
    assert any("RuntimeNotFound" in reason for reason in job.preview().blocking)
    with pytest.raises(SpecError) as refused:
        job.run(idempotency_key="never")
    assert "TrainingJob/never: RuntimeNotFound" in refused.value.message
    assert not (project / ".nodus" / "rl" / "jobs" / "default" / "never.yaml").exists()


@pytest.fixture
def small(project: Path) -> str:
    """An Environment `nodus/small@1.0.0` the store knows, Ready, with 100 train and 20 test tasks."""
    store = Project.find(project).open_state()
    try:
        key = ResourceKey("Environment", "nodus", "small")
        environment = {
            "apiVersion": "nodus.dev/v1",
            "kind": "Environment",
            "metadata": {"name": "small", "project": "nodus"},
            "spec": {"version": "1.0.0", "package": {"path": "."}},
        }
        store.put(key, environment)
        store.set_status(key, {"phase": "Ready", "splits": {"train": 100, "test": 20}})
    finally:
        store.close()
    return "nodus/small@1.0.0"


def test_train_and_held_out_default_to_the_environments_split_sizes(small: str, grpo_runtime: Path) -> None:
    spec = rl.grpo_lora(model="nodus/tiny-qwen3", environment=small).preview().document["spec"]
    assert spec["environment"]["trainTasks"] == 100 and spec["environment"]["heldOutTasks"] == 20
    spec = rl.grpo_lora(model="nodus/tiny-qwen3", environment="nodus/other@1.0.0").preview().document["spec"]
    assert "trainTasks" not in spec["environment"]  # unknown sizes: the runtime's defaults (256 and 64)


def test_evaluate_compiles_a_mode_evaluate_job(project: Path, evaluate_runtime: Path) -> None:
    document = rl.evaluate(model="nodus/tiny-qwen3", tasks=["arc_easy"], max_tokens=64).preview().document
    validates(document)
    spec = document["spec"]
    assert spec["runtime"] == "nodus/evaluate" and spec["mode"] == "Evaluate"
    assert spec["evaluation"]["tasks"] == ["arc_easy"] and spec["parameters"] == {"maxTokens": 64}
    spec = rl.evaluate(model="nodus/tiny-qwen3", environment="nodus/arithmetic@2.0.0", held_out=8).preview().document
    assert spec["spec"]["environment"]["heldOutTasks"] == 8
    with pytest.raises(ConfigError, match="needs environment="):
        rl.evaluate(model="nodus/tiny-qwen3")


def test_an_evaluation_runs_and_an_idempotency_key_returns_the_same_run(project: Path, evaluate_runtime: Path) -> None:
    lines: list[str] = []
    options = rl.Options(report=lines.append)
    job = rl.evaluate(model="nodus/tiny-qwen3", tasks=["arc_easy"], options=options)
    run = job.run(idempotency_key="eval-1")
    status = run.wait(timeout=60, poll=0.2)
    assert status.phase == "Succeeded" and status.reason == "TrainerSucceeded"
    assert "TrainingRuntime/nodus/evaluate: created" in lines
    assert any(line.startswith("TrainingJob/eval-1: launched") for line in lines)
    assert (project / ".nodus" / "rl" / "jobs" / "default" / "eval-1.yaml").is_file()

    lines.clear()
    again = job.run(idempotency_key="eval-1")
    assert again.name == run.name and again.status().phase == "Succeeded"
    assert not any("launched" in line for line in lines)
    changed = rl.evaluate(model="nodus/tiny-qwen3", tasks=["arc_easy", "arc_challenge"], options=options)
    with pytest.raises(ConfigError, match="already names TrainingJob/eval-1 with other settings"):
        changed.run(idempotency_key="eval-1")
    with pytest.raises(ConfigError, match="wrote no outputs"):
        run.outputs.download(project / "out")


def test_arguments_are_checked_with_one_line_each(project: Path) -> None:
    job = rl.grpo_lora(model="nodus/tiny-qwen3", environment="nodus/arithmetic@2.0.0")
    for kwargs, message in [
        ({"idempotency_key": "Not_A_Label"}, "must be a DNS label"),
        ({"max_cost": -1}, "non-negative"),
        ({"max_cost": "abc"}, "amount of US dollars"),
        ({"max_cost": "0.0000001"}, "at most 6 decimals"),
        ({"gpu": "RTX 4090"}, "not a GPU type"),
    ]:
        with pytest.raises(ConfigError, match=message):
            job.preview(**kwargs)
    with pytest.raises(ConfigError, match="is not \\[project/\\]name@version"):
        rl.grpo_lora(model="nodus/tiny-qwen3", environment="gsm8k")
    with pytest.raises(ConfigError, match="steps=0"):
        parameters({}, steps=0)
    with pytest.raises(ConfigError, match=r"rl\.LoRA"):
        parameters({}, lora={"r": 8})  # type: ignore[arg-type]


@pytest.mark.parametrize(("given", "written"), [(2, "2.00"), (0.5, "0.50"), ("1.25", "1.25"), ("0.001", "0.001")])
def test_max_cost_is_written_as_a_decimal_string(given: object, written: str) -> None:
    assert max_cost_usd(given) == written
