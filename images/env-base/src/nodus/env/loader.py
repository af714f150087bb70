"""Finding and loading the environment named by `NODUS_ENVIRONMENT_LOADER` on `NODUS_ENVIRONMENT_PATH`.

Who uses it: `nodus.env.environment.load_environment`, once per grader process. The loader is `module`,
`module:function` or a bare `function` (looked up in the only top-level module on the path); a module
is used through its `load_environment()` when it has one, else as it is.
"""

from __future__ import annotations

import importlib
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

    @classmethod
    def from_env(cls) -> Settings:
        raw = os.environ.get("NODUS_ENVIRONMENT_PATH", DEFAULT_PATH)
        return cls(
            path=tuple(p for p in raw.split(os.pathsep) if p),
            loader=os.environ.get("NODUS_ENVIRONMENT_LOADER") or DEFAULT_LOADER,
            name=os.environ.get("NODUS_ENVIRONMENT") or "environment",
            version=os.environ.get("NODUS_ENVIRONMENT_VERSION") or "0.0.0",
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
