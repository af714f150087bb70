"""An Environment package's third-party requirements: found, locked with hashes for the image, installed.

Who calls it: the build step (`nodus.builder.build`), before planning (`lock` gives the `LockedRequirements`
that go into the BuildSpec) and when it makes the requirements layer (`install`).

- What a package asks for: a path package's `pyproject.toml` `[project] dependencies` (or, without one, its
  `requirements.txt`); a pip package is itself the requirement, `name==version`.
- Where from: the default index (PyPI, or the one uv's configuration names), except a pip package with
  `package.pip.index`: the package itself comes from that index alone (an explicit index pinned to it) and
  its dependencies from the default index alone, so a name the private index also has never shadows PyPI's
  (dependency confusion). The lock records which packages came from the named index.
- Locking: `uv pip compile --generate-hashes` for the image's platform (CPython 3.11 on x86_64 glibc 2.36,
  Debian bookworm), so the lock does not depend on the machine that builds. A resolution is cached by the
  hash of what was asked, so a rebuild neither re-resolves nor sees a newer release.
- Installing: `uv pip install --target --require-hashes --no-deps` into a folder that becomes one layer;
  every download is checked against the lock's hashes. A requirement published only as an sdist (Reasoning
  Gym's cellpylib and pycosat, say) is built into a wheel on the build host, without debug info and with
  fixed timestamps so that two builds give the same bytes (the two-builds test checks the digests).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
import tomllib
from collections.abc import Sequence
from pathlib import Path

from nodus.builder import host_programs
from nodus.builder.oci import canonical_json, sha256_digest
from nodus.builder.plan import LockedRequirements, normalized_name
from nodus.builder.private import write_file
from nodus.builder.store import Store
from nodus.errors import BuildError, ConfigError, PrerequisiteError

PYTHON_VERSION = "3.11"
PYTHON_PLATFORM = "x86_64-manylinux_2_36"
_REQUIREMENT_START = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*==")
_REQUIREMENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


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
    """Locks `asked` with hashes for the image platform; cached by what was asked (and from which index).

    With `index` (a pip package's `package.pip.index`), each package `asked` names comes from that index
    alone, never from PyPI, and every dependency from the default index alone (see `_explicit_project`).
    """
    if not asked:
        return LockedRequirements.of([])
    question: dict[str, object] = {
        "asked": sorted(asked),
        "index": index,
        "python": PYTHON_VERSION,
        "platform": PYTHON_PLATFORM,
    }
    if index is not None:
        # Earlier nodus-builds put the index first for every package; their cached answers must not be reused.
        question["pinned"] = "explicit"
    cached = store.cache / "requirements" / f"{sha256_digest(canonical_json(question)).removeprefix('sha256:')}.txt"
    if cached.is_file():
        return LockedRequirements.from_text(cached.read_text(encoding="utf-8"))
    locked = _compile(asked) if index is None else _compile_from_index(asked, index)
    write_file(cached, locked.text().encode())
    return locked


def _compile_command(source: str) -> list[str]:
    return [
        uv_binary(),
        "pip",
        "compile",
        source,
        "--generate-hashes",
        "--no-header",
        "--no-annotate",
        "--quiet",
        "--python-version",
        PYTHON_VERSION,
        "--python-platform",
        PYTHON_PLATFORM,
    ]


def _compile(asked: Sequence[str]) -> LockedRequirements:
    result = subprocess.run(
        _compile_command("-"),
        input="\n".join(asked) + "\n",
        capture_output=True,
        text=True,
        check=False,
        env=_uv_environ(),
    )
    if result.returncode != 0:
        raise BuildError(f"locking {', '.join(asked)} failed: {uv_cause(result.stderr)}", hint="check the names")
    return LockedRequirements.of(parse_compiled(result.stdout))


def _compile_from_index(asked: Sequence[str], index: str) -> LockedRequirements:
    with tempfile.TemporaryDirectory(prefix="nodus-lock-") as folder:
        project = Path(folder) / "pyproject.toml"
        project.write_text(_explicit_project(asked, index), encoding="utf-8")
        command = [*_compile_command(str(project)), "--emit-index-annotation"]
        result = subprocess.run(command, capture_output=True, text=True, check=False, cwd=folder, env=_uv_environ())
    wanted = ", ".join(asked)
    if result.returncode != 0:
        cause = uv_cause(result.stderr)
        names = [normalized_name(_REQUIREMENT_NAME.match(item).group(0)) for item in asked]  # type: ignore[union-attr]
        if any(_not_found(cause, name) for name in names):
            raise BuildError(
                f"{wanted} is not on index {index}: {cause}",
                hint="check package.pip.name and version against the index (the package never comes from PyPI)",
            )
        raise BuildError(
            f"locking {wanted} from index {index} (its dependencies from the default index) failed: {cause}",
            hint="a dependency only the private index has cannot be used: dependencies come from PyPI alone",
        )
    origins = parse_origins(result.stdout)
    lines = parse_compiled(result.stdout)
    indexes: dict[str, str] = {}
    for item in asked:
        name = _asked_name(item)
        # uv pins the package to the explicit index; checked, so a changed uv cannot silently take PyPI's.
        if origins.get(name, "").rstrip("/") != index.rstrip("/"):
            raise BuildError(f"uv locked {name} from {origins.get(name) or 'an unknown index'}, not from index {index}")
        indexes[name] = index
    return LockedRequirements.of(lines, indexes)


def _explicit_project(asked: Sequence[str], index: str) -> str:
    """A throwaway project that asks for `asked`, each pinned to `index` marked explicit.

    Why explicit, and not `--index` (the index first, PyPI after it): with the index first, any dependency
    the private index also has would be taken from it instead of PyPI, so whoever controls that index (or a
    name squatted on it) decides what e.g. `numpy` is: dependency confusion. An explicit index serves only
    the packages pinned to it, so the environment's package never comes from PyPI (a missing one fails) and
    its dependencies only ever come from the default index.
    """
    names = sorted({normalized_name(_REQUIREMENT_NAME.match(item).group(0)) for item in asked})  # type: ignore[union-attr]
    return "\n".join(
        [
            "[project]",
            'name = "nodus-build-lock-request"',
            'version = "0"',
            f"dependencies = {json.dumps(sorted(asked))}",
            "",
            "[tool.uv.sources]",
            *(f'{json.dumps(name)} = {{ index = "environment-package" }}' for name in names),
            "",
            "[[tool.uv.index]]",
            'name = "environment-package"',
            f"url = {json.dumps(index)}",
            "explicit = true",
            "",
        ]
    )


def _asked_name(requirement: str) -> str:
    """The normalised name of an asked requirement (`reverse-words==1.0.0` -> `reverse-words`)."""
    found = _REQUIREMENT_NAME.match(requirement.strip())
    if found is None:
        raise ConfigError(f"requirement {requirement!r} does not start with a package name")
    return normalized_name(found.group(0))


def _not_found(cause: str, name: str) -> bool:
    return f"no version of {name}" in cause or f"{name} was not found" in cause


def parse_origins(text: str) -> dict[str, str]:
    """`name -> index URL` from the `# from URL` lines `uv pip compile --emit-index-annotation` writes."""
    origins: dict[str, str] = {}
    current: str | None = None
    for raw in text.replace("\\\n", " ").splitlines():
        line = raw.strip()
        if _REQUIREMENT_START.match(line):
            current = normalized_name(line.partition("==")[0])
        elif line.startswith("# from ") and current is not None:
            origins[current] = line.removeprefix("# from ").strip()
    return origins


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


def install(requirements: LockedRequirements, target: Path, *, scratch: Path) -> None:
    """Installs the locked requirements into `target` (verified by hash, no dependencies beyond the lock).

    Each package is fetched from where the lock says it came from: those locked from a named index from
    that index alone (`--default-index`, no PyPI), the others from the default index.
    """
    groups: dict[str | None, list[str]] = {}
    for line in requirements.lines:
        groups.setdefault(requirements.index_of(line), []).append(line)
    for number, (index, lines) in enumerate(sorted(groups.items(), key=lambda item: item[0] or "")):
        file = scratch / f"requirements.lock.{number}.txt"
        file.write_text("".join(line.replace(" --hash", " \\\n    --hash") + "\n" for line in lines))
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
            *(["--default-index", index] if index is not None else []),
            "-r",
            str(file),
        ]
        result = subprocess.run(command, capture_output=True, text=True, check=False, env=_uv_environ())
        if result.returncode != 0:
            where = f" from index {index}" if index is not None else ""
            raise BuildError(f"installing the locked requirements{where} failed: {uv_cause(result.stderr)}")


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


def uv_cause(stderr: str) -> str:
    """uv's error as one line, the real cause first: its first `cause:` (and the innermost, when they differ)."""
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    causes = [line.removeprefix("cause:").strip() for line in lines if line.startswith("cause:")]
    # Older uv draws the chain with box characters (`╰─▶ Because ...`) instead of `cause:`.
    causes += [line.lstrip("╰─▶ ").strip() for line in lines if line.startswith("╰─▶")]
    if causes:
        return causes[0] if len(causes) == 1 else f"{causes[0]} ({causes[-1]})"
    return " | ".join(lines[-3:]) or "no output"
