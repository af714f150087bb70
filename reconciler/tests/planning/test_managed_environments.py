"""Managed Environments (`nodus.reconciler.planning.managed_environments`): a catalog Environment joins a plan when
a TrainingJob or an evaluation AgentGroup names `nodus/<name>@<version>`, with its `managed:catalog/...` source;
a user's own definition is theirs; the Environment controller builds a managed one without --build, from its
catalog file. The catalog is a folder of our own here (NODUS_CATALOG_DIR)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodus.errors import SpecError
from nodus.reconciler.controllers import environment_controller
from nodus.reconciler.controllers.base import ApplyOptions, Context
from nodus.reconciler.planning.desired import desired_from
from nodus.reconciler.planning.managed import with_managed
from nodus.reconciler.planning.managed_environments import catalog_file, find, with_managed_environments
from nodus.reconciler.project import Project
from nodus.reconciler.state.records import ResourceKey
from nodus.specs.parse import parse_text

ENVIRONMENT = """apiVersion: nodus.dev/v1
kind: Environment
metadata: {name: colours, project: nodus}
spec:
  version: 1.0.0
  package: {path: ., loader: "colours_env:load_environment"}
  category: Reasoning
  modes: [Train, Evaluate]
  description: Colour small graphs.
  license: Apache-2.0
"""
JOB = """apiVersion: nodus.dev/v1beta1
kind: TrainingJob
metadata: {{name: run}}
spec:
  runtime: nodus/grpo-lora
  environment: {{name: {environment}, trainTasks: 8, heldOutTasks: 16}}
"""
GROUP = """apiVersion: nodus.dev/v1
kind: AgentGroup
metadata: {name: evals}
spec:
  agent: helper
  evaluation: {environment: nodus/colours@1.0.0, tasks: 4}
"""
KEY = ResourceKey("Environment", "nodus", "colours")


@pytest.fixture
def catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "catalog"
    (folder / "colours").mkdir(parents=True)
    (folder / "colours" / "environment.yaml").write_text(ENVIRONMENT)
    monkeypatch.setenv("NODUS_CATALOG_DIR", str(folder))
    return folder


def _desired(text: str) -> list:  # type: ignore[type-arg]
    result = parse_text(text, "job.yaml")
    assert result.ok, [str(problem) for problem in result.errors]
    return desired_from(result.resources)


def test_a_job_naming_a_catalog_environment_brings_it_into_the_plan(catalog: Path) -> None:
    desired = with_managed(_desired(JOB.format(environment="nodus/colours@1.0.0")))
    by_key = {item.key: item for item in desired}
    assert by_key[KEY].source == "managed:catalog/colours/environment.yaml"
    assert by_key[KEY].document["spec"]["version"] == "1.0.0"
    assert catalog_file(by_key[KEY].source) == catalog / "colours" / "environment.yaml"


def test_an_evaluation_group_naming_one_brings_it_too(catalog: Path) -> None:
    keys = [item.key for item in with_managed_environments(_desired(GROUP))]
    assert KEY in keys


def test_the_users_own_definition_is_theirs_and_other_projects_are_left_alone(catalog: Path) -> None:
    own = ENVIRONMENT.replace("Colour small graphs.", "Ours.")
    desired = with_managed_environments(_desired(own + "---\n" + JOB.format(environment="nodus/colours@1.0.0")))
    (mine,) = [item for item in desired if item.key == KEY]
    assert mine.source.startswith("job.yaml:") and mine.document["spec"]["description"] == "Ours."
    assert [item.key for item in with_managed_environments(_desired(JOB.format(environment="colours@1.0.0")))] == [
        ResourceKey("TrainingJob", "default", "run")
    ]


def test_a_name_the_catalog_lacks_is_left_to_admission_and_a_broken_catalog_file_is_said(catalog: Path) -> None:
    desired = _desired(JOB.format(environment="nodus/nothing@1.0.0"))
    assert with_managed_environments(desired) == desired
    (catalog / "broken").mkdir()
    (catalog / "broken" / "environment.yaml").write_text(ENVIRONMENT.replace("version: 1.0.0", "version: one"))
    with pytest.raises(SpecError, match=r"broken/environment\.yaml"):
        with_managed_environments(desired)


def test_find_names_what_the_catalog_has(catalog: Path) -> None:
    assert find("nodus/colours@1.0.0").file == catalog / "colours" / "environment.yaml"
    with pytest.raises(LookupError, match=r"no catalog Environment gsm8k \(the catalog has: colours\)"):
        find("nodus/gsm8k@1.0.0")
    with pytest.raises(LookupError, match=r"at version 1\.0\.0, not 2\.0\.0"):
        find("nodus/colours@2.0.0")


def _record_builds(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    built: list[Path] = []

    def build_paths(paths: list[Path], **_: object) -> list[object]:
        built.extend(paths)
        return [environment_controller.builder.BuildResult("colours", "1.0.0", "", "failed", error="no package")]

    monkeypatch.setattr(environment_controller.builder, "build_paths", build_paths)
    return built


def test_the_controller_builds_a_catalog_environment_without_build(
    catalog: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "nodus.lock").write_text("lockfileVersion: 1\n")
    project = Project.find(tmp_path)
    store = project.open_state()
    built = _record_builds(monkeypatch)
    (item,) = with_managed_environments(_desired(GROUP))[1:]
    record = store.put(item.key, item.document)
    try:
        managed = Context(project, store, options=ApplyOptions(build=False), source=item.source)
        status = environment_controller.EnvironmentController().reconcile(record, managed).status
        assert built == [catalog / "colours" / "environment.yaml"]
        assert status["phase"] == "Failed" and status["reason"] == "BuildFailed" and status["message"] == "no package"

        # The user's own Environment still waits for --build: nothing is built behind their back.
        own = Context(project, store, options=ApplyOptions(build=False), source=f"{tmp_path}/env.yaml:1")
        status = environment_controller.EnvironmentController().reconcile(record, own).status
        assert built == [catalog / "colours" / "environment.yaml"] and status["reason"] == "ImageNotBuilt"
    finally:
        store.close()
