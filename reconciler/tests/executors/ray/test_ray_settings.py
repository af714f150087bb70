"""nodus.yaml's `executor: {ray: ...}` and choosing the Ray executor: each missing piece is one line naming the
file and the field; the token from the Secret `tokenSecret` names (read where the Secret says, never stored)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodus.errors import ConfigError
from nodus.reconciler.executors import choose_executor
from nodus.reconciler.executors.ray import RayExecutor
from nodus.reconciler.executors.ray import settings as settings_module
from nodus.reconciler.project import Project
from nodus.reconciler.secret_values import value
from nodus.specs.secret import SecretSpec
from nodus.specs.settings import load_settings
from nodus.testing.module_project import nodus


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


SECRET = """\
apiVersion: nodus.dev/v1
kind: Secret
metadata: {name: ray-token}
spec: {keys: [RAY_AUTH_TOKEN], envPrefix: PROD_}
"""


def test_the_token_comes_from_the_secret_tokensecret_names_never_from_another_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAY_AUTH_TOKEN", "the-shells-token")
    monkeypatch.delenv("PROD_RAY_AUTH_TOKEN", raising=False)
    project = project_with(tmp_path, "executor: {ray: {address: http://127.0.0.1:8265, tokenSecret: ray-token}}\n")
    where = r"nodus.yaml: executor.ray.tokenSecret: "
    with pytest.raises(ConfigError, match=where + r"Secret ray-token does not exist in project default"):
        choose_executor("ray", project.jobs, project=project)
    (tmp_path / "secret.yaml").write_text(SECRET)
    monkeypatch.chdir(tmp_path)
    code, output = nodus("apply", "secret.yaml", "--yes")
    assert code == 0, output
    with pytest.raises(
        ConfigError, match=where + r"Secret ray-token key RAY_AUTH_TOKEN: .*PROD_RAY_AUTH_TOKEN is not set"
    ):
        choose_executor("ray", project.jobs, project=project)
    monkeypatch.setenv("PROD_RAY_AUTH_TOKEN", "the-secrets-token")
    made: list[tuple[str, str]] = []  # the client Ray's Jobs API would get (no cluster here to connect to)
    monkeypatch.setattr(settings_module, "RayJobsClient", lambda address, token: made.append((address, token)))
    assert isinstance(choose_executor("ray", project.jobs, project=project), RayExecutor)
    assert made == [("http://127.0.0.1:8265", "the-secrets-token")]
    assert "the-secrets-token" not in (tmp_path / ".nodus" / "state.db").read_bytes().decode(errors="replace")


def test_a_dotenv_secret_is_read_by_key_with_quotes_and_export_and_a_bad_line_is_named(tmp_path: Path) -> None:
    env = tmp_path / "ray.env"
    env.write_text('# the cluster\nexport RAY_AUTH_TOKEN="abc def"\nOTHER=1\n')
    spec = SecretSpec.model_validate({"keys": ["RAY_AUTH_TOKEN"], "provider": "File", "path": "ray.env"})
    assert value(spec, "ray-token", "RAY_AUTH_TOKEN", base=tmp_path, where="w") == "abc def"
    env.write_text("RAY_AUTH_TOKEN abc\n")
    with pytest.raises(ConfigError, match=r"w: Secret ray-token: .*ray.env:1: not a KEY=VALUE line"):
        value(spec, "ray-token", "RAY_AUTH_TOKEN", base=tmp_path, where="w")
    with pytest.raises(ConfigError, match=r"Secret ray-token has no key OTHER \(its keys: RAY_AUTH_TOKEN\)"):
        value(spec, "ray-token", "OTHER", base=tmp_path, where="w")
