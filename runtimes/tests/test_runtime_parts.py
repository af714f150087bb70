"""The runtimes' parts without training: the attempt client against a stand-in platform, verdicts as rewards,
parameters, recovery state, outputs (history, plot, manifest) and the tiny model's recipe revision."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fake_platform import FakePlatform

from nodus.runtimes.attempt import AttemptClient, reward_of
from nodus.runtimes.grpo_lora import Parameters, check_state, last_checkpoint
from nodus.runtimes.outputs import history, manifest, moving_mean, plot

REPO = Path(__file__).resolve().parents[2]
REVERSE_WORDS = REPO / "examples" / "quickstart" / "env" / "reverse_words.py"


def test_verdicts_become_rewards_and_an_infrastructure_failure_is_no_score() -> None:
    assert reward_of({"verdict": "Correct", "reward": 1.0}) == 1.0
    assert reward_of({"verdict": "Incorrect", "reward": 0.25}) == 0.25
    assert reward_of({"verdict": "InvalidOutput", "reward": None}) == 0.0
    assert reward_of({"verdict": "InfrastructureFailure", "reward": None}) is None


def test_the_client_fetches_tasks_without_answers_and_grades_in_a_phase(tmp_path: Path) -> None:
    socket = tmp_path / "api.sock"
    with FakePlatform(socket, REVERSE_WORDS, train=5, test=3) as platform:
        client = AttemptClient(str(socket), "demo")
        tasks = client.tasks()
        assert [len(tasks["train"]), len(tasks["test"])] == [5, 3]
        assert all(set(task) == {"taskId", "prompt", "metadata"} for task in tasks["train"])
        first = tasks["test"][0]
        answer = platform.answers[first["taskId"]]
        verdicts = client.grade(
            [
                {"taskId": first["taskId"], "completion": f"<answer>{answer}</answer>"},
                {"taskId": first["taskId"], "completion": ""},
            ],
            "Baseline",
        )
        assert [v["verdict"] for v in verdicts] == ["Correct", "InvalidOutput"]
        assert {g["phase"] for g in platform.gradings} == {"Baseline"}
        client.event(stage="Training", step=1, totalSteps=2, metrics={"reward": 0.5})
        assert platform.events[-1] == {"stage": "Training", "step": 1, "totalSteps": 2, "metrics": {"reward": 0.5}}
        with pytest.raises(ValueError, match="phase"):
            client.grade([{"taskId": first["taskId"], "completion": ""}], "Final")


def test_parameters_read_the_runtime_s_camel_case_names() -> None:
    p = Parameters.from_json(
        {"steps": 3, "learningRate": 1e-3, "groupSize": 4, "lora": {"r": 8, "targetModules": ["q_proj"]}}
    )
    assert (p.steps, p.learning_rate, p.group_size, p.lora.r, p.lora.target_modules) == (3, 1e-3, 4, 8, ["q_proj"])
    assert p.completion_tokens == 256  # maxTokens x maxTurns (1)
    multi = Parameters.from_json({"maxTokens": 100, "maxTurns": 5, "maxEpisodeTokens": 300})
    assert multi.completion_tokens == 300


def test_recovery_state_is_refused_when_the_run_configuration_changed(tmp_path: Path) -> None:
    from nodus.runtimes.contract import RunContext

    def context(steps: int) -> RunContext:
        params = {"parameters": {"steps": steps}, "modelRevision": "hf://nodus/tiny-qwen3@" + "0" * 40}
        return RunContext(params=params, model=tmp_path, state=tmp_path, outputs=tmp_path, api=None)  # type: ignore[arg-type]

    check_state(context(5))
    check_state(context(5))  # the same run resumes
    with pytest.raises(SystemExit) as exited:
        check_state(context(6))
    assert exited.value.code == 3
    (tmp_path / "checkpoints" / "checkpoint-2").mkdir(parents=True)
    (tmp_path / "checkpoints" / "checkpoint-4").mkdir()  # incomplete: no trainer_state.json
    (tmp_path / "checkpoints" / "checkpoint-2" / "trainer_state.json").write_text("{}")
    assert last_checkpoint(tmp_path / "checkpoints") == tmp_path / "checkpoints" / "checkpoint-2"


def test_outputs_history_plot_and_manifest(tmp_path: Path) -> None:
    log = [
        {"step": 1, "loss": 0.1, "reward": 0.2},
        {"step": 1, "kl": 0.01},
        {"step": 2, "loss": 0.05, "reward": 0.5},
        {"step": 2, "train_runtime": 3.0},
    ]
    rows = history(log)
    assert rows == [{"step": 1, "loss": 0.1, "reward": 0.2, "kl": 0.01}, {"step": 2, "loss": 0.05, "reward": 0.5}]
    assert plot(rows, tmp_path / "curves.png")
    assert (tmp_path / "curves.png").read_bytes().startswith(b"\x89PNG")
    (tmp_path / "results.json").write_text(json.dumps({"ok": True}))
    files = manifest(tmp_path)["files"]
    assert set(files) == {"curves.png", "results.json"} and len(files["results.json"]["sha256"]) == 64


def test_the_tiny_model_revision_names_the_recipe(tmp_path: Path) -> None:
    from nodus.runtimes.tiny_model import Recipe, revision

    assert revision(Recipe(), REVERSE_WORDS) == revision(Recipe(), REVERSE_WORDS)
    assert revision(Recipe(target=0.5), REVERSE_WORDS) != revision(Recipe(), REVERSE_WORDS)
    changed = tmp_path / "reverse_words.py"
    changed.write_bytes(REVERSE_WORDS.read_bytes() + b"\n")
    assert revision(Recipe(), changed) != revision(Recipe(), REVERSE_WORDS)


def test_the_plot_draws_a_moving_mean_only_over_more_than_one_step() -> None:
    """A window of one step is the curve itself: no second line, no "moving mean (1 steps)" legend."""
    assert moving_mean([0.1, 0.5, 0.3]) is None
    smooth, legend = moving_mean([float(i % 2) for i in range(30)]) or ([], "")
    assert legend == "moving mean (3 steps)"
    assert smooth[:3] == [0.0, 0.5, 1 / 3] and len(smooth) == 30
