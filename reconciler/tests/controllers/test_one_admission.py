"""Admission is one function for `nodus apply --dry-run`, `nodus plan` and `nodus apply`: a GPU request the
project's host cannot meet (`Unschedulable`, naming the types asked for and what the host has) and a cap below the
first hold (`CapBelowFirstHold`) block all three alike, and none of them launches anything.

The host's GPUs are injected (a FakeExecutor bound to the project, whose capabilities say what the host has), so
these tests do not depend on the machine they run on having a GPU or not."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from nodus.cli.main import cli
from nodus.reconciler.executors.choose import bound
from nodus.reconciler.executors.protocol import Capabilities, HostGpus
from nodus.reconciler.project import Project
from nodus.testing.fake_executor import FakeExecutor

RUNTIME = """apiVersion: nodus.dev/v1beta1
kind: TrainingRuntime
metadata: {name: plain}
spec: {command: [python, train.py], tasks: [SFT]}
"""
JOB = """apiVersion: nodus.dev/v1beta1
kind: TrainingJob
metadata: {{name: tuned}}
spec:
  runtime: plain
{resources}  maxCostUSD: "{cap}"
"""
H100 = "  resources: {gpu: {type: [h100-sxm-80g], count: 1}}\n"


def nodus(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "nodus.lock").write_text("lockfileVersion: 1\nenvironments: {}\n")
    (root / "runtime.yaml").write_text(RUNTIME)
    for name in ("NODUS_PRICES", "NODUS_STATE", "NODUS_HOME", "NODUS_LOCAL_PRICE_PER_HOUR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(root)
    return root


def on_host(devices: tuple[str, ...], found_by: str) -> FakeExecutor:
    """A FakeExecutor for a host with these GPUs (one type name per device), found as `found_by` says."""
    return FakeExecutor(capabilities=Capabilities(services=True, host_gpus=HostGpus(devices, found_by)))


def blocking(out: str) -> list[tuple[str, str]]:
    (document,) = list(yaml.safe_load_all(out))
    return [(entry["reason"], entry["message"]) for entry in document["status"]["blockingReasons"]]


def test_a_gpu_request_on_a_host_without_gpus_is_unschedulable_everywhere(project: Path) -> None:
    (project / "job.yaml").write_text(JOB.format(resources=H100, cap="100.00"))
    executor = on_host((), "nvidia-smi not found")
    unschedulable = (
        "spec.resources.gpu.type: asks for 1 GPU of h100-sxm-80g; this host has no GPU (nvidia-smi not found)"
    )
    with bound(Project.find(project).jobs, executor):
        code, out, err = nodus("apply", "-f", "job.yaml", "-f", "runtime.yaml", "--dry-run")
        assert code == 1, out + err
        (said,) = [message for reason, message in blocking(out) if reason == "Unschedulable"]
        assert said.startswith(unschedulable), said
        code, out, err = nodus("plan", ".")
        assert code == 1 and f"job.yaml: TrainingJob/tuned: {unschedulable}" in err, out + err
        code, out, err = nodus("apply", ".", "--yes")
        assert code == 1 and f"job.yaml:1: TrainingJob/tuned: Unschedulable: {unschedulable}" in err, out + err
    assert executor.calls == []  # nothing launched, on CPU or otherwise

    # A host with another GPU names what it has.
    other = on_host(("rtx4090-24g", "rtx4090-24g"), "nvidia-smi")
    with bound(Project.find(project).jobs, other):
        code, out, err = nodus("plan", ".")
        assert code == 1 and "asks for 1 GPU of h100-sxm-80g; this host has 2 GPUs of rtx4090-24g" in err, err

    # A host with the GPU admits it (the cap is above its first hour).
    able = on_host(("h100-sxm-80g",), "nvidia-smi")
    with bound(Project.find(project).jobs, able):
        code, out, err = nodus("apply", "-f", "job.yaml", "-f", "runtime.yaml", "--dry-run")
        assert "Unschedulable" not in err, err
        code, out, err = nodus("apply", ".", "--yes")
        assert code == 0, out + err
    assert [call[0] for call in able.calls] == ["launch"]


def test_a_cap_below_the_first_hold_blocks_the_dry_run_plan_and_apply_alike(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NODUS_LOCAL_PRICE_PER_HOUR", "20")
    (project / "job.yaml").write_text(JOB.format(resources="", cap="0.10"))
    executor = on_host((), "nvidia-smi not found")
    low = "spec.maxCostUSD: 0.10 is below the first hold $20.00"
    with bound(Project.find(project).jobs, executor):
        code, out, err = nodus("apply", "-f", "job.yaml", "-f", "runtime.yaml", "--dry-run")
        assert code == 1, out + err
        assert [reason for reason, _ in blocking(out)] == ["CapBelowFirstHold"], out
        assert blocking(out)[0][1].startswith(low)
        code, out, err = nodus("plan", ".")
        assert code == 1 and f"job.yaml: TrainingJob/tuned: {low}" in err, out + err
        code, out, err = nodus("apply", ".", "--yes")
        assert code == 1 and f"TrainingJob/tuned: CapBelowFirstHold: {low}" in err, out + err
        assert executor.calls == []
        # Raised above the first hour, all three let it through.
        (project / "job.yaml").write_text(JOB.format(resources="", cap="30.00"))
        code, out, err = nodus("apply", "-f", "job.yaml", "-f", "runtime.yaml", "--dry-run")
        assert code == 0, out + err
        assert nodus("apply", ".", "--yes")[0] == 0
    assert [call[0] for call in executor.calls] == ["launch"]
