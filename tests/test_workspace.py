"""The workspace: every member installs, imports under the one `nodus` namespace, and builds a wheel that
holds only its own subpackage (no `nodus/__init__.py`, so wheels and editable installs combine)."""

from __future__ import annotations

import importlib
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MEMBERS = {
    "nodus-specs": ("specs", ["nodus.specs"]),
    "nodus-build": ("builder", ["nodus.builder"]),
    "nodus": ("reconciler", ["nodus.cli", "nodus.reconciler", "nodus.recipes"]),
    "nodus-env": ("images/env-base", ["nodus.env"]),
    "nodus-runtimes": ("runtimes", ["nodus.runtimes"]),
}


def test_nodus_is_a_namespace_spanning_every_member() -> None:
    import nodus

    assert getattr(nodus, "__file__", None) is None  # PEP 420: no nodus/__init__.py anywhere
    roots = {Path(p).resolve() for p in nodus.__path__}
    for folder, _ in MEMBERS.values():
        assert (REPO / folder / "src" / "nodus").resolve() in roots


@pytest.mark.parametrize("dist", sorted(MEMBERS))
def test_member_is_installed_and_imports_from_its_folder(dist: str) -> None:
    folder, packages = MEMBERS[dist]
    assert metadata.version(dist)
    for name in packages:
        module = importlib.import_module(name)
        assert Path(module.__file__ or "").resolve().is_relative_to((REPO / folder / "src").resolve())


def test_console_scripts() -> None:
    names = ("nodus", "nodus-build", "nodus-env")
    scripts = {ep.name: ep.value for ep in metadata.entry_points(group="console_scripts") if ep.name in names}
    assert scripts == {
        "nodus": "nodus.cli.main:main",
        "nodus-build": "nodus.builder.cli:main",
        "nodus-env": "nodus.env.cli:main",
    }


@pytest.mark.slow
def test_wheels_hold_only_their_own_subpackage(tmp_path: Path) -> None:
    out = tmp_path / "dist"
    result = subprocess.run(
        [
            str(Path(sys.executable).parent / "uv"),
            "build",
            "--all-packages",
            "--wheel",
            "--out-dir",
            str(out),
            "--quiet",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    wheels = {w.name.split("-")[0]: w for w in out.glob("*.whl")}
    assert set(wheels) == {"nodus_specs", "nodus_build", "nodus", "nodus_env", "nodus_runtimes"}
    for wheel in wheels.values():
        files = [f for f in zipfile.ZipFile(wheel).namelist() if not f.split("/")[0].endswith(".dist-info")]
        assert "nodus/__init__.py" not in files
        assert all(f.startswith("nodus/") for f in files), files
    specs_files = zipfile.ZipFile(wheels["nodus_specs"]).namelist()
    assert "nodus/errors.py" in specs_files and "nodus/specs/parse.py" in specs_files
    env_files = [f for f in zipfile.ZipFile(wheels["nodus_env"]).namelist() if f.startswith("nodus/")]
    assert all(f.startswith("nodus/env/") for f in env_files)
