"""`rl.train` end to end on the real path: packaging, the local pre-check, the grader image built, `nodus/grpo-lora`
on the tiny model, and the run handle (wait, tasks, outputs.download). A second call with the same code and
tasks reuses the Environment.

Needs podman and the base image (the packaged Environment is built) and the training stack; marked like the
other end-to-end tests. The reward below is a module-level function so `rl.train` can take its file's lines.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from nodus.cli.main import cli
from nodus.recipes import rl

pytestmark = [pytest.mark.podman, pytest.mark.slow]

ANSWER = re.compile(r"<answer>\s*([a-z]+)\s*</answer>")
WORDS = [
    "cat",
    "dog",
    "sun",
    "map",
    "pen",
    "cup",
    "box",
    "hat",
    "jam",
    "kit",
    "log",
    "mud",
    "net",
    "owl",
    "pig",
    "rug",
    "sky",
    "tap",
    "van",
    "web",
    "yak",
    "zip",
    "arm",
    "bed",
    "cow",
]


def reward(completion: str, answer: str) -> float | None:
    found = ANSWER.findall(completion)
    return None if not found else float(found[-1] == answer)


def test_rl_train_runs_the_reward_through_the_platform(
    tmp_path: Path, base_reference: str, tiny_model: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", tiny_model[0])
    (tmp_path / "nodus.lock").write_text("lockfileVersion: 1\nenvironments: {}\n")
    options = rl.Options(path=tmp_path, base=base_reference)
    tasks = [(f"Spell the word backwards inside <answer></answer>.\n\nWord: {w}", w[::-1]) for w in WORDS]

    run = rl.train(tasks, reward, model=rl.TINY_MODEL, steps=3, max_tokens=32, learning_rate=1e-3, options=options)
    status = run.wait(timeout=600)
    assert status.phase == "Succeeded", status
    assert status.summary.baseline.tasks == 16  # a fifth of 25, at least 16, held out

    failed = run.tasks(phase="Evaluation", outcome="Failed")
    passed = run.tasks(phase="Evaluation", outcome="Passed")
    assert len(failed) + len(passed) == 16
    assert all(record.phase == "Evaluation" for record in failed)

    files = run.outputs.download(tmp_path / "outputs")
    assert (tmp_path / "outputs" / "adapter" / "adapter_model.safetensors").is_file(), files
    assert (tmp_path / "outputs" / "results.json").is_file()

    # Same code and tasks: the same Environment, nothing rebuilt; a new run of it.
    again = rl.train(tasks, reward, model=rl.TINY_MODEL, steps=3, max_tokens=32, learning_rate=1e-3, options=options)
    assert again.name != run.name
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["get", "env"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert len([line for line in result.output.splitlines() if line.startswith("reward-")]) == 1, result.output
    # The second run is not needed further: cancel it, so no trainer outlives the test (a later test that times
    # training on this machine would measure it too).
    result = CliRunner().invoke(cli, ["cancel", f"tj/{again.name}"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert again.wait(timeout=120).phase in ("Cancelled", "Succeeded")  # ended either way; Succeeded if it was quicker
