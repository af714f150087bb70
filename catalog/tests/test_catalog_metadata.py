"""Every catalog folder agrees with itself: environment.yaml validates and its package.path and loader name
the package folder and loader the tests use, its version and reward type match the environment and the
package's pyproject.toml, the wheel includes the module, the README and the fixture cases exist. A package
may live in the Environment's own folder (`package.path: .`) or in a folder of its own that several
Environments share (`package.path: ../<package>`, one loader each); every folder is one or the other."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest

from nodus.specs.parse import parse_resources

CATALOG = Path(__file__).resolve().parents[1]
FOLDERS = sorted(p.parent.name for p in CATALOG.glob("*/environment.yaml"))


def _spec(folder):
    result = parse_resources([CATALOG / folder])
    assert result.ok and not result.warnings, [str(p) for p in result.errors + result.warnings]
    (parsed,) = result.resources
    return parsed.resource


def _shared_packages():
    """Package folders outside the Environment folders -> the Environments whose package.path names them."""
    shared: dict[str, list[str]] = {}
    for folder in FOLDERS:
        package = (CATALOG / folder / _spec(folder).spec.package.path).resolve()
        if package != CATALOG / folder:
            shared.setdefault(package.name, []).append(folder)
    return shared


def test_every_folder_is_an_environment():
    expected = {
        "arithmetic",
        "graph-coloring",
        "gsm8k",
        "higher-lower",
        "letter-counting-legacy-eval",
        "letter-counting-legacy-rl",
        "python-functions",
        "reasoning-gym",
        "tool-calculator",
    }
    found = set(FOLDERS)
    assert found == expected


def test_every_other_folder_is_a_shared_package():
    shared = _shared_packages()
    assert shared == {"letter-counting-legacy": ["letter-counting-legacy-eval", "letter-counting-legacy-rl"]}
    others = {p.name for p in CATALOG.iterdir() if p.is_dir() and not p.name.startswith((".", "__"))}
    assert others - set(FOLDERS) - {"tests"} == set(shared)
    for package, users in shared.items():
        assert not (CATALOG / package / "environment.yaml").exists()
        assert not (CATALOG / package / "fixtures.jsonl").exists(), "fixture cases belong to each Environment"
        readme = (CATALOG / package / "README.md").read_text()
        assert readme.startswith(f"# nodus-catalog-{package} ")
        assert all(f"](../{user}/)" in readme for user in users), "the README links every Environment using it"


@pytest.mark.parametrize("folder", FOLDERS)
def test_folder_is_consistent(folder, catalog):
    environment = _spec(folder)
    assert environment.metadata.name == folder and environment.metadata.project == "nodus"
    spec = environment.spec
    source = catalog.source(folder)
    # The package is the Environment's own folder or a sibling catalog folder, never anything outside.
    package = CATALOG / source.package
    assert spec.package.path == ("." if source.package == folder else f"../{source.package}")
    module_name, function = spec.package.loader.split(":")
    assert (module_name, function) == (source.module, source.function) and module_name.endswith("_env")
    if source.package == folder:
        assert function == "load_environment"

    project = tomllib.loads((package / "pyproject.toml").read_text())
    assert project["project"]["name"] == f"nodus-catalog-{source.package}"
    assert project["project"]["version"] == str(spec.version)
    assert all("==" in requirement for requirement in project["project"]["dependencies"])
    assert project["build-system"]["build-backend"] == "hatchling.build"
    included = project["tool"]["hatch"]["build"]["targets"]["wheel"]["include"]
    assert f"{module_name}.py" in included
    assert all((package / name).is_file() for name in included)

    env = catalog.load(folder)
    assert Path(sys.modules[module_name].__file__) == package / f"{module_name}.py"
    assert spec.reward_type == env.REWARD_TYPE
    assert callable(env.gold_completion), "nodus-env selfcheck grades the environment's own gold completion"
    assert (CATALOG / folder / "README.md").read_text().startswith(f"# nodus/{folder} {spec.version}\n")
    assert (CATALOG / folder / "fixtures.jsonl").is_file()
