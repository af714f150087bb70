"""nodus.yaml's `executor: {ray: ...}` and choosing the Ray executor: each missing piece is one line naming the
file and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodus.errors import ConfigError
from nodus.reconciler.executors import choose_executor
from nodus.reconciler.project import Project
from nodus.specs.settings import load_settings


def project_with(tmp_path: Path, settings: str) -> Project:
    (tmp_path / ".git").mkdir(exist_ok=True)
    (tmp_path / "nodus.yaml").write_text(settings)
    return Project.find(tmp_path)


def test_the_issues_shape_names_the_executor_and_its_address(tmp_path: Path) -> None:
    (tmp_path / "nodus.yaml").write_text("executor:\n  ray:\n    address: http://127.0.0.1:8265\n")
    settings = load_settings(tmp_path)
    assert (settings.executor_name, settings.ray.address) == ("ray", "http://127.0.0.1:8265")
    (tmp_path / "nodus.yaml").write_text("executor: ray\n")
    assert load_settings(tmp_path).executor_name == "ray"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("executor: {ray: {address: 127.0.0.1:8265}}", r"nodus.yaml: executor.ray.address: .*http\(s\)://HOST:PORT"),
        ("executor: {ray: {adress: http://h:1}}", "nodus.yaml: executor.ray.adress: Extra inputs"),
        ("executor: kubernetes", "nodus.yaml: executor: Input should be 'local' or 'ray'"),
    ],
)
def test_a_bad_executor_setting_is_one_line_naming_the_field(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "nodus.yaml").write_text(text + "\n")
    with pytest.raises(ConfigError, match=message) as caught:
        load_settings(tmp_path)
    assert caught.value.hint == "see the README's Project settings: executor"


def test_choosing_ray_needs_an_address_and_a_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    project = project_with(tmp_path, "executor: ray\n")
    with pytest.raises(ConfigError, match=r"nodus.yaml: executor.ray.address is missing \(and RAY_ADDRESS"):
        choose_executor("ray", project.jobs, project=project)
    with pytest.raises(ConfigError, match=r"nodus.yaml: executor.ray.address is missing"):
        choose_executor("ray", tmp_path)
    project = project_with(tmp_path, "executor: {ray: {address: http://127.0.0.1:8265}}\n")
    with pytest.raises(ConfigError, match=r"nodus.yaml: executor.ray: no token .*RAY_AUTH_TOKEN is not set"):
        choose_executor("ray", project.jobs, project=project)
    project = project_with(tmp_path, "executor: {ray: {address: http://127.0.0.1:8265, tokenSecret: ray-token}}\n")
    monkeypatch.setenv("RAY_AUTH_TOKEN", "t")
    with pytest.raises(ConfigError, match=r"executor.ray.tokenSecret: reading the token from Secret ray-token is not"):
        choose_executor("ray", project.jobs, project=project)
