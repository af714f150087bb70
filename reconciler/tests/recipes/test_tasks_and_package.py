"""Task lists (`nodus.recipes.tasks`), the package `rl.train` writes (`nodus.recipes.environment`) and the check
on this machine before anything is built (`nodus.recipes.precheck`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from nodus.builder.store import Store
from nodus.errors import ConfigError
from nodus.recipes.environment import LOADER, package
from nodus.recipes.precheck import precheck
from nodus.recipes.tasks import normalise, split
from nodus.specs.parse import parse_resources

Load = Callable[[str], ModuleType]

REWARD = """
import re

ANSWER = re.compile(r"<answer>\\s*([A-Za-z]+)\\s*</answer>")


def reward(completion, answer):
    found = ANSWER.findall(completion)
    return None if not found else float(found[-1].lower() == answer)
"""


def words(count: int) -> list[tuple[str, str]]:
    return [(f"Spell backwards: w{index}x", f"x{index}w") for index in range(count)]


# --- tasks ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("count", "held"), [(100, 20), (30, 16), (17, 16), (2, 1), (200, 40)])
def test_a_fifth_and_at_least_16_are_held_out(count: int, held: int) -> None:
    chosen = split(words(count))
    assert len(chosen.test) == held and len(chosen.train) == count - held


def test_a_test_prompt_never_appears_in_train() -> None:
    tasks = [*words(40), *words(40)]  # every prompt twice
    chosen = split(tasks)
    assert len(chosen.train) + len(chosen.test) == 40
    assert not {t["prompt"] for t in chosen.train} & {t["prompt"] for t in chosen.test}
    given = split(words(40), test_tasks=words(5))
    assert [t["prompt"] for t in given.test] == [p for p, _ in words(5)]
    assert len(given.train) == 35 and not {t["prompt"] for t in given.train} & {p for p, _ in words(5)}


def test_tasks_are_pairs_or_dicts_and_answers_go_as_json() -> None:
    tasks = normalise(
        [("a", ("x", 1)), {"prompt": [{"role": "user", "content": "b"}], "answer": 2, "metadata": {"k": 1}}]
    )
    assert tasks[0] == {"prompt": "a", "answer": ["x", 1], "metadata": {}}
    assert tasks[1]["metadata"] == {"k": 1}
    for bad, message in [
        ([("only one",)], r"tasks\[0\]: a task is a \(prompt, answer\) pair"),
        ([{"prompt": "p"}], r"tasks\[0\]: a task dict has 'prompt', 'answer'"),
        ([("p", "a"), (3, "a")], r"tasks\[1\]: the prompt must be a string"),
        ([("p", {1, 2})], r"tasks\[0\]: the answer cannot be stored as JSON"),
        ([("p", float("nan"))], r"tasks\[0\]: the answer cannot be stored as JSON \(a float that is not finite\)"),
        ("not a list", "must be a list"),
    ]:
        with pytest.raises(ConfigError, match=message):
            normalise(bad)


def test_too_few_tasks_or_nothing_left_to_train_on_is_refused() -> None:
    with pytest.raises(ConfigError, match="at least 2 different prompts"):
        split([("same", "a"), ("same", "b")])
    with pytest.raises(ConfigError, match="no task is left to train on"):
        split(words(3), test_tasks=words(3))
    with pytest.raises(ConfigError, match="test_tasks is empty"):
        split(words(3), test_tasks=[])


# --- the package ----------------------------------------------------------------------------------------


def test_the_package_is_one_module_its_tasks_and_an_environment_that_validates(
    reward_file: Load, tmp_path: Path
) -> None:
    module = reward_file(REWARD)
    packaged = package(words(50), module.reward, store=Store(tmp_path / "state"), project="default")
    assert sorted(p.name for p in packaged.folder.iterdir()) == [
        "environment.yaml",
        "nodus_rl_env.py",
        "pyproject.toml",
        "tasks.json",
    ]
    assert packaged.folder.parent == tmp_path / "state" / "bundles"
    result = parse_resources([packaged.spec_file])
    assert result.ok, result.errors
    environment = result.resources[0].resource
    assert environment.metadata.name == packaged.name and packaged.name.startswith("reward-")
    assert environment.spec.version == "1.0.0" and environment.spec.package.path == "."
    assert environment.spec.package.loader == LOADER
    lists = json.loads((packaged.folder / "tasks.json").read_text())
    assert len(lists["train"]) == 34 and len(lists["test"]) == 16
    assert packaged.reference == f"{packaged.name}@1.0.0"


def test_same_code_and_tasks_give_the_same_environment_and_a_change_another(reward_file: Load, tmp_path: Path) -> None:
    module = reward_file(REWARD)
    first = package(words(50), module.reward, store=Store(tmp_path / "one"), project="default")
    again = package(words(50), module.reward, store=Store(tmp_path / "two"), project="default")
    assert first.name == again.name and first.folder.name == again.folder.name
    assert (first.folder / "nodus_rl_env.py").read_bytes() == (again.folder / "nodus_rl_env.py").read_bytes()
    changed_tasks = package(words(51), module.reward, store=Store(tmp_path / "three"), project="default")
    other_project = package(words(50), module.reward, store=Store(tmp_path / "four"), project="team")
    with_pip = package(words(50), module.reward, store=Store(tmp_path / "five"), project="default", pip=["rich"])
    assert len({first.name, changed_tasks.name, other_project.name, with_pip.name}) == 4
    assert '"rich"' in (with_pip.folder / "pyproject.toml").read_text()


def test_nothing_is_written_when_the_reward_cannot_go(reward_file: Load, tmp_path: Path) -> None:
    module = reward_file("def reward(completion, answer):\n    return float(completion == answer) * WEIGHT\n")
    with pytest.raises(ConfigError, match="WEIGHT"):
        package(words(50), module.reward, store=Store(tmp_path / "state"), project="default")
    assert not (tmp_path / "state").exists()


# --- the check before anything is built ---------------------------------------------------------------


def test_a_reward_that_returns_none_or_a_number_passes(reward_file: Load, tmp_path: Path) -> None:
    module = reward_file(REWARD)
    precheck(package(words(50), module.reward, store=Store(tmp_path / "state"), project="default"))


def test_a_reward_that_raises_fails_naming_the_line_of_its_file(reward_file: Load, tmp_path: Path) -> None:
    module = reward_file(
        """
        import re

        ANSWER = re.compile(r"<answer>(.*?)</answer>")


        def reward(completion, answer):
            return float(ANSWER.findall(completion)[-1] == answer)
        """
    )
    packaged = package(words(50), module.reward, store=Store(tmp_path / "state"), project="default")
    with pytest.raises(ConfigError) as failed:
        precheck(packaged)
    message = failed.value.message
    assert message.startswith(f"{packaged.extracted.file}:7: reward(") and "raised IndexError" in message
    assert "\n" not in message and failed.value.hint is not None and "return None or 0" in failed.value.hint


@pytest.mark.parametrize(
    ("returned", "shown"), [('"1.0"', "str '1.0'"), ("[1.0]", "list [1.0]"), ('float("nan")', "not a finite number")]
)
def test_a_reward_that_returns_something_else_fails(
    reward_file: Load, tmp_path: Path, returned: str, shown: str
) -> None:
    module = reward_file(f"def reward(completion, answer):\n    return {returned}\n")
    packaged = package(words(50), module.reward, store=Store(tmp_path / "state"), project="default")
    with pytest.raises(ConfigError) as failed:
        precheck(packaged)
    assert failed.value.message.startswith(f"{packaged.extracted.file}:1: reward(")
    assert shown in failed.value.message


def test_a_packaging_mistake_shows_in_the_check(reward_file: Load, tmp_path: Path) -> None:
    # The settings file beside the script is not packaged: the packaged module fails where the original worked.
    (tmp_path / "rewards").mkdir(exist_ok=True)
    (tmp_path / "rewards" / "settings.json").write_text('{"scale": 1.0}')
    module = reward_file(
        """
        import json
        import pathlib

        SETTINGS = json.loads(pathlib.Path(__file__).with_name("settings.json").read_text())


        def reward(completion, answer):
            return float(completion == answer) * SETTINGS["scale"]
        """
    )
    assert module.reward("a", "a") == 1.0
    packaged = package(words(50), module.reward, store=Store(tmp_path / "state"), project="default")
    with pytest.raises(ConfigError) as failed:
        precheck(packaged)
    assert failed.value.message.startswith(f"{packaged.extracted.file}:4: the packaged reward does not import")
    assert "FileNotFoundError" in failed.value.message
