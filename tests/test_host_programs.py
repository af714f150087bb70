"""Every external program the code runs is in `nodus.builder.host_programs`, and the main job's setup installs each
one the quickstart path runs.

Why: CI runs on machines where earlier runs installed everything, so a missing install step passes there and fails
on a user's fresh machine (the quickstart once failed so: the Environment controller ran skopeo, which nothing of
`make quickstart` installed). The programs are read from the code that runs them: the names given to
`host_programs.which`, the first word of every argv list handed to subprocess (directly, or through a list named
elsewhere in the module), and every argv-shaped literal (a word, then options) that argv builders return, such as
process mode's `["unshare", "--net", ...]`, where the word is a program on this machine (a subcommand's argument
list, `["pull", "--quiet", ...]`, is not). The code inside grader images (`images/env-base`) runs the image's
programs and is left out.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

from nodus.builder.host_programs import PROGRAMS

REPO = Path(__file__).resolve().parents[1]
SOURCES = [REPO / name / "src" for name in ("specs", "builder", "reconciler", "runtimes")]
SUBPROCESS_CALLS = {"run", "Popen", "check_output", "check_call", "call"}
WORD = re.compile(r"[a-z][a-z0-9._-]*")


def _modules() -> Iterator[tuple[Path, ast.Module]]:
    for root in SOURCES:
        for path in sorted(root.rglob("*.py")):
            yield path, ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _first_word(node: ast.AST, assigned: dict[str, ast.AST]) -> str | None:
    """The program an argv expression starts with, when the code spells it out."""
    if isinstance(node, ast.Name) and node.id in assigned:
        return _first_word(assigned[node.id], {})
    if not isinstance(node, (ast.List, ast.Tuple)) or not node.elts:
        return None
    first = node.elts[0]
    if isinstance(first, ast.Constant) and isinstance(first.value, str):
        return first.value
    if isinstance(first, ast.Starred):
        return _first_word(first.value, assigned)
    return None


def _is_argv(node: ast.List | ast.Tuple) -> bool:
    """`["unshare", "--net", ...]`: a bare word first, then at least one option."""
    words = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    first = node.elts[0] if node.elts else None
    return (
        isinstance(first, ast.Constant)
        and isinstance(first.value, str)
        and WORD.fullmatch(first.value) is not None
        and any(word.startswith("-") for word in words[1:])
        and (first.value in PROGRAMS or shutil.which(first.value) is not None)
    )


def _called(node: ast.Call) -> str:
    return node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")


def programs_in(module: ast.Module) -> set[str]:
    assigned: dict[str, ast.AST] = {}
    for node in ast.walk(module):
        if isinstance(node, ast.Assign) and isinstance(node.value, (ast.List, ast.Tuple)):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    assigned[target.id] = node.value
    # A literal handed to a wrapper (`self._git(["reset", "--hard"])`) is a subcommand's arguments, not a program's.
    handed = {
        id(argument)
        for node in ast.walk(module)
        if isinstance(node, ast.Call) and _called(node) not in SUBPROCESS_CALLS
        for argument in node.args
    }
    found: set[str] = set()
    for node in ast.walk(module):
        if isinstance(node, ast.Call):
            name = _called(node)
            if name in ("which", "_which") and node.args:
                argument = node.args[0]
                if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
                    found.add(argument.value)
            if name in SUBPROCESS_CALLS and node.args:
                word = _first_word(node.args[0], assigned)
                if word is not None:
                    found.add(word)
        if isinstance(node, (ast.List, ast.Tuple)) and id(node) not in handed and _is_argv(node):
            first = node.elts[0]
            assert isinstance(first, ast.Constant)
            found.add(str(first.value))
    return found


def test_every_program_the_code_runs_is_in_the_table() -> None:
    unknown = {}
    seen: set[str] = set()
    for path, module in _modules():
        for program in programs_in(module):
            seen.add(program)
            if program not in PROGRAMS:
                unknown.setdefault(program, []).append(str(path.relative_to(REPO)))
    assert not unknown, f"programs the code runs that nodus.builder.host_programs does not list: {unknown}"
    # The scan finds what it must (it is not vacuous): the programs of the quickstart's path.
    assert {"podman", "mmdebstrap", "unshare", "prlimit", "setpriv", "git"} <= seen, seen


def test_nothing_looks_a_program_up_but_through_the_table() -> None:
    found = [
        str(path.relative_to(REPO))
        for path, module in _modules()
        if path.name != "host_programs.py"
        for node in ast.walk(module)
        if isinstance(node, ast.Attribute) and node.attr == "which" and getattr(node.value, "id", "") == "shutil"
    ]
    assert not found, f"use nodus.builder.host_programs.which (shutil.which in {found})"


def test_the_quickstart_setup_provides_every_program_the_main_job_runs() -> None:
    listed = subprocess.run(
        ["bash", str(REPO / ".ci" / "system-packages"), "--list", "quickstart"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    provided = dict(line.split(" ", 1) for line in listed.splitlines())
    makefile = (REPO / "Makefile").read_text()
    quickstart = makefile.split("\nquickstart:", 1)[1].split("\n\n", 1)[0]
    assert ".ci/system-packages quickstart" in quickstart, "make quickstart no longer runs its system setup"
    missing = []
    for program in PROGRAMS.values():
        if not program.quickstart or program.base:
            continue
        if program.package.startswith("pip:"):
            if f"pip install --quiet --disable-pip-version-check {program.package[4:]}" not in makefile:
                missing.append(f"{program.name} ({program.package})")
        elif provided.get(program.name) != program.package:
            missing.append(f"{program.name} (Debian {program.package})")
    assert not missing, f"make quickstart runs these, and its setup does not install them: {missing}"
    # skopeo is not on the main job's path any more: a fresh machine has none (FACTS.md).
    assert not PROGRAMS["skopeo"].quickstart and "skopeo" not in provided
