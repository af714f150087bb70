"""Issue 14's image-level acceptance for the classic verifiers adapter: a verifiers package served from a simple
index on 127.0.0.1 builds with nodus-build, and its image grades with no network.

The package is the example `examples/environments/verifiers-single-turn/vf-reverse-text` (verifiers==0.3.1),
made into a wheel by hand (`nodus.testing.simple_index`) with the dependencies its pyproject.toml declares,
and served from a PEP 503 index that `package.pip.index` names; verifiers and datasets come from the package registry at build time. In the image,
with `--network=none`, `nodus-env tasks --split test` lists the held-out words only, with no answer in any line,
and `nodus-env grade` grades the gold answer Correct, a wrong one Incorrect and a reply without the tag
InvalidOutput. The in-process tests of the adapter are in images/env-base/tests/test_verifiers.py.
"""

from __future__ import annotations

import json
import random
import shutil
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodus.testing import simple_index
from nodus.testing.in_image import run_in_image

pytestmark = [pytest.mark.podman, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "environments" / "verifiers-single-turn" / "vf-reverse-text"


@pytest.fixture
def served_example(tmp_path: Path) -> Iterator[tuple[str, str, str]]:
    """(distribution, version, index URL): the example as a wheel on a PEP 503 index on 127.0.0.1."""
    index_helpers = simple_index
    pyproject = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())
    project = pyproject["project"]
    source = tmp_path / "src"
    source.mkdir()
    for module in pyproject["tool"]["hatch"]["build"]["targets"]["wheel"]["only-include"]:
        shutil.copy(EXAMPLE / module, source / module)  # what hatchling would put in the wheel
    wheel = index_helpers.wheel_from_folder(
        source,
        tmp_path / "wheels",
        name=project["name"],
        version=project["version"],
        dependencies=project["dependencies"],
    )
    root = index_helpers.write_index(tmp_path / "index", [wheel])
    with index_helpers.serve_index(root) as url:
        yield project["name"], project["version"], url


def held_out_words() -> list[str]:
    """The example's `_words(80, seed=14)[64:]` (its eval_dataset), computed as the example does: the module
    itself imports verifiers, which the workspace does not install."""
    rng = random.Random(14)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = ["".join(rng.choice(letters) for _ in range(rng.randint(4, 8))) for _ in range(80)]
    return words[64:]


def in_image(layout: Path, tag: str, command: str, stdin: str = "") -> str:
    result = run_in_image(layout, tag, "/bin/sh", "-c", command, stdin=stdin)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def user_word(task: dict[str, Any]) -> str:
    """The word of a task line's prompt: its last user message is `Word: <word>`."""
    messages = task["prompt"]
    assert isinstance(messages, list), task
    users = [m["content"] for m in messages if m["role"] == "user"]
    return str(users[-1]).removeprefix("Word: ")


def test_a_verifiers_package_from_a_simple_index_builds_and_its_image_grades_offline(
    tmp_path: Path,
    base_reference: str,
    capsys: pytest.CaptureFixture[str],
    served_example: tuple[str, str, str],
) -> None:
    from nodus.builder.cli import main as nodus_build
    from nodus.builder.store import Store

    name, version, index = served_example
    spec = tmp_path / "environment.yaml"
    spec.write_text(
        f"apiVersion: nodus.dev/v1\nkind: Environment\nmetadata: {{name: {name}}}\nspec:\n  version: {version}\n"
        f"  package:\n    pip: {{name: {name}, version: {version}, index: '{index}'}}\n"
    )
    args = [str(spec), "--network", "none", "--base", base_reference, "--lock", str(tmp_path / "nodus.lock")]
    with pytest.raises(SystemExit) as exited:
        nodus_build([*args, "--state-dir", str(tmp_path / ".nodus"), "--json"])
    output = json.loads(capsys.readouterr().out)
    row = output["results"][0]
    assert int(exited.value.code or 0) == 0 and row["status"] == "built", output
    assert row["splits"] == {"train": 64, "test": 16}

    layout = tmp_path / "layout"  # podman wants a plain lower-case name for an `oci:` layout
    layout.symlink_to(Store(tmp_path / ".nodus").images, target_is_directory=True)
    tag = f"env-{name}-{version}"
    listed = [json.loads(line) for line in in_image(layout, tag, "nodus-env tasks --split test --seed 0").splitlines()]
    words = held_out_words()
    assert sorted(user_word(task) for task in listed) == sorted(words)
    for task in listed:
        assert set(task) == {"taskId", "prompt", "metadata"}, task
        reversed_word = user_word(task)[::-1]
        # Neither the `answer` column nor `info` (which repeats it) reaches a line, in any field.
        assert not {"answer", "info"} & set(task["metadata"]), task
        assert reversed_word not in json.dumps(task["metadata"]), task
        assert all(reversed_word not in str(message["content"]) for message in task["prompt"]), task

    first = listed[0]
    word = user_word(first)
    replies = [f"<answer>{word[::-1]}</answer>", "<answer>wrong</answer>", "no tags at all"]
    lines = "".join(json.dumps({"taskId": first["taskId"], "completion": reply}) + "\n" for reply in replies)
    graded = [json.loads(line) for line in in_image(layout, tag, "nodus-env grade", stdin=lines).splitlines()]
    assert [line["verdict"] for line in graded] == ["Correct", "Incorrect", "InvalidOutput"], graded
