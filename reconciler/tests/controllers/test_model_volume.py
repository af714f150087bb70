"""An exported LoRA adapter is a model (issue 25, problem 4): a Volume revision holding one resolves to its base model
(named by the exporting run's provenance.json) plus the adapter, the workload names both and the trainer gets the
adapters beside the base (NODUS_INPUT_ADAPTERS); a revision no trainer can load is refused by `nodus plan`, naming the
file, the resource and the field; the estimate knows the base model's size.

Fast: no trainer runs. The base model is a config.json in a Hugging Face cache folder of the test's own; the Volume
revisions are folders laid out as an export lays them out (uploaded with `nodus cp`).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import cast

import pytest
from click.testing import CliRunner

from nodus.cli.main import cli
from nodus.reconciler import volume_models
from nodus.reconciler.controllers.trainingjob import model_status
from nodus.reconciler.endpoints.model_table import ModelTable
from nodus.reconciler.endpoints.served import Served, served_model
from nodus.reconciler.executors import Executor
from nodus.reconciler.executors.local.resolve import ADAPTERS_VARIABLE, MODEL_VARIABLE, resolve
from nodus.reconciler.executors.workload import AdapterArtifact, ModelArtifact, VolumeRevision, Workload, WorkloadKey
from nodus.reconciler.model_cache import MANIFEST, model_folder
from nodus.reconciler.pricing.facts import Context, size_of
from nodus.reconciler.pricing.prices import load_prices
from nodus.reconciler.project import Project
from nodus.reconciler.state.records import JSONObject, ResourceKey, ResourceRecord

REVISION = "0123456789abcdef0123456789abcdef01234567"
BASE = f"hf://acme/tiny@{REVISION}"
CONFIG = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "vocab_size": 400,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "intermediate_size": 128,
}
JOB = """apiVersion: nodus.dev/v1beta1
kind: TrainingJob
metadata: {{name: dpo-from-sft}}
spec:
  runtime: nodus/dpo
  state: Suspended
  model: {{volume: {{name: {volume}, revision: 1}}}}
  parameters: {{steps: 2}}
"""


def nodus(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project in tmp_path/project (the current folder) and a Hugging Face cache holding the base model BASE."""
    cache = tmp_path / "hub"
    snapshot = cache / "models--acme--tiny" / "snapshots" / REVISION
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps(CONFIG))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.delenv("NODUS_HOME", raising=False)
    monkeypatch.delenv("NODUS_STATE", raising=False)
    root = tmp_path / "project"
    (root / "volumes").mkdir(parents=True)
    (root / "nodus.lock").write_text("lockfileVersion: 1\n")
    monkeypatch.chdir(root)
    return root


def exported(folder: Path, *, base: str | None = BASE, adapter: bool = True) -> Path:
    """A run's outputs as `exportTo` commits them: adapter/ (adapter_config.json), provenance.json naming `base`."""
    folder.mkdir(parents=True)
    if adapter:
        (folder / "adapter").mkdir()
        (folder / "adapter" / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 8}))
    else:
        (folder / "notes.txt").write_text("no weights here\n")
    if base is not None:
        provenance = {"trainingJob": "sft", "model": {"revision": base, "digest": "sha256:00"}}
        (folder / "provenance.json").write_text(json.dumps(provenance))
    (folder / "results.json").write_text("{}\n")
    return folder


def upload(project: Path, name: str, local: Path) -> None:
    """Volume `name` applied, and `local` copied into it as its revision 1 (`nodus cp -r`)."""
    (project / "volumes" / f"{name}.yaml").write_text(
        f"apiVersion: nodus.dev/v1\nkind: Volume\nmetadata: {{name: {name}}}\nspec: {{accessMode: ReadWriteOnce}}\n"
    )
    code, output = nodus("apply", "volumes", "--yes")
    assert code == 0, output
    code, output = nodus("cp", "-r", str(local), f"vol/{name}:")
    assert code == 0, output


def test_an_exported_adapter_resolves_to_its_base_model_and_the_adapter(project: Path, tmp_path: Path) -> None:
    upload(project, "sft-out", exported(tmp_path / "outputs"))
    found = volume_models.resolve(Project.find(project), "default", "sft-out", 1)
    assert found is not None
    assert found.base_uri == BASE and found.base_volume is None
    assert found.adapters == (volume_models.AdapterRef("sft-out", 1, "adapter"),)
    assert (found.base_folder / "config.json").is_file()  # the cached base: what the estimate sizes
    # A revision not there yet (an export of the same plan makes it) is no model and no refusal.
    assert volume_models.resolve(Project.find(project), "default", "sft-out", 2) is None


def test_an_adapter_trained_over_an_exported_adapter_resolves_to_the_first_base_and_both(
    project: Path, tmp_path: Path
) -> None:
    upload(project, "sft-out", exported(tmp_path / "sft"))
    upload(project, "dpo-out", exported(tmp_path / "dpo", base="volume:sft-out@1"))
    found = volume_models.resolve(Project.find(project), "default", "dpo-out", 1)
    assert found is not None and found.base_uri == BASE
    assert [adapter.name for adapter in found.adapters] == ["volume:sft-out@1", "volume:dpo-out@1"]


def test_a_full_model_export_is_its_model_folder(project: Path, tmp_path: Path) -> None:
    outputs = tmp_path / "full"
    (outputs / "model").mkdir(parents=True)
    (outputs / "model" / "config.json").write_text(json.dumps(CONFIG))
    upload(project, "full-out", outputs)
    found = volume_models.resolve(Project.find(project), "default", "full-out", 1)
    assert found is not None and found.adapters == () and found.base_volume == ("full-out", 1)
    assert found.base_folder.name == "model"


def test_the_plan_refuses_a_revision_that_holds_no_model(project: Path, tmp_path: Path) -> None:
    upload(project, "sft-out", exported(tmp_path / "outputs", adapter=False))
    (project / "job.yaml").write_text(JOB.format(volume="sft-out"))
    code, output = nodus("plan", ".")
    assert code == 1, output
    (line,) = [line for line in output.splitlines() if "TrainingJob/dpo-from-sft" in line]
    assert line.startswith(
        "error: job.yaml: TrainingJob/dpo-from-sft: spec.model.volume: Volume sft-out revision 1 holds no model"
    )
    assert "nodus cp" in line


def test_the_plan_refuses_an_adapter_whose_base_is_not_cached(project: Path, tmp_path: Path) -> None:
    missing = "hf://acme/other@" + "f" * 40
    upload(project, "sft-out", exported(tmp_path / "outputs", base=missing))
    (project / "job.yaml").write_text(JOB.format(volume="sft-out"))
    code, output = nodus("apply", ".", "--yes")
    assert code != 0, output
    (line, *_) = [line for line in output.splitlines() if "TrainingJob/dpo-from-sft" in line]
    assert "job.yaml:1: TrainingJob/dpo-from-sft: ModelNotCached: spec.model.volume:" in line, line
    assert missing in line and "huggingface-cli download acme/other" in line
    assert nodus("get", "tj", "dpo-from-sft")[0] != 0  # refused at plan time: nothing written


def test_the_plan_admits_an_exported_adapter_and_the_estimate_sizes_its_base(project: Path, tmp_path: Path) -> None:
    upload(project, "sft-out", exported(tmp_path / "outputs"))
    (project / "job.yaml").write_text(JOB.format(volume="sft-out"))
    code, output = nodus("plan", ".")
    assert code == 2 and "+ TrainingJob/dpo-from-sft" in output, output

    opened = Project.find(project)
    store = opened.open_state()
    try:
        records = tuple(store.list("Volume"))
    finally:
        store.close()
    model: JSONObject = {"volume": {"name": "sft-out", "revision": 1}}
    job: JSONObject = {"metadata": {"name": "dpo-from-sft"}, "spec": {"model": model}}
    context = Context(now=datetime.now(UTC), prices=load_prices(), project=opened, records=records)
    size = size_of(job, model, context)
    assert size is not None and size.source == f"config.json of {REVISION}", size


def test_the_workload_names_the_base_and_the_adapter_and_the_trainer_gets_both(project: Path, tmp_path: Path) -> None:
    upload(project, "sft-out", exported(tmp_path / "outputs"))
    opened = Project.find(project)
    imported = model_folder(opened, BASE)  # the base as the controller imports it from the cache
    imported.mkdir(parents=True)
    (imported / MANIFEST).write_text("{}")
    model = ModelArtifact(
        uri=BASE, adapters=(AdapterArtifact(volume=VolumeRevision(name="sft-out", revision=1), path="adapter"),)
    )
    assert model_status(model) == {"base": BASE, "adapters": ["volume:sft-out@1/adapter"], "merged": True}
    workload = Workload(
        key=WorkloadKey(project="default", name="dpo", kind="TrainingJob"), command=("true",), model=model
    )
    env = resolve(workload, opened).env
    assert env[MODEL_VARIABLE] == str(imported)
    assert env[ADAPTERS_VARIABLE] == str(opened.volume_revision("default", "sft-out", 1) / "adapter")


def test_an_endpoint_serves_an_exported_adapter_over_its_base(project: Path, tmp_path: Path) -> None:
    """`spec.model: {volume: ...}` of an InferenceEndpoint: the export's adapter/ folder over the base it names."""
    upload(project, "sft-out", exported(tmp_path / "outputs"))
    opened = Project.find(project)
    store = opened.open_state()
    try:
        document = {"kind": "InferenceEndpoint", "spec": {"model": {"volume": {"name": "sft-out", "revision": 1}}}}
        record = ResourceRecord(ResourceKey("InferenceEndpoint", "default", "chat"), document, "", 1)
        served = served_model(record, ModelTable(version="test"), opened, store, cast(Executor, None))
    finally:
        store.close()
    assert isinstance(served, Served)
    assert served.base == ModelArtifact(uri=BASE) and served.served_name == "sft-out"
    (adapter,) = served.adapters
    assert adapter.volume == VolumeRevision(name="sft-out", revision=1) and adapter.path == "adapter"


def test_the_dry_run_shows_the_base_and_the_adapter_and_blocks_what_the_plan_refuses(
    project: Path, tmp_path: Path
) -> None:
    upload(project, "sft-out", exported(tmp_path / "outputs"))
    upload(project, "empty", exported(tmp_path / "empty", adapter=False))
    (project / "job.yaml").write_text(JOB.format(volume="sft-out"))
    code, output = nodus("apply", "-f", "job.yaml", "--dry-run", "-o", "json")
    assert code == 0, output
    document = json.loads(output)
    assert document["status"]["blockingReasons"] == [], output
    workload = document["status"]["workload"]
    assert workload["model"]["uri"] == BASE
    assert workload["model"]["adapters"] == [{"volume": {"name": "sft-out", "revision": 1}, "path": "adapter"}]
    assert (workload["params"]["modelRevision"], workload["params"]["modelBase"]) == ("volume:sft-out@1", BASE)
    assert "NODUS_INPUT_ADAPTERS" in document["status"]["platformEnv"]

    (project / "job.yaml").write_text(JOB.format(volume="empty"))
    blocked = CliRunner().invoke(cli, ["apply", "-f", "job.yaml", "--dry-run", "-o", "json"])
    assert blocked.exit_code != 0 and "Dry run blocked: 1 blocking reason" in blocked.stderr
    (blocking,) = json.loads(blocked.stdout)["status"]["blockingReasons"]
    assert blocking["reason"] == "ModelNotFound" and "spec.model.volume: Volume empty revision 1" in blocking["message"]


def test_the_plan_sizes_a_model_the_same_plan_exports_by_its_producers_model(project: Path) -> None:
    """One plan: an SFT LoRA run exports to sft-out, a DPO run trains on its revision 1 (not there yet): the DPO
    run's estimate knows the model's size from the model the SFT run trains (the adapter's base)."""
    (project / "volumes" / "sft-out.yaml").write_text(
        "apiVersion: nodus.dev/v1\nkind: Volume\nmetadata: {name: sft-out}\nspec: {accessMode: ReadWriteOnce}\n"
    )
    (project / "sft.yaml").write_text(
        "apiVersion: nodus.dev/v1beta1\nkind: TrainingJob\nmetadata: {name: sft}\nspec:\n  runtime: nodus/sft\n"
        f'  state: Suspended\n  model: {{uri: "{BASE}"}}\n  parameters: {{steps: 2, lora: {{r: 8}}}}\n'
        "  exportTo: {volume: sft-out}\n"
    )
    (project / "job.yaml").write_text(JOB.format(volume="sft-out"))
    code, output = nodus("plan", ".")
    assert code == 2, output
    dpo = output[output.index("+ TrainingJob/dpo-from-sft") :].split("\n  + ")[0]
    assert "# cost:" in dpo and "the model's size is unknown" not in dpo, output
