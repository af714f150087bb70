"""`nodus run` through the CLI in a tmp project, on the local executor: a dry run that writes nothing, a real run
followed to Succeeded with its log, refusals in one line, and a later `nodus apply --prune` that keeps the Job.

No podman, no Ray, no GPU: the commands that run are host Python one-liners; GPU flags appear only in dry runs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from nodus.cli.main import cli

PRINT_HI = [sys.executable, "-c", "print('hi')"]


def nodus(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty project (a nodus.lock with nothing built), the host's price at 0, the catalog's price table and 8
    H100s on this host."""
    root = tmp_path / "project"
    root.mkdir()
    (root / "nodus.lock").write_text("lockfileVersion: 1\nenvironments: {}\n")
    monkeypatch.setenv("NODUS_ACCOUNTING_INTERVAL", "0.5")
    # This host has 8 H100s (declared): a gang's shape is priced here, not refused as Unschedulable.
    monkeypatch.setenv("NODUS_LOCAL_GPUS", ",".join(["h100-sxm-80g"] * 8))
    for name in ("NODUS_PRICES", "NODUS_STATE", "NODUS_HOME", "NODUS_LOCAL_PRICE_PER_HOUR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(root)
    return root


def test_a_dry_run_prints_the_priced_gang_and_writes_nothing(project: Path) -> None:
    args = ("run", "--dry-run", "--gpu", "H100", "--total-gpus", "16", "--launcher", "torchrun", "--")
    code, out, err = nodus(*args, "torchrun", "train.py")
    assert code == 0, out + err
    job = yaml.safe_load(out)
    assert (job["apiVersion"], job["kind"]) == ("nodus.dev/v1beta1", "Job")
    assert job["metadata"]["name"].startswith("run-")
    assert job["metadata"]["labels"] == {"nodus.dev/created-by": "nodus-run"}
    assert job["spec"]["launcher"] == "Torchrun" and job["spec"]["distributed"]["totalGPUs"] == 16
    status = job["status"]
    assert status["dryRun"] is True and status["action"] == "create" and status["blockingReasons"] == []
    assert status["topology"] == {"nodes": 2, "gpusPerNode": 8, "totalGPUs": 16}
    estimate = status["estimate"]
    assert estimate["resources"] == {"gpu": {"type": ["h100-sxm-80g"], "count": 8}, "nodes": 2}
    assert estimate["gangHoldUSD"] == estimate["firstHoldUSD"] == estimate["perHourUSD"]  # 16 GPUs' first hour
    assert float(estimate["gangHoldUSD"]) > 0 and float(estimate["assemblyBoundUSD"]) > 0
    assert not (project / ".nodus").exists()  # no store created, no lease taken

    code, out, _ = nodus(*args[:-1], "-o", "json", "--name", "gang", "--timeout", "30m", "--", "torchrun", "train.py")
    assert code == 0
    document = json.loads(out)
    assert document["metadata"]["name"] == "gang" and document["status"]["estimate"]["costUSD"] is not None
    assert not (project / ".nodus").exists()


def test_a_dry_run_below_its_first_hold_is_blocked(project: Path) -> None:
    code, out, err = nodus("run", "--dry-run", "--name", "tiny", "--gpu", "H100", "--max-cost", "0.10", "--", "x")
    assert code == 1, out + err
    assert "nodus run: Job/tiny: CapBelowFirstHold: spec.maxCostUSD: 0.10 is below the first hold" in err
    assert not (project / ".nodus").exists()


def test_a_run_on_the_local_executor_succeeds_and_its_log_says_hi(project: Path) -> None:
    code, out, err = nodus("run", "--wait", "--", *PRINT_HI)
    assert code == 0, out + err
    name = out.splitlines()[0]
    assert name.startswith("run-")
    assert out.splitlines()[1:] == [f"  nodus logs job/{name} -f", f"  nodus get job {name}"]
    assert f"Job/{name}: created" in err and f"Job/{name}: Succeeded" in err
    code, out, _ = nodus("logs", f"job/{name}")
    assert code == 0 and "hi" in out.splitlines()
    code, out, _ = nodus("get", "job", name, "-o", "json")
    record = json.loads(out)
    assert record["status"]["phase"] == "Succeeded"
    assert record["metadata"]["labels"] == {"nodus.dev/created-by": "nodus-run"}

    # The name is taken now: a second run of it is refused, and the first is left as it was.
    code, out, err = nodus("run", "--name", name, "--", *PRINT_HI)
    assert code == 1 and err.strip().splitlines() == [
        f"error: --name {name}: Job/{name} exists already in project default; pick another --name, or remove it "
        f"with `nodus delete job/{name}`"
    ]
    # A resource like any other: deleted by nodus delete.
    code, _, err = nodus("delete", f"job/{name}")
    assert code == 0, err
    assert nodus("get", "job", name)[0] == 1


def test_wait_exits_1_when_the_command_fails(project: Path) -> None:
    code, out, err = nodus("run", "--name", "boom", "--wait", "--", sys.executable, "-c", "raise SystemExit(7)")
    assert code == 1, out + err
    assert any(text.startswith("Wait failed: Job/boom: Failed") for text in err.splitlines()), err


@pytest.mark.parametrize(
    ("args", "start"),
    [
        (("run",), "error: --: no command to run"),
        (("run", "--nodes", "two", "--", "x"), "error: Invalid value for '--nodes': 'two' is not a valid integer"),
        (("run", "--gpus", "4", "--", "x"), "error: No such option '--gpus'"),
        (("run", "--env", "PET_NNODES=2", "--", "x"), "error: --env: PET_NNODES is set by nodus for every rank"),
        (("run", "--gpu", "X100", "--", "x"), "error: --gpu X100: not a GPU type the price table knows"),
        (("run", "-o", "json", "--", "x"), "error: -o: only with --dry-run"),
        (("run", "--nodes", "2", "--total-gpus", "8", "--gpu", "L4", "--", "x"), "error: --nodes and --total-gpus"),
    ],
)
def test_a_bad_flag_exits_1_with_one_line_and_writes_nothing(project: Path, args: tuple[str, ...], start: str) -> None:
    code, out, err = nodus(*args)
    assert code == 1, out + err
    assert len(err.strip().splitlines()) == 1 and err.startswith(start), err
    assert not (project / ".nodus").exists()


def test_apply_prune_of_the_folder_keeps_the_job_nodus_run_made(project: Path) -> None:
    code, out, err = nodus("run", "--name", "adhoc", "--wait", "--", *PRINT_HI)
    assert code == 0, out + err
    (project / "filed.yaml").write_text(
        f"apiVersion: nodus.dev/v1beta1\nkind: Job\nmetadata: {{name: filed}}\nspec:\n  command: {json.dumps(PRINT_HI)}\n"
    )
    code, out, _ = nodus("plan", "--prune")
    assert code == 2
    assert "Made by nodus run, kept (in no file; --prune leaves them, nodus delete removes them):" in out
    assert "    Job/adhoc" in out
    assert "0 to destroy" in out and "1 made by nodus run kept" in out
    code, out, err = nodus("apply", "--prune", "--yes")
    assert code == 0, out + err
    assert "adhoc" not in err  # not deleted, not touched
    code, out, _ = nodus("get", "job", "adhoc", "-o", "json")
    assert code == 0 and json.loads(out)["status"]["phase"] == "Succeeded"


def test_apply_dry_run_prices_a_plain_job_of_the_files(project: Path) -> None:
    (project / "gang.yaml").write_text(
        "apiVersion: nodus.dev/v1beta1\nkind: Job\nmetadata: {name: gang}\nspec:\n  command: [torchrun, train.py]\n"
        "  launcher: Torchrun\n  resources: {gpu: {type: [h100-sxm-80g], count: 8}}\n  distributed: {nodes: 2}\n"
        "  timeout: 2h\n"
    )
    code, out, err = nodus("apply", "gang.yaml", "--dry-run")
    assert code == 0, out + err
    job = yaml.safe_load(out)
    assert job["metadata"]["name"] == "gang" and job["status"]["source"] == "gang.yaml:1"
    assert job["status"]["topology"] == {"nodes": 2, "gpusPerNode": 8, "totalGPUs": 16}
    estimate = job["status"]["estimate"]
    assert float(estimate["costUSD"]) == pytest.approx(2 * float(estimate["perHourUSD"]))  # 2h at 16 GPUs' rate
    assert "gangHoldUSD" in estimate and "assemblyBoundUSD" in estimate
    assert not (project / ".nodus").exists()


def test_a_gpu_run_this_host_cannot_meet_is_refused_by_the_dry_run_and_the_run_alike(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NODUS_LOCAL_GPUS", "none")
    said = "Unschedulable: spec.resources.gpu.type: asks for 1 GPU of h100-sxm-80g; this host has no GPU"
    code, out, err = nodus("run", "--dry-run", "--name", "needs-gpu", "--gpu", "H100", "--", "python", "-c", "0")
    assert code == 1 and said in err, out + err
    code, out, err = nodus("run", "--name", "needs-gpu", "--gpu", "H100", "--", "python", "-c", "0")
    assert code == 1 and said in err, out + err  # refused before anything is written: never run on the CPU
    assert nodus("get", "job", "needs-gpu")[0] != 0
