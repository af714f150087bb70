"""Uploaded module bundles: what `rl.train(tasks, reward)` sends, unpacked into a path package nodus-build builds.

Who calls it: the SDK's `rl.train` path (through the reconciler) hands over a bundle, the reward function and
the lines of its file it uses, plus the tasks; `unpack` turns it into a package folder under the project's
state folder, and an Environment spec with `package.path` pointing there is built like any other. The folder
is named by the bundle's digest, so the same code and tasks always give the same folder, the same source
digest and so the same BuildSpec key: a second `rl.train` with unchanged code reuses the image.

A bundle is one JSON document (canonical JSON, so its digest is stable):

    {"apiVersion": "nodus.dev/bundle/v1",
     "module": "reward_env",                  the module the loader imports
     "files": {"reward_env.py": "...", "tasks.jsonl": "..."},
     "requirements": ["sympy==1.13.3"]}       third-party requirements, locked by the build like any package

Paths must be plain relative POSIX paths inside the bundle (no `..`, no absolute paths, no hidden files), so
a bundle can never write outside its folder.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from nodus.builder.oci import canonical_json, sha256_digest
from nodus.builder.store import Store
from nodus.errors import ConfigError

API_VERSION = "nodus.dev/bundle/v1"
MAX_BUNDLE_BYTES = 64 << 20
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


def make_bundle(module: str, files: Mapping[str, str], requirements: Sequence[str] = ()) -> bytes:
    """The canonical bytes of a bundle (what the SDK uploads)."""
    document = {"apiVersion": API_VERSION, "module": module, "files": dict(files), "requirements": sorted(requirements)}
    _check(document, "bundle")
    return canonical_json(document)


def unpack(data: bytes, store: Store, *, source: str = "bundle") -> Path:
    """The package folder of a bundle (made once per digest, atomically); `source` names it in errors."""
    if len(data) > MAX_BUNDLE_BYTES:
        raise ConfigError(f"{source}: {len(data)} bytes is more than a bundle may hold ({MAX_BUNDLE_BYTES})")
    try:
        document = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{source}: not a bundle (not JSON: {exc})") from exc
    _check(document, source)
    digest = sha256_digest(canonical_json(document))
    target = store.root / "bundles" / digest.removeprefix("sha256:")
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=".bundle-", dir=target.parent))
    try:
        for relative, text in sorted(document["files"].items()):
            path = partial / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        dependencies = json.dumps(document["requirements"])
        (partial / "pyproject.toml").write_text(
            f'[project]\nname = "nodus-bundle-{digest[7:19]}"\nversion = "0.0.0"\ndependencies = {dependencies}\n',
            encoding="utf-8",
        )
        partial.replace(target)
    except FileExistsError:
        shutil.rmtree(partial, ignore_errors=True)  # another process unpacked the same bundle first
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return target


def _check(document: Any, source: str) -> None:
    if not isinstance(document, dict):
        raise ConfigError(f"{source}: a bundle is a JSON object")
    unknown = sorted(set(document) - {"apiVersion", "module", "files", "requirements"})
    if unknown:
        raise ConfigError(
            f"{source}: unknown field {unknown[0]!r}", hint="fields: apiVersion, module, files, requirements"
        )
    if document.get("apiVersion") != API_VERSION:
        raise ConfigError(f"{source}: apiVersion must be {API_VERSION} (got {document.get('apiVersion')!r})")
    module = document.get("module")
    if not isinstance(module, str) or not _MODULE.fullmatch(module):
        raise ConfigError(f"{source}: module {module!r} is not a Python module name")
    files = document.get("files")
    if not isinstance(files, dict) or not files:
        raise ConfigError(f"{source}: files must map paths to their text")
    for relative, text in files.items():
        parts = PurePosixPath(relative).parts if isinstance(relative, str) else ()
        if not parts or relative.startswith("/") or not all(_PART.fullmatch(part) for part in parts):
            raise ConfigError(f"{source}: files: {relative!r} is not a plain relative path inside the bundle")
        if relative == "pyproject.toml":
            raise ConfigError(f"{source}: files: pyproject.toml is written from requirements; leave it out")
        if not isinstance(text, str):
            raise ConfigError(f"{source}: files: {relative} must be text")
    if f"{module}.py" not in files and f"{module}/__init__.py" not in files:
        raise ConfigError(f"{source}: module {module} is not among its files ({module}.py)")
    requirements = document.get("requirements", [])
    if not isinstance(requirements, list) or not all(isinstance(item, str) and item.strip() for item in requirements):
        raise ConfigError(f"{source}: requirements must be a list of requirement strings")
