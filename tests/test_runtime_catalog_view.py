"""The managed runtimes are listed and described in every project, as the seeds show (`nodus get trainingruntimes
-n nodus`, `nodus get trainingruntime/sft -n nodus -o yaml`), before any job named one: the catalog is the list
of what can be named, as it is for the catalog Environments (issue 25, problem 8)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from nodus.cli.main import cli
from nodus.reconciler.planning.managed import read_catalog


def nodus(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.output


@pytest.fixture
def fresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "nodus.lock").write_text("lockfileVersion: 1\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NODUS_RUNTIMES_DIR", raising=False)
    return tmp_path


def test_every_managed_runtime_is_listed_in_a_fresh_project(fresh: Path) -> None:
    catalog, problems = read_catalog()
    assert not problems and len(catalog) >= 8
    code, output = nodus("get", "trainingruntimes", "-n", "nodus")
    assert code == 0, output
    assert "No TrainingRuntime resources found" not in output
    rows = {row.split()[0]: row for row in output.splitlines()[1:]}
    assert set(rows) == {key.name for key in catalog}
    assert output.splitlines()[0].split()[:2] == ["NAME", "TASKS"]
    assert "SFT,Pretrain" in rows["sft"].replace(", ", ",") and "Ready" in rows["sft"]


def test_one_runtime_as_yaml_has_its_schema_presets_and_step_times(fresh: Path) -> None:
    code, output = nodus("get", "trainingruntime/sft", "-n", "nodus", "-o", "yaml")
    assert code == 0, output
    document = yaml.safe_load(output)
    assert document["kind"] == "TrainingRuntime" and document["metadata"]["name"] == "sft"
    spec = document["spec"]
    assert "steps" in spec["parameterSchema"]["properties"]
    assert spec["presets"] and spec["measured"]["stepSeconds"]


def test_describe_a_managed_runtime_and_an_unknown_one(fresh: Path) -> None:
    code, output = nodus("describe", "trainingruntime/dpo", "-n", "nodus")
    assert code == 0, output
    assert "Tasks:" in output and "DPO" in output
    assert "Parameters:" in output and "beta" in output
    assert "Presets:" in output and "managed:runtimes/dpo.yaml" in output

    code, output = nodus("get", "trainingruntime/sfx", "-n", "nodus")
    assert code != 0
    assert "TrainingRuntime/sfx" in output and "sft" in output
