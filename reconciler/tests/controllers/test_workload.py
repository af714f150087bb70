"""The workload a TrainingJob compiles into: typed, serialised once, naming artifacts by content (no host path but
the marked package hint), and resolved by the local executor into the JobSpec the controller used to write itself
(package folder, manifests folder, model folder, the host's interpreter)."""

from __future__ import annotations

import json
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from nodus.errors import ConfigError
from nodus.reconciler.controllers.admission import admit
from nodus.reconciler.controllers.trainingjob import compile_workload, package_source_digest
from nodus.reconciler.executors import EnvironmentSpec, JobSpec, ModelArtifact, VolumeRevision, Workload
from nodus.reconciler.executors.local.resolve import resolve
from nodus.reconciler.model_cache import MANIFEST, model_folder
from nodus.reconciler.pricing.prices import LaunchPrice
from nodus.reconciler.project import Project
from nodus.reconciler.state.records import ResourceKey, ResourceRecord, spec_hash

MODEL = "hf://nodus/tiny-qwen3@cbf57b6b8182c6aacc73392c929d3cfdfec8c246"
SOURCE = "sha256:" + "5" * 64
PRICE = LaunchPrice(Decimal("3.60"), "v1", "the test")


def record(
    kind: str, project: str, name: str, spec: dict[str, Any], status: dict[str, Any] | None = None
) -> ResourceRecord:
    document = {"apiVersion": "nodus.dev/v1beta1", "kind": kind, "metadata": {"name": name, "project": project}}
    document["spec"] = spec
    return ResourceRecord(ResourceKey(kind, project, name), document, spec_hash(document), status=status or {})


RUNTIME = record(
    "TrainingRuntime",
    "nodus",
    "grpo-lora",
    {
        "command": ["python", "-m", "nodus.runtimes.grpo_lora"],
        "tasks": ["GRPO"],
        "modes": ["Train"],
        "environmentTasks": "AttemptAPI",
        "managed": True,
        "env": {"HF_HUB_OFFLINE": "1"},
        "defaults": {"steps": 2},
    },
)
QUICKSTART = {
    "runtime": "nodus/grpo-lora",
    "model": {"uri": MODEL},
    "environment": {"name": "reverse-words@1.0.0", "trainTasks": 600, "heldOutTasks": 64, "seed": 0},
    "evaluation": {"baseline": True, "final": True},
    "parameters": {"steps": 60},
    "maxCostUSD": "1.00",
}


class Quickstart:
    """The quickstart's shape in a project: its Environment built (manifests in the content store, the package
    folder beside environment.yaml), the tiny model imported, the TrainingJob admitted."""

    def __init__(self, root: Path) -> None:
        (root / ".git").mkdir(parents=True)
        (root / "environment.yaml").write_text("kind: Environment\n")
        self.project = Project.find(root)
        self.project.files.ensure()
        self.manifests = {
            "train/0": self.project.files.put_manifest(b'{"id": "train-0"}\n'),
            "test/0": self.project.files.put_manifest(b'{"id": "test-0"}\n'),
        }
        self.model = model_folder(self.project, MODEL)
        self.model.mkdir(parents=True)
        (self.model / MANIFEST).write_text("{}")
        self.root = root

    def environment(self, **status: Any) -> ResourceRecord:
        return record(
            "Environment",
            "default",
            "reverse-words",
            {"version": "1.0.0", "package": {"path": ".", "loader": "reverse_words"}},
            {
                "phase": "Ready",
                "image": "sha256:" + "a" * 64,
                "graderImage": "localhost/nodus-env/reverse-words:1.0.0",
                "graderImageId": "sha256:" + "b" * 64,
                "manifests": dict(self.manifests),
                "source": f"{self.root / 'environment.yaml'}:3",
                **status,
            },
        )

    def workload(self, environment: ResourceRecord | None = None, *, container: bool = True) -> Workload:
        environment = environment or self.environment()
        job = record("TrainingJob", "default", "quickstart", QUICKSTART)
        verdict = admit(job.spec, RUNTIME.spec, {environment.key: environment.spec})
        assert verdict.admitted, verdict.message
        return compile_workload(
            job,
            verdict,
            RUNTIME,
            environment,
            price=PRICE,
            container=container,
            model=ModelArtifact(uri=MODEL),
            source_digest=SOURCE,
        )


@pytest.fixture
def quickstart(tmp_path: Path) -> Quickstart:
    return Quickstart(tmp_path / "project")


def test_a_workload_round_trips_through_its_one_serialisation(quickstart: Quickstart) -> None:
    workload = quickstart.workload()
    text = workload.to_json()
    assert Workload.from_json(text) == workload
    document = json.loads(text)
    assert document["apiVersion"] == "nodus.dev/workload/v1"
    assert document["key"] == {"project": "default", "name": "quickstart", "kind": "TrainingJob"}
    assert document["pricePerHourUSD"] == "3.60" and document["maxCostUSD"] == "1.00"
    assert document["environment"]["manifests"] == quickstart.manifests
    assert document["environment"]["package"]["sourceDigest"] == SOURCE
    assert document["model"] == {"uri": MODEL, "volume": None, "adapters": []}
    with pytest.raises(ValueError, match="extra"):
        Workload.model_validate({**document, "hostPaths": ["/tmp"]})  # extra="forbid": no field nodus does not know


def _strings(value: Any, where: str = "") -> list[tuple[str, str]]:
    if isinstance(value, dict):
        return [found for key, item in value.items() for found in _strings(item, f"{where}.{key}")]
    if isinstance(value, list):
        return [found for index, item in enumerate(value) for found in _strings(item, f"{where}[{index}]")]
    return [(where, value)] if isinstance(value, str) else []


@pytest.mark.parametrize("container", [True, False])
def test_the_workload_names_no_host_path_but_the_marked_package_hint(quickstart: Quickstart, container: bool) -> None:
    document = json.loads(quickstart.workload(container=container).to_json())
    host = [(where, text) for where, text in _strings(document) if text.startswith("/") or "file://" in text]
    assert host == [(".environment.package.hostHint", (quickstart.root.resolve()).as_uri())]
    assert sys.executable not in json.dumps(document) and str(quickstart.project.files.root) not in json.dumps(document)


def test_the_local_resolve_gives_the_job_spec_the_controller_compiled_before(quickstart: Quickstart) -> None:
    """What `compile_job` + `manifest_folder` + NODUS_INPUT_MODEL gave for the quickstart before workloads."""
    workload = quickstart.workload()
    spec = resolve(workload, quickstart.project)
    folder = quickstart.project.files.root / "manifests" / "by-environment" / "default-reverse-words@1.0.0"
    assert spec == JobSpec(
        name="quickstart",
        project="default",
        command=(sys.executable, "-m", "nodus.runtimes.grpo_lora"),
        kind="TrainingJob",
        generation=1,
        attempt=1,
        env={"HF_HUB_OFFLINE": "1", "NODUS_INPUT_MODEL": str(quickstart.model)},
        environment=EnvironmentSpec(
            name="reverse-words",
            version="1.0.0",
            image="localhost/nodus-env/reverse-words:1.0.0",
            digest="sha256:" + "b" * 64,
            paths=(str(quickstart.root.resolve()),),
            loader="reverse_words",
            train_tasks=600,
            held_out_tasks=64,
            seed=0,
            manifests=str(folder),
        ),
        params=workload.params,
        price_per_hour_usd="3.60",
        max_cost_usd="1.00",
        accounting_interval_s=10.0,
        image=None,
    )
    assert (folder / "train-0.jsonl").read_bytes() == b'{"id": "train-0"}\n'
    assert (folder / "test-0.jsonl").read_bytes() == b'{"id": "test-0"}\n'
    process = resolve(quickstart.workload(container=False), quickstart.project).environment
    assert process is not None and (process.image, process.digest) == (None, None)
    assert process.paths == (str(quickstart.root.resolve()),)


def test_a_changed_manifest_or_image_digest_changes_the_workload(quickstart: Quickstart) -> None:
    first = quickstart.workload()
    manifests = {**quickstart.manifests, "train/0": "sha256:" + "c" * 64}
    assert quickstart.workload(quickstart.environment(manifests=manifests)) != first
    assert quickstart.workload(quickstart.environment(graderImageId="sha256:" + "d" * 64)) != first
    assert quickstart.workload(quickstart.environment(image="sha256:" + "e" * 64)) != first
    rebuilt = quickstart.workload(quickstart.environment(image="sha256:" + "e" * 64), container=False)
    assert rebuilt.to_json() != quickstart.workload(container=False).to_json()
    assert quickstart.workload() == first  # and the same inputs give the same workload


def test_the_model_resolves_to_its_import_or_its_volume_revision(quickstart: Quickstart) -> None:
    workload = quickstart.workload()
    volume = quickstart.project.files.root / "volumes" / "default" / "weights" / "rev2"
    volume.mkdir(parents=True)
    by_volume = workload.with_changes(model=ModelArtifact(volume=VolumeRevision(name="weights", revision=2)))
    assert resolve(by_volume, quickstart.project).env["NODUS_INPUT_MODEL"] == str(volume)
    missing = workload.with_changes(model=ModelArtifact(volume=VolumeRevision(name="weights", revision=3)))
    with pytest.raises(ConfigError, match=r"model\.volume: Volume weights has no revision 3"):
        resolve(missing, quickstart.project)
    gone = workload.with_changes(model=ModelArtifact(uri=MODEL.replace("cbf5", "0000")))
    with pytest.raises(ConfigError, match=r"model\.uri: .* is not imported"):
        resolve(gone, quickstart.project)


def test_a_manifest_missing_from_the_content_store_names_it(quickstart: Quickstart) -> None:
    environment = quickstart.environment(manifests={"train/0": "sha256:" + "f" * 64})
    with pytest.raises(ConfigError, match=r"environment.manifests\['train/0'\]: task manifest sha256:f+ is not in"):
        resolve(quickstart.workload(environment), quickstart.project)


def test_the_package_source_digest_comes_from_the_lock(quickstart: Quickstart) -> None:
    assert package_source_digest(quickstart.project, quickstart.environment()) is None  # nothing built: no lock
