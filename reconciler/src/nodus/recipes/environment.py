"""The Environment package `rl.train(tasks, reward)` makes: one module, its task lists and environment.yaml.

Who calls it: `nodus.recipes.rl.train`. It extracts the reward (`nodus.recipes.packaging`), checks its imports
(`nodus.recipes.imports`), and writes the package through nodus-build's bundle format
(`nodus.builder.bundle`), the same bytes an upload would carry, into the project's state folder:

    .nodus/bundles/<bundle digest>/
        nodus_rl_env.py      the reward's lines, then `_nodus_environment()` (the loader nodus-env calls)
        tasks.json           {"test": [...], "train": [...]}: the split the SDK made, answers included
        environment.yaml     kind Environment, version 1.0.0, package {path: ., loader: ...}
        pyproject.toml       the requirements of pip= (written by the bundle)

The Environment is named after the reward and a digest of the module, the tasks, pip= and the project, so the
same code and tasks give the same name, the same folder and the same image: a second run reuses it at once.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from nodus.builder.bundle import make_bundle, unpack
from nodus.builder.store import Store
from nodus.recipes.imports import check_imports
from nodus.recipes.packaging import Extracted, extract
from nodus.recipes.tasks import Split, split
from nodus.reconciler.planning.diff import CREATED_BY, SDK

MODULE = "nodus_rl_env"
LOADER = f"{MODULE}:_nodus_environment"
VERSION = "1.0.0"
SPEC_FILE = "environment.yaml"
TASKS_FILE = "tasks.json"
DIGEST_CHARS = 10

HEADER = '''"""{function}() and the lines of its file that it uses, packaged by rl.train (nodus.recipes.rl).

nodus-env loads this module through _nodus_environment() below; the tasks are in tasks.json beside it.
"""
'''
FOOTER = """

# --- Added by rl.train: the loader nodus-env calls (names of its own, so none of yours is shadowed). ---


def _nodus_environment():
    import json as _json
    import pathlib as _pathlib
    import types as _types

    lists = _json.loads(_pathlib.Path(__file__).with_name("tasks.json").read_text(encoding="utf-8"))
    return _types.SimpleNamespace(tasks=lambda split: lists[split], reward={function})
"""


@dataclass(frozen=True)
class PackagedEnvironment:
    """An Environment package on disk, ready to build and apply."""

    name: str
    project: str
    folder: Path
    extracted: Extracted
    split: Split
    requirements: tuple[str, ...]

    version = VERSION

    @property
    def reference(self) -> str:
        """`name@version`, as a TrainingJob names it."""
        return f"{self.name}@{self.version}"

    @property
    def spec_file(self) -> Path:
        return self.folder / SPEC_FILE

    @property
    def module_file(self) -> Path:
        return self.folder / f"{MODULE}.py"

    @property
    def header_lines(self) -> int:
        """Lines of the module before the reward's own lines (to map tracebacks back to its file)."""
        return len(HEADER.format(function=self.extracted.function).splitlines())


def slug(function: str) -> str:
    """A reward's name as the start of a DNS label (`score_answer` -> `score-answer`)."""
    text = re.sub(r"[^a-z0-9]+", "-", function.lower()).strip("-")[:40].strip("-")
    return text or "reward"


def module_text(extracted: Extracted) -> str:
    return HEADER.format(function=extracted.function) + extracted.body + FOOTER.format(function=extracted.function)


def environment_name(extracted: Extracted, tasks_json: str, requirements: Sequence[str], project: str) -> str:
    """`<reward>-<digest>`: the same module, tasks, requirements and project always give the same name."""
    identity = json.dumps(
        {
            "module": module_text(extracted),
            "tasks": tasks_json,
            "requirements": sorted(requirements),
            "project": project,
        },
        sort_keys=True,
        ensure_ascii=False,
    )
    return f"{slug(extracted.function)}-{hashlib.sha256(identity.encode()).hexdigest()[:DIGEST_CHARS]}"


def environment_yaml(name: str, project: str, extracted: Extracted, tasks: Split) -> str:
    document = {
        "apiVersion": "nodus.dev/v1",
        "kind": "Environment",
        "metadata": {"name": name, "project": project, "labels": {CREATED_BY: SDK}},
        "spec": {
            "version": VERSION,
            "package": {"path": ".", "loader": LOADER},
            "category": "Custom",
            "modes": ["Train", "Evaluate"],
            "description": f"{extracted.function}() with {len(tasks.train)} train and {len(tasks.test)} held-out "
            "tasks, packaged by rl.train.",
        },
    }
    note = "# Made by rl.train (nodus.recipes.rl): this file, the module and tasks.json are one bundle.\n"
    return note + yaml.safe_dump(document, sort_keys=False, allow_unicode=True)


def package(
    tasks: Iterable[Any],
    reward: Callable[..., Any],
    *,
    store: Store,
    project: str,
    test_tasks: Iterable[Any] | None = None,
    pip: Sequence[str] = (),
) -> PackagedEnvironment:
    """Check the tasks and the reward (one-line errors, nothing written), then write the package once."""
    chosen = split(tasks, test_tasks)
    extracted = extract(reward)
    check_imports(extracted, pip)
    requirements = tuple(sorted(pip))
    tasks_json = chosen.to_json()
    name = environment_name(extracted, tasks_json, requirements, project)
    files = {
        f"{MODULE}.py": module_text(extracted),
        TASKS_FILE: tasks_json,
        SPEC_FILE: environment_yaml(name, project, extracted, chosen),
    }
    folder = unpack(make_bundle(MODULE, files, requirements), store, source=f"rl.train({extracted.function})")
    return PackagedEnvironment(name, project, folder, extracted, chosen, requirements)
