"""The install is portable: no machine's path in the project files, and torch's CPU or CUDA build as asked.

What is resolved: the workspace's own torch configuration, read from the project files (nodus-runtimes' torch
requirement, its `cpu` and `cuda` extras, its `[tool.uv.sources]` for torch, the root's `conflicts` and PyTorch
`[[tool.uv.index]]` names), in a throwaway workspace under tmp_path, by the real uv (`uv lock`, then `uv export`
of each extra), offline, with no pip or uv configuration of this machine (UV_NO_CONFIG, PIP_CONFIG_FILE=/dev/null,
no PIP_*/UV_* variables). The indexes are PEP 503 folders the test writes: a stand-in default index (a plain
`torch`, `vllm`), and stand-ins for PyTorch's CPU and CUDA indexes (`torch-X+cpu`, `torch-X+cu130` wheels made with
zipfile), put in place of the real URLs by index name (`--index pytorch-cpu=file://...`), the way a setup points them
elsewhere. The workspace's other dependencies (transformers, ...) would need the package registry: they are left out.

`.ci/uv` (what `make setup` runs) is checked the same way: with no pip configuration it passes uv nothing; with a
pip configuration whose find-links hold a torch wheel, the lock takes torch from exactly that wheel.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.machinery
import importlib.util
import json
import os
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[1]
ROOT = tomllib.loads((REPO / "pyproject.toml").read_text())
RUNTIMES = tomllib.loads((REPO / "runtimes" / "pyproject.toml").read_text())
VERSIONS = ("2.13.0", "2.14.1")  # the ends of nodus-runtimes' torch bound
TAG = "cp311-cp311-manylinux_2_28_x86_64"


def load_ci_uv() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("ci_uv", str(REPO / ".ci" / "uv"))
    spec = importlib.util.spec_from_loader("ci_uv", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


# -- the project files ---------------------------------------------------------------------------------------


def test_no_committed_file_names_a_path_of_this_machine() -> None:
    # This kind of machine's wheel folder and local indexes (/opt/environment and /opt/nodus are paths inside grader
    # images, not of a machine); only the README may name them, where it explains this kind of machine.
    pattern = "/opt/(wheels|pypi)"
    listed = subprocess.run(
        ["git", "grep", "-n", "-I", "-E", pattern], cwd=REPO, capture_output=True, text=True, check=False
    )
    allowed = ("README.md:",)
    found = [line for line in listed.stdout.splitlines() if not line.startswith(allowed)]
    assert found == [], found


def test_torch_is_a_version_bound_with_a_cpu_and_a_cuda_extra() -> None:
    torch = [Requirement(r) for r in RUNTIMES["project"]["dependencies"] if Requirement(r).name == "torch"]
    assert [str(r.specifier) for r in torch] == ["<=2.14.1,>=2.13"]
    extras = RUNTIMES["project"]["optional-dependencies"]
    assert {Requirement(r).name for r in extras["cpu"]} == {"torch"}
    assert {Requirement(r).name for r in extras["cuda"]} == {"torch", "vllm"}
    assert "torch" not in ROOT["tool"]["uv"]["sources"]  # root sources would apply to the root project too
    indexes = {index["name"]: index for index in ROOT["tool"]["uv"]["index"]}
    assert indexes["pytorch-cpu"]["url"].endswith("/whl/cpu") and indexes["pytorch-cpu"]["explicit"]
    assert re.search(r"/whl/cu\d+$", indexes["pytorch-cuda"]["url"]) and indexes["pytorch-cuda"]["explicit"]
    assert RUNTIMES["tool"]["uv"]["sources"]["torch"] == [
        {"index": "pytorch-cpu", "extra": "cpu"},
        {"index": "pytorch-cuda", "extra": "cuda"},
    ]


# -- resolution in a throwaway workspace ---------------------------------------------------------------------


def stand_in_wheel(folder: Path, name: str, version: str, tag: str = TAG, requires: tuple[str, ...] = ()) -> Path:
    """A tiny installable wheel (a package with one module) for the resolver to choose."""
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    files = {
        f"{dist}/__init__.py": f"__version__ = {version!r}\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        + "".join(f"Requires-Dist: {r}\n" for r in requires),
        f"{info}/WHEEL": f"Wheel-Version: 1.0\nGenerator: tests/test_install.py\nRoot-Is-Purelib: false\nTag: {tag}\n",
    }

    def digest(text: str) -> str:
        return base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()

    record = "".join(f"{path},sha256={digest(text)},{len(text)}\n" for path, text in files.items())
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"{dist}-{version}-{tag}.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in {**files, f"{info}/RECORD": record + f"{info}/RECORD,,\n"}.items():
            archive.writestr(path, text)
    return wheel


def simple_index(root: Path, wheels: list[Path]) -> str:
    """A PEP 503 folder serving `wheels`; returns its file:// URL."""
    projects: dict[str, list[Path]] = {}
    for wheel in wheels:
        projects.setdefault(wheel.name.split("-")[0].replace("_", "-"), []).append(wheel)
    for project, files in projects.items():
        page = root / "simple" / project / "index.html"
        page.parent.mkdir(parents=True)
        links = (
            f'<a href="{w.as_uri()}#sha256={hashlib.sha256(w.read_bytes()).hexdigest()}">{w.name}</a>' for w in files
        )
        page.write_text("<!DOCTYPE html><html><body>" + "".join(links) + "</body></html>")
    return (root / "simple").as_uri()


def throwaway_workspace(root: Path) -> Path:
    """The root and nodus-runtimes with the project's torch configuration and nothing else."""
    (root / "runtimes" / "src").mkdir(parents=True)
    uv_root = ROOT["tool"]["uv"]
    torch_only = [r for r in RUNTIMES["project"]["dependencies"] if Requirement(r).name == "torch"]
    # Only the extras that choose the torch build (the workspace's `conflicts`); the others (tracking, ...) would
    # need the package registry, like the workspace's other dependencies.
    chooser = {entry["extra"] for group in uv_root["conflicts"] for entry in group}
    torch_extras = {k: v for k, v in RUNTIMES["project"]["optional-dependencies"].items() if k in chooser}
    indexes = "".join(f"[[tool.uv.index]]\n{lines(index)}\n" for index in uv_root["index"])
    (root / "pyproject.toml").write_text(
        '[project]\nname = "throwaway"\nversion = "0"\nrequires-python = ">=3.11"\ndependencies = []\n\n'
        f"[tool.uv]\npackage = false\nconflicts = {inline(uv_root['conflicts'])}\n\n"
        '[tool.uv.workspace]\nmembers = ["runtimes"]\n\n'
        "[tool.uv.sources]\nnodus-runtimes = { workspace = true }\n\n" + indexes
    )
    (root / "runtimes" / "pyproject.toml").write_text(
        '[project]\nname = "nodus-runtimes"\nversion = "0.1.0"\nrequires-python = ">=3.11"\n'
        f"dependencies = {inline(torch_only)}\n\n"
        f"[project.optional-dependencies]\n{lines(torch_extras)}\n"
        f"[tool.uv.sources]\n{lines(RUNTIMES['tool']['uv']['sources'])}"
    )
    return root


def inline(value: Any) -> str:
    """A TOML value on one line: JSON's strings and lists are TOML's; tables become inline tables."""
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {inline(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(inline(v) for v in value) + "]"
    return json.dumps(value)  # str and bool (json's true/false are TOML's)


def lines(table: dict[str, Any]) -> str:
    return "".join(f"{json.dumps(k)} = {inline(v)}\n" for k, v in table.items())


def clean_environment(tmp_path: Path) -> dict[str, str]:
    """No pip or uv configuration of this machine: no config files, no PIP_*/UV_* variables, offline."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_", "VIRTUAL_ENV"))}
    environment |= {
        "PIP_CONFIG_FILE": os.devnull,
        "UV_NO_CONFIG": "1",
        "UV_OFFLINE": "1",
        "UV_CACHE_DIR": str(tmp_path / "uv-cache"),
        "UV_PYTHON": sys.executable,
        "UV_PYTHON_DOWNLOADS": "never",
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
    }
    return environment


@pytest.fixture
def indexes(tmp_path: Path) -> dict[str, str]:
    """Stand-ins for the default index and PyTorch's CPU and CUDA indexes."""
    wheels = tmp_path / "wheels"
    default = [stand_in_wheel(wheels / "default", "torch", v) for v in VERSIONS]
    default.append(stand_in_wheel(wheels / "default", "vllm", "0.32.0", tag="py3-none-any", requires=("torch",)))
    return {
        "default": simple_index(tmp_path / "index-default", default),
        "pytorch-cpu": simple_index(
            tmp_path / "index-cpu", [stand_in_wheel(wheels / "cpu", "torch", f"{v}+cpu") for v in VERSIONS]
        ),
        "pytorch-cuda": simple_index(
            tmp_path / "index-cuda", [stand_in_wheel(wheels / "cuda", "torch", f"{v}+cu130") for v in VERSIONS]
        ),
    }


def uv(
    args: list[str], cwd: Path, environment: dict[str, str], *, via_ci: bool = False
) -> subprocess.CompletedProcess[str]:
    program = [sys.executable, str(REPO / ".ci" / "uv")] if via_ci else [sys.executable, "-m", "uv"]
    return subprocess.run(
        [*program, *args], cwd=cwd, env=environment, capture_output=True, text=True, timeout=120, check=False
    )


def exported(workspace: Path, environment: dict[str, str], *extra: str) -> dict[str, str]:
    """{name: version} uv would install for nodus-runtimes with the extras given, from the lock as it is."""
    flags = [f"--extra={e}" for e in extra]
    done = uv(
        ["export", "--frozen", "--no-hashes", "--package", "nodus-runtimes", "--no-emit-workspace", *flags],
        workspace,
        environment,
    )
    assert done.returncode == 0, done.stderr
    pins = (
        line.split(";")[0].strip() for line in done.stdout.splitlines() if "==" in line and not line.startswith("#")
    )
    return dict(pin.split("==") for pin in pins)


def test_a_machine_without_local_wheels_resolves_the_cpu_or_the_cuda_build_as_asked(
    tmp_path: Path, indexes: dict[str, str]
) -> None:
    workspace = throwaway_workspace(tmp_path / "workspace")
    environment = clean_environment(tmp_path) | {"UV_DEFAULT_INDEX": indexes["default"]}
    overrides = [f"--index={name}={indexes[name]}" for name in ("pytorch-cpu", "pytorch-cuda")]
    # Through .ci/uv, as make setup runs it: with no pip configuration it adds nothing.
    locked = uv(["lock", *overrides], workspace, environment, via_ci=True)
    assert locked.returncode == 0, locked.stderr
    assert ".ci/uv" not in locked.stderr
    # Each torch comes from the index its extra names (a registry), none from a path of some machine.
    sources = {
        p["version"]: p["source"]
        for p in tomllib.loads((workspace / "uv.lock").read_text())["package"]
        if p["name"] == "torch"
    }
    assert sources == {
        "2.14.1+cpu": {"registry": str(tmp_path / "index-cpu" / "simple")},
        "2.14.1+cu130": {"registry": str(tmp_path / "index-cuda" / "simple")},
    }

    assert exported(workspace, environment, "cpu") == {"torch": "2.14.1+cpu"}
    assert exported(workspace, environment, "cuda") == {"torch": "2.14.1+cu130", "vllm": "0.32.0"}
    both = uv(
        ["export", "--frozen", "--package", "nodus-runtimes", "--extra=cpu", "--extra=cuda"], workspace, environment
    )
    assert both.returncode != 0 and "incompatible with the declared conflicts" in both.stderr


def test_ci_uv_gives_uv_the_torch_wheels_of_pips_find_links(tmp_path: Path, indexes: dict[str, str]) -> None:
    ci_uv = load_ci_uv()
    find_links = tmp_path / "local-wheels"
    local = stand_in_wheel(find_links, "torch", "2.13.0+cpu")
    stand_in_wheel(find_links, "torchvision", "0.28.0")  # not torch: stays out of the torch index
    listed = f"global.find-links='{find_links}'\nglobal.index-url='{indexes['default']}'\n:env:.disable-pip-version-check='1'\n"
    settings = ci_uv.parse_pip_config_list(listed)
    assert settings == {
        "find-links": str(find_links),
        "index-url": indexes["default"],
        "disable-pip-version-check": "1",
    }

    variables = ci_uv.uv_environment(settings, tmp_path / "generated")
    assert variables["UV_FIND_LINKS"] == str(find_links)
    assert variables["UV_DEFAULT_INDEX"] == indexes["default"]
    page = (tmp_path / "generated" / "simple" / "torch" / "index.html").read_text()
    assert local.name in page and "torchvision" not in page

    workspace = throwaway_workspace(tmp_path / "workspace")
    environment = clean_environment(tmp_path) | variables
    locked = uv(["lock"], workspace, environment)
    assert locked.returncode == 0, locked.stderr
    # The CPU fork takes the machine's own wheel; the CUDA fork takes pip's index (its torch is the CUDA build).
    assert exported(workspace, environment, "cpu") == {"torch": "2.13.0+cpu"}
    assert exported(workspace, environment, "cuda") == {"torch": "2.14.1", "vllm": "0.32.0"}
    lock = (workspace / "uv.lock").read_text()
    assert str(local) in lock


def test_ci_uv_passes_nothing_without_pip_configuration(tmp_path: Path) -> None:
    assert load_ci_uv().uv_environment({}, tmp_path / "generated") == {}
    assert not (tmp_path / "generated").exists()


@pytest.mark.parametrize(("extra", "expected"), [((), "cpu"), (("EXTRA=cuda",), "cuda")])
def test_make_setup_syncs_through_ci_uv_with_one_torch_extra(extra: tuple[str, ...], expected: str) -> None:
    planned = subprocess.run(
        ["make", "-n", "-B", "setup", *extra], cwd=REPO, capture_output=True, text=True, check=True
    )
    syncs = [line for line in planned.stdout.splitlines() if " sync " in line]
    assert syncs == [f"python3 .ci/uv sync --all-packages --compile-bytecode --quiet --extra {expected}"], (
        planned.stdout
    )
