"""The model table (endpoints/model_table.py): the catalog's entries load, a project's models.yaml wins by id, an
entry's `gpu` becomes what its model server asks of the executor (`controllers/endpoint.service_of`), and a bad
entry is one line naming the file, the entry and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodus.errors import ConfigError
from nodus.reconciler.controllers.endpoint import service_of
from nodus.reconciler.endpoints.model_table import load_models
from nodus.reconciler.endpoints.served import Served
from nodus.reconciler.executors.workload import GpuResources, ModelArtifact, Resources
from nodus.reconciler.project import Project
from nodus.reconciler.state.records import ResourceKey, ResourceRecord

PINNED = "hf://openai/gpt-oss-20b@" + "a" * 40


def test_the_catalog_says_which_gpus_the_large_models_need() -> None:
    table = load_models()
    big = table.get("nodus/gpt-oss-120b")
    assert big is not None and big.gpu == (("h100-sxm-80g", "h200-141g", "a100-80g"), 1)
    tiny = table.get("nodus/tiny-qwen3")
    assert tiny is not None and tiny.gpu is None  # a CPU serves it


def test_a_projects_entry_wins_and_its_gpu_places_the_server(tmp_path: Path) -> None:
    (tmp_path / "models.yaml").write_text(
        f'models:\n  nodus/gpt-oss-20b: {{uri: "{PINNED}", gpu: {{type: l4-24g, count: 2}}}}\n'
    )
    entry = load_models(tmp_path).get("nodus/gpt-oss-20b")
    assert entry is not None and entry.uri == PINNED and entry.gpu == (("l4-24g",), 2)
    record = ResourceRecord(
        key=ResourceKey("InferenceEndpoint", "default", "chat"),
        spec={"spec": {"model": "nodus/gpt-oss-20b"}},
        spec_hash="h",
    )
    served = Served(model_id=entry.id, served_name=entry.id, base=ModelArtifact(uri=PINNED), gpu=entry.gpu)
    (tmp_path / "nodus.lock").write_text("lockfileVersion: 1\nenvironments: {}\n")
    project = Project.find(tmp_path)
    assert service_of(record, served, project).resources == Resources(gpu=GpuResources(types=("l4-24g",), count=2))
    cpu = Served(model_id="nodus/tiny-qwen3", served_name="nodus/tiny-qwen3", base=ModelArtifact(uri=PINNED))
    assert service_of(record, cpu, project).resources is None


@pytest.mark.parametrize(
    ("gpu", "message"),
    [
        (
            "{count: 1}",
            "models.acme/m.gpu: type (a GPU type or a list, any of which will do) and count, e.g. {type: [l4-24g]}",
        ),
        ("{type: [l4-24g], count: 0}", "models.acme/m.gpu.count: a positive number of GPUs (got 0)"),
        ("{type: [1]}", "models.acme/m.gpu.type: GPU type names such as h100-sxm-80g (got [1])"),
    ],
)
def test_a_bad_gpu_is_one_line_naming_the_field(tmp_path: Path, gpu: str, message: str) -> None:
    (tmp_path / "models.yaml").write_text(f'models:\n  acme/m: {{uri: "{PINNED}", gpu: {gpu}}}\n')
    with pytest.raises(ConfigError) as raised:
        load_models(tmp_path)
    assert raised.value.message == f"{tmp_path / 'models.yaml'}: {message}"
