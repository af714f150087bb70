"""The quickstart example stays runnable: its pinned tiny-model revision is the recipe's, it plans with the
managed runtime, and a parameter typo fails at plan time with the field path and a suggestion.

Fast (no podman, no training): the run itself is `make quickstart`, and tests/test_train_grpo.py trains the
same configuration end to end.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from nodus.cli.main import cli

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "examples" / "quickstart"


def nodus(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.output


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("environment.yaml", "env/reverse_words.py", "trainingjob.yaml"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(QUICKSTART / name, tmp_path / name)
    (tmp_path / "nodus.lock").write_text("lockfileVersion: 1\nenvironments: {}\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_pinned_model_revision_is_the_recipes() -> None:
    from nodus.runtimes.tiny_model import Recipe, revision

    pinned = re.search(r"hf://nodus/tiny-qwen3@([0-9a-f]{40})", (QUICKSTART / "trainingjob.yaml").read_text())
    assert pinned is not None
    assert pinned.group(1) == revision(Recipe(), QUICKSTART / "env" / "reverse_words.py")


def test_the_quickstart_plans_with_the_managed_runtime(project: Path) -> None:
    code, output = nodus("plan", str(project))
    assert code == 2, output
    assert "+ Environment/reverse-words" in output and "+ TrainingJob/quickstart" in output
    assert "+ TrainingRuntime/nodus/grpo-lora" in output


def test_a_parameter_typo_fails_at_plan_time_with_a_suggestion(project: Path) -> None:
    job = (project / "trainingjob.yaml").read_text().replace("learningRate:", "learning_rate:")
    (project / "trainingjob.yaml").write_text(job)
    code, output = nodus("plan", str(project))
    assert code == 1, output
    line = next(line for line in output.splitlines() if "learning_rate" in line)
    assert "trainingjob.yaml" in line and "TrainingJob/quickstart" in line, line
    assert "spec.parameters.learning_rate" in line and "learningRate" in line, line


def test_the_reverse_words_tasks_keep_the_held_out_words_out_of_training() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("reverse_words", QUICKSTART / "env" / "reverse_words.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    train, test = module.tasks("train"), module.tasks("test")
    assert len(train) == 600 and len(test) == 64
    assert not {t["prompt"] for t in train} & {t["prompt"] for t in test}
    task = test[0]
    assert module.reward(f"<answer>{task['answer']}</answer>", task["answer"]) == 1.0
    assert module.reward("no tags", task["answer"]) is None
    assert json.dumps(task)  # plain data: it crosses the grader's wire


def test_the_quickstart_environment_passes_env_test_with_its_fixture_cases() -> None:
    """`nodus env test examples/quickstart`: every check, the fixture cases (full-reward, zero-reward, malformed)
    included, as the README says an Environment must."""
    code, output = nodus("env", "test", str(QUICKSTART))
    assert code == 0, output
    assert "✓ fixture" in output and "✗" not in output


def test_what_runs_leave_in_the_quickstart_folder_is_not_part_of_its_package(project: Path) -> None:
    """The package is env/ alone: a log, a `nodus cp` copy and a saved dry run in the project folder change
    neither its file set nor its digest, so `nodus plan` does not ask to bump spec.version."""
    from nodus.builder.package_files import package_files
    from nodus.builder.plan import source_digest

    package = project / "env"
    files, digest = package_files(package), source_digest(package)
    assert files == ["reverse_words.py"]
    (project / "quickstart.log").write_text("step 1\n")
    (project / "curves.png").write_bytes(b"png")
    dry = CliRunner().invoke(cli, ["apply", "-f", "trainingjob.yaml", "--dry-run", "-o", "yaml"]).stdout
    (project / "dry.yaml").write_text(dry)  # `> dry.yaml`: the documents, not the lines on stderr
    assert package_files(package) == files and source_digest(package) == digest
    code, output = nodus("plan", ".")
    assert code == 2 and "bump spec.version" not in output and "+ Job/" not in output, output
