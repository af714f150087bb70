"""No function-level import of a nodus module outside the CLI: a cycle is fixed by moving code, not hidden.

Who runs it: the test suite (fast, no tools: it reads the source with `ast`). An import of `nodus.*` inside a
function is how a cycle between two modules gets held together (planning -> pricing -> planning was one); the
import-linter contracts in pyproject.toml see those imports too, but nothing stopped new ones. The CLI
(`nodus.cli`, and `nodus.builder.cli` for nodus-build) keeps its lazy imports: they keep `--help` fast.

Imports inside functions that stay are for optional heavy third-party dependencies only (`OPTIONAL_HEAVY`:
nodus imports them where they are used, never at module level of a module the CLI loads); this test does
not look at those. `ALLOWED` is a ratchet: each entry `module: imported module` is a function-level nodus
import that still exists and is to be removed. The test fails on any import not listed and on any entry whose
import is gone, so the list only shrinks.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCES = ["specs/src", "builder/src", "reconciler/src", "images/env-base/src", "runtimes/src"]
CLI_MODULES = ("nodus.cli", "nodus.builder.cli")
"""The command-line entry points: their lazy imports keep `nodus --help` and `nodus-build --help` fast."""

OPTIONAL_HEAVY = (
    "rich",
    "yaml",
    "jsonschema",
    "torch",
    "transformers",
    "peft",
    "trl",
    "vllm",
    "ray",
    "dagger",
    "anyio",
    "sigstore",
    "psycopg",
)
"""Third-party packages imported on use (a fast path, or an optional extra): the only function-level imports
that are meant to stay. Listed for readers; the check below is about `nodus.*` only."""

ALLOWED: frozenset[str] = frozenset(
    {
        # Not a cycle: `nodus --help` loads nodus.builder.build (through the Environment controller), and these
        # three cost it tens of milliseconds; they go when the CLI stops loading the controllers for --help.
        "nodus.builder.build: nodus.builder.dagger_backend",
        "nodus.builder.build: nodus.builder.provenance",
        "nodus.builder.build: nodus.builder.registry",
    }
)
"""`module: imported module` for each function-level nodus import still to remove (empty: none left)."""


def _modules() -> Iterator[tuple[str, Path]]:
    for source in SOURCES:
        root = REPO / source
        for path in sorted(root.rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            yield ".".join(parts), path


def _is_cli(module: str) -> bool:
    return any(module == cli or module.startswith(cli + ".") for cli in CLI_MODULES)


def _function_imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement inside a function or method body, at any depth."""
    seen: set[int] = set()  # a nested function is walked inside its outer one too: each import once
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for inner in ast.walk(node):
                if isinstance(inner, ast.Import | ast.ImportFrom) and id(inner) not in seen:
                    seen.add(id(inner))
                    yield inner


def _imported(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, known: set[str]) -> list[str]:
    """The modules an import names: `from nodus.builder import signing` is `nodus.builder.signing`."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        package = module.split(".") if is_package else module.split(".")[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join([*package, *([base] if base else [])])
    found = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in known]
    return found or [base]


def function_level_nodus_imports() -> set[str]:
    modules = dict(_modules())
    known = set(modules)
    found: set[str] = set()
    for module, path in modules.items():
        if _is_cli(module):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in _function_imports(tree):
            for name in _imported(node, module, path.name == "__init__.py", known):
                if name == "nodus" or name.startswith("nodus."):
                    found.add(f"{module}: {name}")
    return found


def test_no_function_level_nodus_import_outside_the_cli() -> None:
    found = function_level_nodus_imports()
    new = sorted(found - ALLOWED)
    assert not new, (
        "function-level imports of nodus modules (move the code both need into a module below them, or import "
        "at module level; only optional heavy dependencies are imported on use): " + "; ".join(new)
    )


def test_the_allowlist_only_shrinks() -> None:
    gone = sorted(ALLOWED - function_level_nodus_imports())
    assert not gone, "these function-level imports are gone: take them out of ALLOWED: " + "; ".join(gone)


def test_the_check_sees_a_function_level_import() -> None:
    """The walker finds imports in nested functions and methods, absolute and relative, and not module-level or
    TYPE_CHECKING ones (a guard against a check that passes because it looks at nothing)."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "from nodus.errors import ConfigError\n"
        "if TYPE_CHECKING:\n"
        "    from nodus.specs import Environment\n"
        "class A:\n"
        "    def method(self):\n"
        "        def inner():\n"
        "            from nodus.builder import signing\n"
        "        import nodus.specs.types\n"
        "async def run():\n"
        "    from . import sibling\n"
    )
    known = {"nodus.builder.signing", "nodus.reconciler.sibling"}
    found = {
        name
        for node in _function_imports(ast.parse(source))
        for name in _imported(node, "nodus.reconciler.example", False, known)
    }
    assert found == {"nodus.builder.signing", "nodus.specs.types", "nodus.reconciler.sibling"}
