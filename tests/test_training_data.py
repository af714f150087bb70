"""A TrainingJob's data from a Volume, through `nodus apply`: the column mapping checked against the file at plan time;
a run waits for its upload (`nodus cp`), launches fixed to the revision it found, and a later upload changes nothing
of it; the trainer gets NODUS_INPUT_DATA (the revision's folder), `params.json`'s `data` and, for a distillation,
NODUS_INPUT_TEACHER. The runtime is a few lines of Python that report what they were given.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from nodus.cli.main import cli

pytestmark = pytest.mark.slow

REPORTER = """
import json, os, pathlib
params = json.loads((pathlib.Path(os.environ["NODUS_INPUT_PARAMS"]) / "params.json").read_text())
data = pathlib.Path(os.environ["NODUS_INPUT_DATA"]) / params["data"]["path"]
out = pathlib.Path(os.environ["NODUS_OUTPUT_DIR"])
report = {"data": params["data"], "lines": data.read_text().splitlines(), "teacher": os.environ.get("NODUS_INPUT_TEACHER"),
          "teacherRevision": params.get("teacherRevision"), "tracking": params.get("tracking"),
          "env": {k: os.environ.get(k) for k in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME")},
          "hfTokenSha": __import__("hashlib").sha256(os.environ.get("HF_TOKEN", "").encode()).hexdigest(),
          "mlflowTokenSha": __import__("hashlib").sha256(os.environ.get("MLFLOW_TRACKING_TOKEN", "").encode()).hexdigest()}
(out / "report.json").write_text(json.dumps(report))
"""
RUNTIME = """apiVersion: nodus.dev/v1beta1
kind: TrainingRuntime
metadata: {{name: reporter}}
spec:
  command: [{python}, -c, {script}]
  tasks: [SFT, Distill]
  modes: [Train]
  outputs: [{{name: outputs, path: /nodus/outputs}}]
"""
JOB = """apiVersion: nodus.dev/v1beta1
kind: TrainingJob
metadata: {{name: sft}}
spec:
  runtime: reporter
  task: {task}
  data: {{volume: chats, path: chats.jsonl, format: JSONL, columns: {{prompt: question, completion: {answer}}}}}
{extra}"""
VOLUME = "apiVersion: nodus.dev/v1\nkind: Volume\nmetadata: {name: chats}\nspec: {}\n"


def nodus(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def status() -> dict[str, Any]:
    found: dict[str, Any] = json.loads(nodus("get", "tj", "sft", "-o", "json")[1])["status"]
    return found


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("NODUS_HOME", raising=False)
    monkeypatch.delenv("NODUS_STATE", raising=False)
    (tmp_path / "nodus.lock").write_text("lockfileVersion: 1\n")
    (tmp_path / "runtime.yaml").write_text(
        RUNTIME.format(python=json.dumps(sys.executable), script=json.dumps(REPORTER))
    )
    (tmp_path / "volume.yaml").write_text(VOLUME)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_run_waits_for_its_data_and_keeps_the_revision_it_launched_with(project: Path) -> None:
    (project / "job.yaml").write_text(JOB.format(task="SFT", answer="answer", extra=""))
    code, output = nodus("apply", ".", "--yes")
    assert code == 0, output
    waiting = status()
    assert (waiting["phase"], waiting["reason"]) == ("Pending", "VolumeNotReady"), waiting
    assert (
        "Volume chats revision 0 has no chats.jsonl (upload it: nodus cp FILE vol/chats:chats.jsonl)"
        in waiting["message"]
    )

    (project / "chats.jsonl").write_text('{"question": "a b", "answer": "b a"}\n')
    assert nodus("cp", "chats.jsonl", "vol/chats:chats.jsonl")[0] == 0
    code, output = nodus("apply", ".", "--yes", "--wait", "--timeout", "2m")
    assert code == 0 and "TrainingJob/sft: Succeeded" in output, output
    assert status()["data"] == {"volume": "chats", "revision": 1, "path": "chats.jsonl"}
    report = json.loads((project / ".nodus/jobs/default/sft/outputs/report.json").read_text())
    assert report["lines"] == ['{"question": "a b", "answer": "b a"}']
    assert report["data"] == {
        "volume": "chats",
        "revision": 1,
        "path": "chats.jsonl",
        "format": "JSONL",
        "columns": {"prompt": "question", "completion": "answer"},
    }

    (project / "chats.jsonl").write_text('{"question": "c d", "answer": "d c"}\n')
    assert nodus("cp", "chats.jsonl", "vol/chats:chats.jsonl")[0] == 0  # revision 2: the finished run keeps 1
    assert nodus("apply", ".", "--yes")[0] == 0
    assert status()["data"]["revision"] == 1


def test_a_mapping_that_names_a_missing_column_is_refused_at_plan_time(project: Path) -> None:
    (project / "chats.jsonl").write_text('{"question": "a b", "answer": "b a"}\n')
    assert nodus("apply", ".", "--yes")[0] == 0  # the Volume
    assert nodus("cp", "chats.jsonl", "vol/chats:chats.jsonl")[0] == 0
    (project / "job.yaml").write_text(JOB.format(task="SFT", answer="reply", extra=""))
    code, output = nodus("plan", ".")
    assert code == 1, output
    assert (
        "job.yaml: TrainingJob/sft: spec.data.columns.completion: column 'reply' is not in "
        "vol/chats:chats.jsonl (revision 1); it has: question, answer"
    ) in output, output


def test_a_distillation_gets_its_teacher(
    project: Path, tiny_model: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", tiny_model[0])
    teacher = f"hf://nodus/tiny-qwen3@{tiny_model[1]}"
    (project / "chats.jsonl").write_text('{"question": "a b", "answer": "b a"}\n')
    assert nodus("apply", ".", "--yes")[0] == 0
    assert nodus("cp", "chats.jsonl", "vol/chats:chats.jsonl")[0] == 0
    (project / "job.yaml").write_text(
        JOB.format(task="Distill", answer="answer", extra=f'  teacher: {{uri: "{teacher}"}}\n')
    )
    code, output = nodus("apply", ".", "--yes", "--wait", "--timeout", "2m")
    assert code == 0 and "TrainingJob/sft: Succeeded" in output, output
    report = json.loads((project / ".nodus/jobs/default/sft/outputs/report.json").read_text())
    assert report["teacherRevision"] == teacher
    assert Path(report["teacher"]).is_dir() and (Path(report["teacher"]) / "config.json").is_file()
    assert Path(report["teacher"]).is_relative_to(project / ".nodus" / "models")  # imported, read-only, as a model


SECRETS = """apiVersion: nodus.dev/v1
kind: Secret
metadata: {name: hf-token}
spec: {keys: [HF_TOKEN], envPrefix: TEST_}
---
apiVersion: nodus.dev/v1
kind: Secret
metadata: {name: mlflow}
spec: {keys: [MLFLOW_TRACKING_TOKEN], provider: File, path: secrets/mlflow.env}
"""


def test_secrets_reach_the_trainer_and_no_file_of_the_state_folder(
    project: Path, tiny_model: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import hashlib

    monkeypatch.setenv("HF_HUB_CACHE", tiny_model[0])
    hf_value, mlflow_value = "hf_SECRETvalue_2d1f0c", "mlflow-SECRET-7e3a9b"
    (project / "secrets").mkdir()
    (project / "secrets" / "mlflow.env").write_text(f"MLFLOW_TRACKING_TOKEN={mlflow_value}\n")
    (project / "secrets.yaml").write_text(SECRETS)
    (project / "chats.jsonl").write_text('{"question": "a b", "answer": "b a"}\n')
    assert nodus("apply", ".", "--yes")[0] == 0
    assert nodus("cp", "chats.jsonl", "vol/chats:chats.jsonl")[0] == 0
    model = f'  model: {{uri: "hf://nodus/tiny-qwen3@{tiny_model[1]}", secret: hf-token}}\n'
    tracking = "  tracking: {mlflow: {uri: http://127.0.0.1:5999, secret: mlflow, experiment: sft-runs}}\n"
    (project / "job.yaml").write_text(JOB.format(task="SFT", answer="answer", extra=model + tracking))

    code, output = nodus("apply", ".", "--yes")  # TEST_HF_TOKEN is not set: refused, naming the Secret and key
    assert code != 0 or "Failed" in output, output
    failed = status()
    assert failed["phase"] == "Failed", failed
    assert (
        "spec.model.secret: Secret hf-token key HF_TOKEN: the environment variable TEST_HF_TOKEN is not set"
        in (failed["message"])
    )

    monkeypatch.setenv("TEST_HF_TOKEN", hf_value)
    code, output = nodus("apply", ".", "--yes", "--wait", "--timeout", "2m")
    assert code == 0 and "TrainingJob/sft: Succeeded" in output, output
    report = json.loads((project / ".nodus/jobs/default/sft/outputs/report.json").read_text())
    assert report["hfTokenSha"] == hashlib.sha256(hf_value.encode()).hexdigest()
    assert report["mlflowTokenSha"] == hashlib.sha256(mlflow_value.encode()).hexdigest()
    assert report["env"] == {"MLFLOW_TRACKING_URI": "http://127.0.0.1:5999", "MLFLOW_EXPERIMENT_NAME": "sft-runs"}
    assert report["tracking"] == {"mlflow": {"experiment": "sft-runs"}}
    for path in (project / ".nodus").rglob("*"):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            assert hf_value.encode() not in data and mlflow_value.encode() not in data, path
    code, output = nodus("describe", "tj/sft")
    assert hf_value not in output and mlflow_value not in output


BUDGET = """apiVersion: nodus.dev/v1
kind: Budget
metadata: {{name: daily}}
spec: {{limitUSD: "{limit}", period: Daily{kinds}}}
"""


def test_a_budget_holds_back_a_launch_whose_first_hold_would_pass_it(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NODUS_LOCAL_PRICE_PER_HOUR", "3.60")
    (project / "chats.jsonl").write_text('{"question": "a b", "answer": "b a"}\n')
    assert nodus("apply", ".", "--yes")[0] == 0
    assert nodus("cp", "chats.jsonl", "vol/chats:chats.jsonl")[0] == 0
    (project / "budget.yaml").write_text(BUDGET.format(limit="1.00", kinds=", kinds: [InferenceEndpoint]"))
    # The caps are below an hour at $3.60 (a Budget's first hold is the cap then); expectedDuration bounds the run's
    # own estimate, so admission's CapBelowFirstHold (an unknown run time is an hour) lets them start.
    extra = '  maxCostUSD: "{cap}"\n  expectedDuration: 5m\n'
    (project / "job.yaml").write_text(JOB.format(task="SFT", answer="answer", extra=extra.format(cap="2.00")))
    assert nodus("apply", ".", "--yes", "--wait", "--timeout", "2m")[0] == 0  # a Budget of endpoints only: runs
    assert status()["phase"] == "Succeeded"

    (project / "budget.yaml").write_text(BUDGET.format(limit="1.00", kinds=""))
    second = JOB.format(task="SFT", answer="answer", extra=extra.format(cap="2.50")).replace("name: sft", "name: sft2")
    (project / "job2.yaml").write_text(second)
    code, output = nodus("apply", ".", "--yes")
    assert code == 0, output
    held = json.loads(nodus("get", "tj", "sft2", "-o", "json")[1])["status"]
    assert (held["phase"], held["reason"]) == ("Pending", "BudgetExceeded"), held
    assert "Budget daily: $" in held["message"] and "this run's first hold $2.5000 would pass it" in held["message"]
    budget = json.loads(nodus("get", "budget", "daily", "-o", "json")[1])["status"]
    assert budget["phase"] == "Ready" and budget["period"] == "Daily" and float(budget["spentUSD"]) > 0, budget

    (project / "budget.yaml").write_text(BUDGET.format(limit="10.00", kinds=""))
    code, output = nodus("apply", ".", "--yes", "--wait", "--timeout", "2m")
    assert code == 0 and "TrainingJob/sft2: Succeeded" in output, output
