"""A pip package's module comes from its distribution's metadata (NODUS_ENVIRONMENT_DISTRIBUTION), not from
whatever else is importable; a path package keeps the one-top-level-module rule."""

from __future__ import annotations

import itertools
import textwrap
from pathlib import Path

import pytest

from nodus.env.environment import load_environment
from nodus.env.loader import LoadError, Settings, distribution_modules

_COUNTER = itertools.count()

MODULE_SHAPE = """
TASKS = [(f"Say {i}", str(i)) for i in range(20)]
def reward(completion, answer):
    return None if not completion.strip() else float(completion.strip() == answer)
"""

TASKS_FUNCTION = """
def tasks(split):
    return [{"prompt": p, "answer": a} for i, (p, a) in enumerate(_TASKS) if (i % 5 == 4) == (split == "test")]
"""

LOADS_ITSELF = "import sys\ndef load_environment():\n    return sys.modules[__name__]\n" + MODULE_SHAPE


def install_distribution(
    site: Path, name: str, modules: dict[str, str], *, top_level: bool = True, package: bool = True
) -> None:
    """Writes `modules` and a `<name>-1.0.dist-info` into `site`, as `pip install --target` leaves them.

    `package` makes each module a folder with `__init__.py` (else a single `.py` file); `top_level` writes
    setuptools' top_level.txt, without it only RECORD says which files the distribution installed.
    """
    record = []
    for module, source in modules.items():
        relative = f"{module}/__init__.py" if package else f"{module}.py"
        (site / relative).parent.mkdir(parents=True, exist_ok=True)
        (site / relative).write_text(textwrap.dedent(source))
        record.append(f"{relative},,")
    info = site / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    if top_level:
        (info / "top_level.txt").write_text("".join(f"{module}\n" for module in modules))
    record += [f"{info.name}/METADATA,,", f"{info.name}/RECORD,,"]
    (info / "RECORD").write_text("\n".join(record) + "\n")


def _unique(prefix: str) -> str:
    return f"{prefix}_{next(_COUNTER)}_{id(_COUNTER) % 1000}"  # sys.modules caches module names per session


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "site-packages"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    return folder


def _settings(distribution: str | None, path: Path) -> Settings:
    return Settings(
        path=(str(path),), loader="load_environment", name="demo", version="1.0.0", distribution=distribution
    )


@pytest.mark.parametrize("top_level", [True, False], ids=["top_level.txt", "RECORD only"])
def test_the_distributions_own_module_wins_over_other_importable_ones(
    site: Path, tmp_path: Path, top_level: bool
) -> None:
    own, dependency = _unique("reverse_words_env"), _unique("some_dependency")
    name = f"reverse-words-{own.replace('_', '-')}"  # the distribution's name is not its module's
    install_distribution(site, name, {own: LOADS_ITSELF}, top_level=top_level)
    # A dependency installed beside it also has load_environment(): importable, but not the environment.
    install_distribution(site, f"{dependency.replace('_', '-')}-dist", {dependency: LOADS_ITSELF})
    assert distribution_modules(name) == [own]
    empty_path = tmp_path / "opt-environment"
    empty_path.mkdir()
    env = load_environment(_settings(name, empty_path))
    assert len(env.tasks("test")) == 16
    task = env.tasks("test")[0]
    assert env.grade_line({"taskId": task.task_id, "completion": task.answer})["verdict"] == "Correct"


def test_a_single_file_module_is_found_from_record(site: Path, tmp_path: Path) -> None:
    own = _unique("flat_env")
    install_distribution(site, "flat-env-pkg", {own: LOADS_ITSELF}, top_level=False, package=False)
    assert distribution_modules("flat-env-pkg") == [own]


def test_no_module_with_the_loader_names_the_distribution_and_its_modules(site: Path, tmp_path: Path) -> None:
    first, second = _unique("shape_only"), _unique("helpers")
    install_distribution(site, "no-loader-pkg", {first: MODULE_SHAPE, second: "X = 1\n"})
    modules = ", ".join(sorted([first, second]))
    expected = rf"no top-level module of distribution 'no-loader-pkg' has load_environment\(\) \(it has top-level modules {modules}\)"
    with pytest.raises(LoadError, match=expected):
        load_environment(_settings("no-loader-pkg", tmp_path))


def test_the_one_module_of_a_distribution_without_a_loader_is_used_as_it_is(site: Path, tmp_path: Path) -> None:
    """As a path package's module is: a module of tasks() and reward() (or a verifiers v1 Taskset's module)."""
    own = _unique("bare_shape")
    install_distribution(site, "bare-shape-pkg", {own: MODULE_SHAPE.replace("TASKS", "_TASKS") + TASKS_FUNCTION})
    env = load_environment(_settings("bare-shape-pkg", tmp_path))
    task = env.tasks("test")[0]
    assert env.grade_line({"taskId": task.task_id, "completion": task.answer})["verdict"] == "Correct"


def test_two_modules_with_the_loader_are_refused(site: Path, tmp_path: Path) -> None:
    first, second = _unique("env_a"), _unique("env_b")
    install_distribution(site, "two-loaders-pkg", {first: LOADS_ITSELF, second: LOADS_ITSELF})
    with pytest.raises(LoadError, match=f"'two-loaders-pkg' has 2 top-level modules with load_environment.*{first}"):
        load_environment(_settings("two-loaders-pkg", tmp_path))


def test_a_module_that_fails_to_import_is_the_cause(site: Path, tmp_path: Path) -> None:
    broken = _unique("broken_env")
    install_distribution(site, "broken-pkg", {broken: "raise ImportError('needs libfoo')\n"})
    with pytest.raises(LoadError, match=f"failed to import {broken} \\(ImportError: needs libfoo\\)"):
        load_environment(_settings("broken-pkg", tmp_path))


def test_a_distribution_that_is_not_installed_is_named(site: Path, tmp_path: Path) -> None:
    with pytest.raises(LoadError, match="distribution 'not-installed-anywhere' is not installed"):
        load_environment(_settings("not-installed-anywhere", tmp_path))


def test_settings_read_the_distribution_from_the_image_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODUS_ENVIRONMENT_DISTRIBUTION", "reverse-words")
    assert Settings.from_env().distribution == "reverse-words"
    monkeypatch.delenv("NODUS_ENVIRONMENT_DISTRIBUTION")
    assert Settings.from_env().distribution is None


def test_a_path_package_keeps_the_one_top_level_module_rule(site: Path, tmp_path: Path) -> None:
    own = _unique("path_env")
    folder = tmp_path / "opt-environment"
    folder.mkdir()
    (folder / f"{own}.py").write_text(LOADS_ITSELF)
    # Importable modules elsewhere do not count for a path package either: only the folder's own.
    install_distribution(site, "unrelated-pkg", {_unique("unrelated"): LOADS_ITSELF})
    env = load_environment(_settings(None, folder))
    assert len(env.tasks("train")) == 4
