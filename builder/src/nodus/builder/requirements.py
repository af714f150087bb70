"""An Environment package's third-party requirements: found, locked with hashes for the image, installed.

Who calls it: the build step (`nodus.builder.build`), before planning (`lock` gives the `LockedRequirements`
that go into the BuildSpec) and when it makes the requirements layer (`install`).

- What a package asks for: a path package's `pyproject.toml` `[project] dependencies` (or, without one, its
  `requirements.txt`); a pip package is itself the requirement, `name==version`, from its index.
- Locking: `uv pip compile --generate-hashes` for the image's platform (CPython 3.11 on x86_64 glibc 2.36,
  Debian bookworm), so the lock does not depend on the machine that builds. A resolution is cached by the
  hash of what was asked, so a rebuild neither re-resolves nor sees a newer release.
- Installing: `uv pip install --target --require-hashes --no-deps` into a folder that becomes one layer;
  every download is checked against the lock's hashes. A requirement published only as an sdist (Reasoning
  Gym's cellpylib and pycosat, say) is built into a wheel on the build host, without debug info and with
  fixed timestamps so that two builds give the same bytes (the two-builds test checks the digests).
"""

from __future__ import annotations

import os
import re
import subprocess
import tomllib
from collections.abc import Sequence
from pathlib import Path

from nodus.builder import host_programs
from nodus.builder.oci import canonical_json, sha256_digest
from nodus.builder.plan import LockedRequirements
from nodus.builder.store import Store
from nodus.errors import BuildError, ConfigError, PrerequisiteError

PYTHON_VERSION = "3.11"
PYTHON_PLATFORM = "x86_64-manylinux_2_36"
_REQUIREMENT_START = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*==")


def uv_binary() -> str:
    """The uv that nodus-build depends on (the `uv` wheel), else one on PATH."""
    try:
        from uv import find_uv_bin

        return str(find_uv_bin())
    except (ImportError, FileNotFoundError):
        found = host_programs.which("uv")
        if found is None:
            raise PrerequisiteError("nodus-build needs uv to lock requirements", hint="pip install uv") from None
        return found


def package_requirements(folder: Path) -> list[str]:
    """What a path package asks for: `[project] dependencies` of its pyproject.toml, else requirements.txt."""
    pyproject = folder / "pyproject.toml"
    if pyproject.is_file():
        try:
            document = tomllib.loads(pyproject.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{pyproject}: not valid TOML: {exc}") from exc
        dependencies = document.get("project", {}).get("dependencies", [])
        if not isinstance(dependencies, list) or not all(isinstance(item, str) for item in dependencies):
            raise ConfigError(f"{pyproject}: project.dependencies must be a list of requirement strings")
        return sorted(dependencies)
    requirements = folder / "requirements.txt"
    if requirements.is_file():
        lines = requirements.read_text(encoding="utf-8").splitlines()
        return sorted(line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#"))
    return []


def lock(asked: Sequence[str], *, index: str | None, store: Store) -> LockedRequirements:
    """Locks `asked` with hashes for the image platform; cached by what was asked (and from which index)."""
    if not asked:
        return LockedRequirements.of([])
    question = {"asked": sorted(asked), "index": index, "python": PYTHON_VERSION, "platform": PYTHON_PLATFORM}
    cached = store.cache / "requirements" / f"{sha256_digest(canonical_json(question)).removeprefix('sha256:')}.txt"
    if cached.is_file():
        return LockedRequirements.of(cached.read_text(encoding="utf-8").splitlines())
    command = [
        uv_binary(),
        "pip",
        "compile",
        "-",
        "--generate-hashes",
        "--no-header",
        "--no-annotate",
        "--quiet",
        "--python-version",
        PYTHON_VERSION,
        "--python-platform",
        PYTHON_PLATFORM,
        *index_options(index),
    ]
    result = subprocess.run(
        command, input="\n".join(asked) + "\n", capture_output=True, text=True, check=False, env=_uv_environ()
    )
    if result.returncode != 0:
        raise BuildError(f"locking {', '.join(asked)} failed: {_last_lines(result.stderr)}", hint="check the names")
    locked = LockedRequirements.of(parse_compiled(result.stdout))
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_text(locked.text(), encoding="utf-8")
    return locked


def index_options(index: str | None) -> list[str]:
    # `--index` puts the package's own index first and keeps PyPI for its dependencies; uv's first-index
    # strategy then never takes a name the private index has from PyPI (no dependency confusion).
    return ["--index", index] if index else []


def parse_compiled(text: str) -> list[str]:
    """`name==version --hash=... --hash=...` per package from uv's output (continuation lines joined)."""
    joined = text.replace("\\\n", " ")
    lines: list[str] = []
    for raw in joined.splitlines():
        line = " ".join(raw.split())
        if not line or line.startswith("#"):
            continue
        if not _REQUIREMENT_START.match(line):
            raise BuildError(f"uv pip compile wrote a line nodus-build cannot read: {line[:120]!r}")
        name, _, rest = line.partition(" ")
        hashes = sorted(part for part in rest.split() if part.startswith("--hash="))
        lines.append(" ".join([name.lower(), *hashes]))
    return lines


def install(requirements: LockedRequirements, target: Path, *, index: str | None, scratch: Path) -> None:
    """Installs the locked requirements into `target` (verified by hash, no dependencies beyond the lock)."""
    if not requirements.lines:
        return
    file = scratch / "requirements.lock.txt"
    file.write_text("".join(line.replace(" --hash", " \\\n    --hash") + "\n" for line in requirements.lines))
    command = [
        uv_binary(),
        "pip",
        "install",
        "--target",
        str(target),
        "--require-hashes",
        "--no-deps",
        "--quiet",
        "--python-version",
        PYTHON_VERSION,
        "--python-platform",
        PYTHON_PLATFORM,
        *index_options(index),
        "-r",
        str(file),
    ]
    result = subprocess.run(command, capture_output=True, text=True, check=False, env=_uv_environ())
    if result.returncode != 0:
        raise BuildError(f"installing the locked requirements failed: {_last_lines(result.stderr)}")


def _uv_environ() -> dict[str, str]:
    environ = dict(os.environ)
    # Bytecode would be written with the build's timestamps; the image runs with PYTHONDONTWRITEBYTECODE.
    environ.pop("UV_COMPILE_BYTECODE", None)
    environ.setdefault("UV_NO_PROGRESS", "1")
    # An sdist is built on this host. Debug info records the random temporary build folder, so the same
    # sdist compiled twice gave different bytes (pycosat, a Reasoning Gym dependency); without it, and with
    # fixed timestamps and hash seed, the wheels come out byte-identical.
    environ.update(CFLAGS="-g0", CXXFLAGS="-g0", SOURCE_DATE_EPOCH="0", PYTHONHASHSEED="0")
    return environ


def _last_lines(text: str, count: int = 3) -> str:
    return " | ".join(text.strip().splitlines()[-count:]) or "no output"
