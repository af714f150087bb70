"""`nodus apply -f FILE --dry-run -o yaml|json` and priced `nodus plan`: the workload, as a Job, with its estimate and
blocking reasons, read as apply would read the project, and nothing written; the plan's costs in JSON and
Markdown. No podman, no model: what is missing shows up as blocking reasons."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from nodus.cli.main import cli

REPO = Path(__file__).resolve().parents[3]
QUICKSTART = REPO / "examples" / "quickstart"


def nodus(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    for name in ("environment.yaml", "env/reverse_words.py", "trainingjob.yaml"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(QUICKSTART / name, root / name)
    (root / "nodus.lock").write_text("lockfileVersion: 1\nenvironments: {}\n")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    monkeypatch.setenv("NODUS_LOCAL_PRICE_PER_HOUR", "3.60")
    for name in ("NODUS_PRICES", "NODUS_STATE", "NODUS_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(root)
    return root


def annotate(root: Path, size: str = "140K", **replace: str) -> None:
    """The job with a size annotation (the tiny model's name has none, and its files are not here)."""
    text = (root / "trainingjob.yaml").read_text()
    text = text.replace(
        "metadata: {name: quickstart}", f"metadata: {{name: quickstart, annotations: {{nodus.dev/parameters: {size}}}}}"
    )
    for old, new in replace.items():
        text = text.replace(old, new)
    (root / "trainingjob.yaml").write_text(text)


def reasons(document: dict[str, Any]) -> list[str]:
    return [entry["reason"] for entry in document["status"]["blockingReasons"]]


def test_the_dry_run_prints_the_workload_priced_and_writes_nothing(project: Path) -> None:
    annotate(project)
    code, out, err = nodus("apply", "-f", "trainingjob.yaml", "-f", "environment.yaml", "--dry-run", "-o", "yaml")
    assert code == 1, out  # not built, not cached: blocked
    (document,) = list(yaml.safe_load_all(out))
    assert document["kind"] == "Job" and document["metadata"] == {
        "name": "quickstart",
        "project": "default",
        "annotations": {"nodus.dev/dry-run": "true"},  # a saved dry run is never applied
    }
    spec = document["spec"]
    assert spec["owner"] == "TrainingJob/quickstart"
    assert spec["command"] == ["python", "-m", "nodus.runtimes.grpo_lora"]  # as the runtime wrote it
    assert spec["env"] == {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    assert spec["resources"] == {"cpu": 2, "memory": "4Gi", "nodes": 1} and spec["maxCostUSD"] == "1.00"
    # The whole workload an executor would be given is status.workload; the variables set at run time, platformEnv.
    assert "NODUS_ATTEMPT_API" in document["status"]["platformEnv"]
    workload = document["status"]["workload"]
    assert workload["apiVersion"] == "nodus.dev/workload/v1"
    assert workload["key"] == {"project": "default", "name": "quickstart", "kind": "TrainingJob"}
    assert workload["command"] == spec["command"] and workload["env"] == spec["env"]
    assert workload["params"]["parameters"]["steps"] == 60 and workload["params"]["parameters"]["groupSize"] == 8
    assert workload["params"]["runtime"]["name"] == "nodus/grpo-lora"
    assert workload["pricePerHourUSD"] == "3.60" and workload["maxCostUSD"] == "1.00"
    assert workload["model"]["uri"].startswith("hf://nodus/tiny-qwen3@")
    # The Environment by name and version only: not built, so no image or manifest digest to name yet.
    environment = workload["environment"]
    assert (environment["name"], environment["version"], environment["trainTasks"]) == ("reverse-words", "1.0.0", 600)
    assert environment["imageDigest"] is None and environment["manifests"] == {}
    assert environment["package"]["hostHint"] == (project / "env").resolve().as_uri()  # the package alone

    status = document["status"]
    assert status["dryRun"] is True and status["action"] == "create"
    estimate = status["estimate"]
    assert estimate["preset"] == "small-lora-cpu" and estimate["method"] == "LoRA"
    # 60 x 0.42 s + 128 x 0.015 s + 1 s caching + 6.5 s start-up, at $3.60 an hour.
    assert estimate["durationSeconds"] == pytest.approx(60 * 0.42 + 128 * 0.015 + 1 + 6.5, abs=0.1)
    assert estimate["costUSD"] == "0.0346" and estimate["firstHoldUSD"] == "0.0346"
    assert estimate["startTime"].endswith("Z")
    assert estimate["prices"]["version"] == "2026-11-29"
    assert estimate["prices"]["file"].endswith("catalog/prices.yaml")
    assert estimate["prices"]["overrides"] == ["$NODUS_LOCAL_PRICE_PER_HOUR"]
    assert estimate["unpriced"] == []
    # Not built, not cached: both block it, and say what to do.
    assert reasons(document) == ["EnvironmentNotReady", "ModelNotCached"]
    assert "nodus apply --build" in document["status"]["blockingReasons"][0]["message"]
    assert err.splitlines()[:2] == [
        f"trainingjob.yaml:5: TrainingJob/quickstart: {entry['reason']}: {entry['message']}"
        for entry in document["status"]["blockingReasons"]
    ]
    assert err.splitlines()[-1] == "Dry run blocked: 2 blocking reasons; nothing was applied"
    # Nothing written: no state folder, no store, no lease.
    assert not (project / ".nodus").exists()


def test_json_and_several_files_and_folders(project: Path) -> None:
    annotate(project)
    second = project / "jobs"
    second.mkdir()
    text = (project / "trainingjob.yaml").read_text().replace("name: quickstart", "name: second")
    (second / "second.yaml").write_text(text)
    code, out, _ = nodus(
        "apply", "-f", "trainingjob.yaml", "-f", "environment.yaml", "-f", "jobs", "--dry-run", "-o", "json"
    )
    assert code == 1, out
    listed = json.loads(out)
    assert listed["kind"] == "List"
    assert [item["metadata"]["name"] for item in listed["items"]] == ["quickstart", "second"]
    code, out, _ = nodus("apply", "-f", "trainingjob.yaml", "-f", "environment.yaml", "--dry-run", "-o", "json")
    assert json.loads(out)["kind"] == "Job"


def test_an_admission_refusal_and_a_low_cap_block_it(project: Path) -> None:
    annotate(project, **{"learningRate:": "learning_rate:"})
    code, out, _ = nodus("apply", "-f", "trainingjob.yaml", "-f", "environment.yaml", "--dry-run")
    assert code == 1, out
    (document,) = list(yaml.safe_load_all(out))
    assert reasons(document)[0] == "InvalidParameters"
    assert "did you mean 'learningRate'" in document["status"]["blockingReasons"][0]["message"]
    assert "env" not in document["spec"] and "workload" not in document["status"]  # nothing compiled: refused

    annotate(project, **{"learning_rate:": "learningRate:", 'maxCostUSD: "1.00"': 'maxCostUSD: "0.01"'})
    code, out, _ = nodus("apply", "-f", "trainingjob.yaml", "-f", "environment.yaml", "--dry-run")
    (document,) = list(yaml.safe_load_all(out))
    assert "CapBelowFirstHold" in reasons(document)
    assert document["status"]["estimate"]["firstHoldUSD"] == "0.01"


def test_an_unknown_model_size_is_unpriced_not_free(project: Path) -> None:
    code, out, _ = nodus("apply", "-f", "trainingjob.yaml", "-f", "environment.yaml", "--dry-run")
    assert code == 1, out
    (document,) = list(yaml.safe_load_all(out))
    estimate = document["status"]["estimate"]
    assert estimate["costUSD"] is None and estimate["resources"] is None
    assert estimate["unpriced"][0]["item"] == "resources"
    assert "nodus.dev/parameters" in estimate["unpriced"][0]["reason"]


def test_prices_from_a_file_and_the_project(project: Path, tmp_path: Path) -> None:
    annotate(project, maxCostUSD="expectedDuration: 1h\n  maxCostUSD")
    (project / "prices.yaml").write_text('version: "team-3"\ncpu: {local: "1.00"}\n')
    code, out, _ = nodus("apply", "-f", "trainingjob.yaml", "-f", "environment.yaml", "--dry-run", "-o", "json")
    assert code == 1, out
    estimate = json.loads(out)["status"]["estimate"]
    # $NODUS_LOCAL_PRICE_PER_HOUR (3.60) still wins over the project's cpu.local.
    assert estimate["prices"]["version"] == "team-3" and estimate["costUSD"] == "3.60"
    flag = tmp_path / "flag.yaml"
    flag.write_text('version: "flag-1"\n')
    code, out, _ = nodus(
        "apply", "-f", "trainingjob.yaml", "-f", "environment.yaml", "--dry-run", "-o", "json", "--prices", str(flag)
    )
    assert code == 1, out
    prices = json.loads(out)["status"]["estimate"]["prices"]
    assert prices["version"] == "flag-1" and prices["overrides"][-2:] == [str(flag), "$NODUS_LOCAL_PRICE_PER_HOUR"]


def test_every_blocking_reason_is_listed_and_exits_1(project: Path) -> None:
    # Two parameter typos and an Environment that is not built: admission stops at the first; the dry run lists all.
    annotate(project, **{"learningRate:": "learning_rate:", "saveSteps:": "save_steps:"})
    code, out, err = nodus("apply", "-f", "trainingjob.yaml", "-f", "environment.yaml", "--dry-run")
    assert code == 1, out
    (document,) = list(yaml.safe_load_all(out))
    assert reasons(document) == ["InvalidParameters", "InvalidParameters", "EnvironmentNotReady", "ModelNotCached"]
    lines = err.splitlines()
    assert lines[0] == (
        "trainingjob.yaml:5: TrainingJob/quickstart: InvalidParameters: spec.parameters.learning_rate: "
        "unknown parameter; did you mean 'learningRate'?"
    )
    assert lines[1].endswith("spec.parameters.save_steps: unknown parameter; did you mean 'saveSteps'?")
    assert lines[2].startswith(
        "trainingjob.yaml:5: TrainingJob/quickstart: EnvironmentNotReady: spec.environment.name:"
    )
    assert lines[3].startswith("trainingjob.yaml:5: TrainingJob/quickstart: ModelNotCached: spec.model.uri:")
    assert lines[4] == "Dry run blocked: 4 blocking reasons; nothing was applied"


@pytest.mark.parametrize("typo", [False, True])
def test_the_printed_job_is_valid_input_to_validate(project: Path, typo: bool) -> None:
    annotate(project, **({"learningRate:": "learning_rate:"} if typo else {}))
    _, out, _ = nodus("apply", "-f", "trainingjob.yaml", "-f", "environment.yaml", "--dry-run")
    (project / "compiled.yaml").write_text(out)
    code, said, err = nodus("validate", "compiled.yaml")
    assert code == 0, said + err
    assert "1 valid resource (1 Job)" in said + err


def test_a_dry_run_with_nothing_blocking_exits_0(project: Path, tmp_path: Path) -> None:
    """A job on no Environment and no model, under its cap: nothing blocks it."""
    (project / "runtime.yaml").write_text(
        "apiVersion: nodus.dev/v1beta1\nkind: TrainingRuntime\nmetadata: {name: plain}\n"
        "spec: {command: [python, train.py], tasks: [SFT]}\n"
    )
    (project / "plain.yaml").write_text(
        "apiVersion: nodus.dev/v1beta1\nkind: TrainingJob\nmetadata: {name: plain}\n"
        "spec: {runtime: plain, expectedDuration: 1m, resources: {cpu: 1}}\n"
    )
    code, out, err = nodus("apply", "-f", "plain.yaml", "-f", "runtime.yaml", "--dry-run")
    assert code == 0, out + err
    (document,) = list(yaml.safe_load_all(out))
    assert document["status"]["blockingReasons"] == [] and err == ""


def test_a_file_means_that_file_and_never_prunes(project: Path) -> None:
    """`-f FILE` reads that file (and the catalog's runtimes it names, and the store), as `nodus apply -f FILE`
    does: an unrelated file of the repository that does not parse is not read, and a sibling's Environment that was
    never applied is missing for both alike."""
    annotate(project)
    (project / "notes").mkdir()
    (project / "notes" / "broken.yaml").write_text("apiVersion: nodus.dev/v1\nkind: Nonsense\nmetadata: {}\n")
    code, out, err = nodus("apply", "-f", "trainingjob.yaml", "-f", "environment.yaml", "--dry-run")
    assert "left out" not in err and "broken.yaml" not in err, err
    assert reasons(next(yaml.safe_load_all(out))) == ["EnvironmentNotReady", "ModelNotCached"]
    code, out, err = nodus("apply", "-f", "trainingjob.yaml", "--dry-run")
    assert code == 1 and "broken.yaml" not in err, err
    (document,) = list(yaml.safe_load_all(out))
    assert reasons(document)[0] == "EnvironmentNotFound"
    code, out, applied = nodus("apply", "-f", "trainingjob.yaml", "--yes")
    assert code == 1 and "EnvironmentNotFound" in applied, out + applied  # apply says the same
    # A file never prunes: what is not in it is not deleted (kubectl's apply -f creates and updates only).
    code, out, err = nodus("apply", "-f", "environment.yaml", "--prune", "--yes")
    assert code == 1, out + err
    assert err.splitlines()[0] == (
        "error: environment.yaml: --prune with a file would destroy every resource that is not in it; "
        "prune from the repository's folder"
    ), err
    code, out, err = nodus("plan", "environment.yaml", "--prune")
    assert code == 1 and "--prune with a file" in err, out + err


def test_what_a_dry_run_refuses(project: Path) -> None:
    code, _, err = nodus("apply", "-f", "environment.yaml", "--dry-run")
    assert code == 1 and "no TrainingJob or Job to dry-run" in err
    code, _, err = nodus("apply", "-f", "trainingjob.yaml", "-f", "environment.yaml", "-o", "yaml")
    assert code == 1 and "-o is for --dry-run" in err


def test_plan_prices_its_trainingjobs(project: Path) -> None:
    annotate(project)
    code, out, _ = nodus("plan", "-o", "json")
    assert code == 2, out
    costs = json.loads(out)["costs"]
    assert costs["oneOffUSD"] == "0.0346" and costs["runs"] == 1
    action = costs["actions"]["TrainingJob/quickstart"]
    assert action["action"] == "create" and action["changeUSD"] == "+0.0346"
    assert action["estimate"]["preset"] == "small-lora-cpu"
    code, out, _ = nodus("plan", str(project), "-o", "markdown")
    lines = out.splitlines()
    assert lines[0] == "<!-- nodus-plan -->"
    assert lines[3].startswith("**Estimated cost:** **$0.0346** one-off for 1 training run")
    assert f"**Next:** `nodus apply {project}` applies this plan." in out
    code, out, _ = nodus("plan")
    assert "      # cost: $0.0346" in out and out.rstrip().splitlines()[-1].startswith("Estimated cost: $0.0346")


def test_a_saved_dry_run_in_the_folder_is_never_applied_as_a_resource(project: Path) -> None:
    """`nodus apply -f job.yaml --dry-run -o yaml > dry.yaml` in the project: its Job document is marked
    (`nodus.dev/dry-run: "true"`), so the next plan, apply or dry run leaves it out with a note, rather than
    planning a Job of the TrainingJob's name (which then failed NameTaken)."""
    annotate(project)
    code, out, _ = nodus("apply", "-f", "trainingjob.yaml", "--dry-run", "-o", "yaml")
    (document,) = list(yaml.safe_load_all(out))
    assert document["metadata"]["annotations"] == {"nodus.dev/dry-run": "true"}
    (project / "dry.yaml").write_text(out)

    code, out, err = nodus("plan", ".")
    assert code == 2, out + err
    assert "Job/quickstart" not in out.replace("TrainingJob/quickstart", "")
    assert "dry.yaml:1:1: Job/quickstart: the output of a dry run (annotation nodus.dev/dry-run), left out" in err

    code, out, err = nodus("apply", "-f", "trainingjob.yaml", "--dry-run", "-o", "yaml")
    assert "NameTaken" not in err and "dry.yaml" not in err.replace("dry.yaml:1:1: Job/quickstart: the output", "")

    # Named on its own, it is refused: the file a dry run was made from is what gets applied.
    code, out, err = nodus("apply", "-f", "dry.yaml", "--yes")
    assert code == 1 and "dry.yaml:1:1: Job/quickstart: the output of a dry run" in err
    assert "a dry run is never applied; apply the file it was made from" in err
