"""The README and the examples' READMEs tell the truth about the CLI: every `nodus ...` command they show exists
(checked with `nodus SUB [SUBSUB] --help` through CliRunner), every pinned `hf://nodus/tiny-qwen3@...` revision is
the one the tiny-model recipe builds for the quickstart, and the README's two quickstart commands are the
Makefile's targets.

Fast: nothing runs but `--help`.
"""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from nodus.cli.main import cli

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "examples" / "quickstart"
PAGES = [REPO / "README.md", *sorted((REPO / "examples").rglob("README.md"))]

FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
SPAN = re.compile(r"`([^`\n]+)`")
# `nodus get ...`, `.venv/bin/nodus apply ...`, `../../.venv/bin/nodus describe ...`: not nodus-build, nodus.dev.
COMMAND = re.compile(r"(?:^|[\s/(])nodus\s+([a-z][a-z-]*)(?:\s+([a-z][a-z-]*))?")


def code_of(text: str) -> list[str]:
    """The lines of every fenced block (without a console's `$ `) and every inline code span outside them."""
    lines = [line.removeprefix("$ ") for block in FENCE.findall(text) for line in block.splitlines()]
    return lines + SPAN.findall(FENCE.sub("", text))


def documented_commands() -> dict[tuple[str, ...], set[str]]:
    """(sub,) or (group, sub) -> the pages that show it."""
    found: dict[tuple[str, ...], set[str]] = {}
    for page in PAGES:
        for code in code_of(page.read_text(encoding="utf-8")):
            for match in COMMAND.finditer(code.split(" # ")[0]):
                sub, second = match.groups()
                command = cli.commands.get(sub)
                words = (sub, second) if isinstance(command, click.Group) and second else (sub,)
                found.setdefault(words, set()).add(str(page.relative_to(REPO)))
    return found


def test_the_pages_show_commands_at_all() -> None:
    found = documented_commands()
    assert ("apply",) in found and ("env", "test") in found and ("get",) in found


@pytest.mark.parametrize("words", sorted(documented_commands()), ids=" ".join)
def test_every_documented_command_exists(words: tuple[str, ...]) -> None:
    pages = ", ".join(sorted(documented_commands()[words]))
    result = CliRunner().invoke(cli, [*words, "--help"])
    assert result.exit_code == 0, f"`nodus {' '.join(words)}` is shown in {pages} but is no command"


def test_every_pinned_tiny_model_revision_is_the_one_the_recipe_builds() -> None:
    from nodus.runtimes.tiny_model import REPO as TINY
    from nodus.runtimes.tiny_model import Recipe, revision

    built = revision(Recipe(), QUICKSTART / "env" / "reverse_words.py")  # what `make quickstart` builds
    files = [*PAGES, *sorted((REPO / "examples").rglob("*.yaml"))]
    pinned = {
        (str(path.relative_to(REPO)), rev)
        for path in files
        for rev in re.findall(rf"hf://{re.escape(TINY)}@([0-9a-f]+)", path.read_text(encoding="utf-8"))
    }
    assert any(path == "README.md" for path, _ in pinned)  # the README's snippet is checked too
    assert {(path, rev) for path, rev in pinned if rev != built} == set(), f"the recipe builds {built}"


def test_the_readmes_quickstart_commands_are_makefile_targets() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    block = FENCE.search(section)
    assert block is not None
    commands = [line.split("#")[0].split() for line in block.group(1).splitlines() if line.strip()]
    assert [words[:1] for words in commands] == [["make"], ["make"]]
    targets = set(re.findall(r"^([a-z][a-z-]*):", (REPO / "Makefile").read_text(encoding="utf-8"), re.M))
    assert {words[1] for words in commands} == {"quickstart", "test"} <= targets


STORED_ONLY = re.compile(r"no controller|without a controller|stored only", re.I)


def test_a_page_says_stored_only_only_of_kinds_nothing_runs() -> None:
    """A sentence that says a kind is only stored (no controller, nothing serves it) names no kind that a
    controller runs: registering a controller makes such a line false, as the endpoints' once were."""
    from nodus.reconciler.controllers.coverage import has_controller
    from nodus.specs.registry import KINDS

    wrong = []
    for page in PAGES:
        for paragraph in re.split(r"\n\s*\n|(?<=[.:;])\s+(?=[A-Za-z*(`])", page.read_text(encoding="utf-8")):
            if not STORED_ONLY.search(paragraph):
                continue
            named = {cls.KIND for cls in KINDS if re.search(rf"\b{cls.KIND}s?\b", paragraph)}
            wrong += [f"{page.relative_to(REPO)}: {kind}" for kind in sorted(named) if has_controller(kind)]
    assert not wrong, "pages that call a controlled kind stored only: " + ", ".join(wrong)


def test_an_example_s_comment_does_not_say_a_file_of_its_folder_is_missing() -> None:
    """`train.py ... is not part of this folder` in an example whose folder holds train.py is false."""
    wrong = []
    for path in sorted((REPO / "examples").rglob("*.yaml")):
        for row in path.read_text(encoding="utf-8").splitlines():
            said = re.match(r"#\s*(\S+) .*not (?:part of|in) this folder", row.strip())
            if said and (path.parent / said.group(1)).exists():
                wrong.append(f"{path.relative_to(REPO)}: {row.strip()}")
    assert not wrong, wrong
