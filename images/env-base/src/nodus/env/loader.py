"""Finding and loading the environment named by `NODUS_ENVIRONMENT_LOADER` on `NODUS_ENVIRONMENT_PATH`.

Who uses it: `nodus.env.environment.load_environment`, once per grader process. The loader is `module`,
`module:function` or a bare `function`; a module is used through its `load_environment()` when it has one,
else as it is. Where a bare function is looked up depends on what kind of package the image holds:

- a pip package (nodus-build sets `NODUS_ENVIRONMENT_DISTRIBUTION` to its pip name): the top-level modules
  that distribution installed, from its metadata (`top_level.txt`, else the files its RECORD lists), never
  whatever else is importable (its dependencies are importable too); the one module that has the function wins;
- a path package: the only top-level module in the folders of `NODUS_ENVIRONMENT_PATH`.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_PATH = "/opt/environment"
DEFAULT_LOADER = "load_environment"


class LoadError(Exception):
    """The environment could not be found or loaded; the message says which step failed."""


@dataclass(frozen=True)
class Settings:
    """Where the environment is and what it is called, from the NODUS_* variables."""

    path: tuple[str, ...]
    loader: str
    name: str
    version: str
    distribution: str | None = None
    """The pip distribution the environment is (a pip package), None for a path package or an image."""

    @classmethod
    def from_env(cls) -> Settings:
        raw = os.environ.get("NODUS_ENVIRONMENT_PATH", DEFAULT_PATH)
        return cls(
            path=tuple(p for p in raw.split(os.pathsep) if p),
            loader=os.environ.get("NODUS_ENVIRONMENT_LOADER") or DEFAULT_LOADER,
            name=os.environ.get("NODUS_ENVIRONMENT") or "environment",
            version=os.environ.get("NODUS_ENVIRONMENT_VERSION") or "0.0.0",
            distribution=os.environ.get("NODUS_ENVIRONMENT_DISTRIBUTION") or None,
        )


def _top_level_modules(path: tuple[str, ...]) -> list[str]:
    found = set()
    for folder in path:
        for entry in Path(folder).glob("*"):
            if entry.suffix == ".py" and entry.stem.isidentifier() and entry.stem != "setup":
                found.add(entry.stem)
            elif entry.is_dir() and (entry / "__init__.py").exists() and entry.name.isidentifier():
                found.add(entry.name)
    return sorted(found)


def load(settings: Settings) -> Any:
    """The object the loader gives: what an adapter turns into tasks and rewards."""
    for folder in reversed(settings.path):
        if folder not in sys.path:
            sys.path.insert(0, folder)
    module_name, sep, function = settings.loader.partition(":")
    try:
        if sep:
            return _call(importlib.import_module(module_name), function, settings.loader)
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            if settings.distribution:
                return _call_in_distribution(settings.distribution, module_name, settings.loader)
            modules = _top_level_modules(settings.path)
            if len(modules) != 1:
                raise LoadError(
                    f"loader {settings.loader!r}: no module of that name, and {len(modules)} top-level modules "
                    f"on {os.pathsep.join(settings.path)} ({', '.join(modules) or 'none'}); use module:function"
                ) from None
            return _call(importlib.import_module(modules[0]), module_name, f"{modules[0]}:{module_name}")
        loader = getattr(module, DEFAULT_LOADER, None)
        return _call(module, DEFAULT_LOADER, settings.loader) if callable(loader) else module
    except LoadError:
        raise
    except Exception as exc:
        raise LoadError(f"loader {settings.loader!r} failed: {type(exc).__name__}: {exc}") from exc


def _call(module: Any, function: str, loader: str) -> Any:
    target = getattr(module, function, None)
    if not callable(target):
        raise LoadError(f"loader {loader!r}: {module.__name__} has no function {function!r}")
    return target()


def distribution_modules(distribution: str) -> list[str]:
    """The top-level modules `distribution` installed, from its metadata; LoadError when it is not installed."""
    try:
        found = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        raise LoadError(
            f"distribution {distribution!r} is not installed (searched {os.pathsep.join(sys.path)})"
        ) from None
    top_level = found.read_text("top_level.txt")
    if top_level is not None:
        # setuptools writes it; a name there may be a namespace folder or a module, one per line.
        return sorted({line.strip() for line in top_level.splitlines() if line.strip().isidentifier()})
    # Other build backends (hatchling, flit, poetry) write no top_level.txt: the files RECORD lists say it.
    modules = set()
    for file in found.files or ():
        parts = file.parts
        if not parts or parts[0].endswith((".dist-info", ".data")) or parts[0] == "__pycache__":
            continue
        if len(parts) == 1:
            if file.suffix == ".py" and file.stem.isidentifier():
                modules.add(file.stem)
        elif parts[0].isidentifier():
            modules.add(parts[0])
    return sorted(modules)


def _call_in_distribution(distribution: str, function: str, loader: str) -> Any:
    """`function()` of the one top-level module of `distribution` that has it (a bare-function loader)."""
    modules = distribution_modules(distribution)
    having, failed, loaded = [], [], []
    for name in modules:
        try:
            module = importlib.import_module(name)
        except Exception as exc:  # the package's own import error: said if no module has the function
            failed.append(f"{name} ({type(exc).__name__}: {exc})")
            continue
        loaded.append(module)
        if callable(getattr(module, function, None)):
            having.append(module)
    if len(having) == 1:
        return _call(having[0], function, f"{having[0].__name__}:{function}")
    if not having and function == DEFAULT_LOADER and len(loaded) == 1 and not failed:
        # The distribution's one module, with no load_environment(), is used as it is, as a path package's
        # module is (a verifiers v1 package exports its Taskset; a module of tasks() and reward()).
        return loaded[0]
    what = f"top-level modules {', '.join(modules)}" if modules else "no top-level modules"
    if having:
        raise LoadError(
            f"loader {loader!r}: distribution {distribution!r} has {len(having)} top-level modules with "
            f"{function}() ({', '.join(m.__name__ for m in having)}); name one as module:{function}"
        )
    cause = f"; failed to import {', '.join(failed)}" if failed else ""
    raise LoadError(
        f"loader {loader!r}: no top-level module of distribution {distribution!r} has {function}() "
        f"(it has {what}){cause}; use module:function"
    )
