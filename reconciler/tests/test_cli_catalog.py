"""The catalog by name through the CLI: `nodus plan` and `apply --dry-run` of the seeds' TrainingJobs naming
`nodus/graph-coloring@1.0.0` (the real catalog and runtimes of this checkout) have no blocking reason;
`nodus get environments -n nodus` shows the seeds' table for every catalog entry; `describe` shows the summary,
licence, splits, a sample task (from a frozen manifest), the graders and the examples. No podman: nothing builds."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from nodus.builder.lockfile import Lock
from nodus.builder.store import Store
from nodus.cli.main import cli
from nodus.reconciler.controllers.environment import environment_status
from nodus.reconciler.planning.managed_environments import read_catalog
from nodus.reconciler.state.records import ResourceKey, ResourceRecord
from nodus.reconciler.views.catalog import describe_lines

ROOT = Path(__file__).resolve().parents[2]
CATALOG = ROOT / "catalog"
EXAMPLES = [ROOT / "examples/training/grpo.yaml", ROOT / "examples/environments/training-jobs/graph-coloring.yaml"]


def nodus(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("NODUS_CATALOG_DIR", raising=False)
    monkeypatch.delenv("NODUS_RUNTIMES_DIR", raising=False)
    # The seeds' jobs ask for an RTX 4090: this host has one (declared), so they are schedulable here.
    monkeypatch.setenv("NODUS_LOCAL_GPUS", "rtx4090-24g")
    root = tmp_path / "project"
    root.mkdir()
    (root / "nodus.lock").write_text("lockfileVersion: 1\n")
    monkeypatch.chdir(root)
    return root


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda path: path.name)
def test_a_job_naming_a_catalog_environment_plans_without_a_blocking_reason(project: Path, example: Path) -> None:
    shutil.copy(example, project / "job.yaml")
    code, out, err = nodus("plan", ".")
    assert code == 2, out + err
    assert "+ Environment/nodus/graph-coloring  (managed:catalog/graph-coloring/environment.yaml)" in out
    assert "does not exist" not in out + err and "blocked" not in out + err

    code, out, err = nodus("apply", "--dry-run", "-f", "job.yaml", "-o", "json")
    (job,) = [json.loads(out)] if isinstance(json.loads(out), dict) else json.loads(out)["items"]
    reasons = [entry["reason"] for entry in job["status"]["blockingReasons"]]
    assert "EnvironmentNotFound" not in reasons and "EnvironmentNotReady" not in reasons, reasons
    assert job["status"]["workload"]["environment"]["name"] == "graph-coloring"
    assert "nodus apply builds it from managed:catalog/graph-coloring/environment.yaml" in job["status"]["notes"][0]
    assert job["status"]["estimate"]["prices"]["version"]  # priced against the price table
    if not reasons:  # the seeds' job names no model: nothing else can block it on this host
        assert code == 0, err


def test_get_environments_in_project_nodus_lists_the_catalog_in_the_seeds_table(project: Path) -> None:
    code, out, err = nodus("get", "environments", "-n", "nodus")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "VERSION", "CATEGORY", "MODES", "PHASE"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert set(rows) == {path.parent.name for path in CATALOG.glob("*/environment.yaml")}
    assert rows["graph-coloring"].split()[:5] == ["graph-coloring", "1.0.0", "Reasoning", "Train,", "Evaluate"]
    assert "Pending (ImageNotBuilt)" in rows["gsm8k"]  # nothing built in this project: said, not hidden

    code, out, _ = nodus("get", "environments", "arithmetic", "-n", "nodus")
    assert code == 0 and "2.0.0" in out and "Math" in out
    code, out, err = nodus("get", "environments", "nothing", "-n", "nodus")
    assert code != 0 and "the catalog has: arithmetic" in out + err


def test_the_projects_own_gsm8k_in_nodus_lock_is_not_the_catalogs(project: Path) -> None:
    """nodus.lock keys the catalog's versions `nodus/NAME@VERSION`: an entry of the project's own gsm8k@1.0.0
    (built from the user's files) is not the catalog's nodus/gsm8k@1.0.0, and the other way round."""
    digest = "sha256:" + "1" * 64
    entry = f"image: {digest}, base: {digest}, requirements: {digest}, key: {digest}, builder: 0.1.0"
    (project / "nodus.lock").write_text(f"lockfileVersion: 1\nenvironments:\n  gsm8k@1.0.0: {{{entry}}}\n")
    lock, images = Lock.load(project / "nodus.lock"), project / ".nodus" / "images"
    own = {"metadata": {"name": "gsm8k", "project": "default"}, "spec": {"version": "1.0.0"}}
    catalog = {"metadata": {"name": "gsm8k", "project": "nodus"}, "spec": {"version": "1.0.0"}}
    assert environment_status(own, lock=lock, images=images)["reason"] == "ImageMissing"  # its entry, no image
    assert environment_status(catalog, lock=lock, images=images)["reason"] == "ImageNotBuilt"  # no entry of its own


def test_describe_a_catalog_environment(project: Path) -> None:
    code, out, err = nodus("describe", "environment/graph-coloring", "-n", "nodus")
    assert code == 0, err
    for expected in (
        "Summary:",
        "Colour the vertices of a small generated graph",
        "License:     Apache-2.0",
        "Splits:",
        "Sample task:",
        "Graders:",
        "Program: the package's reward, Binary",
        "fixture cases checked at build time",
        "Examples:",
        "grpo-lora: GRPO with LoRA",
        "measured: not measured yet",
        "Pending",
    ):
        assert expected in out, expected
    code, out, err = nodus("describe", "environment/nothing", "-n", "nodus")
    assert code != 0 and "is not in the catalog" in out + err


def test_describe_shows_the_splits_and_a_sample_task_once_built(tmp_path: Path) -> None:
    catalog, _ = read_catalog([CATALOG])
    entry = catalog[ResourceKey("Environment", "nodus", "graph-coloring")]
    store = Store(tmp_path / ".nodus")
    store.ensure()
    task = {"taskId": "t1", "prompt": "Colour this graph.\nEdges: 0-1", "metadata": {"vertices": 2}}
    digest = store.put_manifest((json.dumps(task) + "\n").encode())
    record = ResourceRecord(
        key=entry.desired.key,
        spec=entry.desired.document,
        spec_hash="",
        status={"phase": "Ready", "splits": {"train": 2000, "test": 200}, "manifests": {"test/0": digest}},
    )
    text = "\n".join(describe_lines(entry, record, store))
    assert "train  2000 tasks" in text and "test   200 tasks" in text
    assert "taskId:    t1" in text and "Edges: 0-1" in text and '"vertices": 2' in text
