"""Fixtures for the builder tests: small sample layers, a Python rootfs from this host, real tools.

`python_rootfs` is the entries of an image that runs Debian's python3.11 with nothing pulled: the
interpreter, its standard library and each library `ldd` lists, reached through the same symlinks as on
the host (`/lib -> usr/lib`, sonames -> versioned files), so symlinks in layers are exercised for real.
`need_tool("skopeo")` skips a test with the package to install when a tool is missing.
`golden_dir`, `catalog_dir`, `golden_inputs` and `make_environment` serve the planning tests.
`local_registry` (the root conftest's) starts Debian's docker-registry on a free loopback port for the push/pull tests.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import stat
import subprocess
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from nodus.builder.layers import Entry, tree_entries
from nodus.specs.environment import Environment
from nodus.specs.parse import parse_text
from nodus.testing import simple_index as simple_index_helpers

PYTHON = Path("/usr/bin/python3.11")
STDLIB = Path("/usr/lib/python3.11")
# What a grader never imports: the static libpython (25 MB), bytecode caches, third-party packages.
STDLIB_SKIPPED = {"__pycache__", "site-packages", "dist-packages", "config-3.11-x86_64-linux-gnu", "test"}
PACKAGES = {"skopeo": "skopeo", "umoci": "umoci", "podman": "podman runc uidmap"}


@pytest.fixture
def need_tool() -> Callable[[str], str]:
    """`need_tool(name)`: the tool's path, or a skip that says which Debian package brings it."""

    def need(name: str) -> str:
        found = shutil.which(name)
        if found is None:
            pytest.skip(f"{name} is not installed (apt-get install {PACKAGES.get(name, name)})")
        return found

    return need


@pytest.fixture
def sample_entries() -> Callable[..., dict[str, Entry]]:
    """`sample_entries(greeting=b"hello")`: a small tree with a file, a script, a symlink, an owned folder."""

    def make(greeting: bytes = b"hello\n") -> dict[str, Entry]:
        return {
            "etc/greeting": Entry.file(greeting),
            "usr/local/bin/greet": Entry.file(b"#!/bin/sh\ncat /etc/greeting\n", mode=0o755),
            "usr/bin/greet": Entry.symlink("../local/bin/greet"),
            "opt/environment": Entry.directory(mode=0o700, uid=10001, gid=10001),
            "opt/environment/task.json": Entry.file(b'{"q":1}', mode=0o600, uid=10001, gid=10001),
        }

    return make


def _host_path_entries(path: str, entries: dict[str, Entry]) -> None:
    """Entries that make `path` resolve in the image as on this host: each symlink on the way, then the file."""
    parts = Path(path).parts[1:]
    current = Path("/")
    for index, part in enumerate(parts):
        current = current / part
        if current.is_symlink():
            target = os.readlink(current)
            entries[str(current).lstrip("/")] = Entry.symlink(target)
            resolved = Path(os.path.normpath(current.parent / target))  # an absolute target replaces the parent
            _host_path_entries(str(resolved.joinpath(*parts[index + 1 :])), entries)
            return
    entries[str(current).lstrip("/")] = Entry.file(current, mode=stat.S_IMODE(current.stat().st_mode))


def _linked_libraries(binaries: list[Path]) -> set[str]:
    """The paths `ldd` gives for each library (and the loader) the binaries need."""
    found: set[str] = set()
    for binary in binaries:
        out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=False).stdout
        for line in out.splitlines():
            parts = line.split()
            if "=>" in parts and len(parts) >= 3 and parts[2].startswith("/"):
                found.add(parts[2])
            elif parts and parts[0].startswith("/"):
                found.add(parts[0])
    return found


@pytest.fixture(scope="session")
def python_rootfs() -> dict[str, Entry]:
    """A rootfs that runs `python3 -c ...` as any uid: Debian's python3.11, stdlib, linked libraries."""
    if not PYTHON.exists() or shutil.which("ldd") is None:
        pytest.skip("needs Debian's /usr/bin/python3.11 and ldd (apt-get install python3.11 libc-bin)")
    entries = tree_entries(STDLIB, prefix=str(STDLIB), exclude=lambda rel: Path(rel).name in STDLIB_SKIPPED)
    entries["usr/bin/python3.11"] = Entry.file(PYTHON, mode=0o755)
    entries["usr/bin/python3"] = Entry.symlink("python3.11")
    for library in sorted(_linked_libraries([PYTHON, *STDLIB.glob("lib-dynload/*.so")])):
        _host_path_entries(library, entries)
    entries["tmp"] = Entry.directory(mode=0o1777)
    return entries


# Planning and nodus.lock ---------------------------------------------------------------------------------

BUILDER_ROOT = Path(__file__).resolve().parents[1]
GOLDEN = BUILDER_ROOT / "tests" / "golden"
CATALOG = BUILDER_ROOT.parent / "catalog"


@pytest.fixture
def golden_dir() -> Path:
    """builder/tests/golden: inputs.json and one planned BuildSpec per catalog Environment."""
    return GOLDEN


@pytest.fixture
def catalog_dir() -> Path:
    """The repository's catalog: one folder per Environment, each with its environment.yaml."""
    return CATALOG


@pytest.fixture
def golden_inputs(golden_dir: Path) -> dict[str, Any]:
    """The fixed fake base image, requirements and builder version the golden plans are made from."""
    data: dict[str, Any] = json.loads((golden_dir / "inputs.json").read_text(encoding="utf-8"))
    return data


@pytest.fixture
def make_environment() -> Callable[..., Environment]:
    """`make_environment(package={"path": "."}, name="demo", version="1.0.0")`: a validated Environment."""

    def make(package: dict[str, Any] | None = None, *, name: str = "demo", version: str = "1.0.0") -> Environment:
        document = {
            "apiVersion": "nodus.dev/v1",
            "kind": "Environment",
            "metadata": {"name": name},
            "spec": {"version": version, "package": package or {"path": "."}},
        }
        result = parse_text(json.dumps(document))
        result.raise_for_errors()
        environment = result.resources[0].resource
        assert isinstance(environment, Environment)
        return environment

    return make


@pytest.fixture
def wheel_from_folder() -> Callable[..., Path]:
    """`wheel_from_folder(folder, out, name=, version=, dependencies=())`: a wheel of the folder's modules."""
    return simple_index_helpers.wheel_from_folder


@pytest.fixture
def simple_index(tmp_path: Path) -> Iterator[Callable[[Sequence[Path]], str]]:
    """`simple_index(wheels)`: a PEP 503 index of `wheels` served on 127.0.0.1 until the test ends; its URL."""
    module = simple_index_helpers
    served = itertools.count()
    with contextlib.ExitStack() as servers:

        def serve(wheels: Sequence[Path]) -> str:
            root = module.write_index(tmp_path / f"index-{next(served)}", wheels)
            return str(servers.enter_context(module.serve_index(root)))

        yield serve
