"""Issue 14's image-level acceptance for classic verifiers multi-turn and ToolEnv, verifiers v1 and SkyRL.

Each example (`examples/environments/verifiers-multi-turn/vf-word-guess` and `verifiers-tools/vf-capitals-tools`,
verifiers==0.3.1; `verifiers-v1/vf-multiply-taskset`, verifiers==0.4.0; `skyrl-dataset`, skyrl-gym==0.4.0) is
copied into tmp_path and built with nodus-build in process (the code path of the `nodus-build` CLI, no network
for the build's steps). Then, in the built image with `--network=none` as the grader's uid:
`nodus-env tasks --split test` lists only the held-out tasks, with no answer in any line, and `nodus-env grade`
grades gold answers Correct, wrong ones Incorrect and malformed ones InvalidOutput; the two multi-turn kinds are
graded by episode (`turns`), a tool call's result coming back with `nextRole: tool`.

A raising reward: the copy of the multi-turn, v1 and SkyRL packages also holds a test-only variant module (written
here, never part of an example) whose reward raises; it is in the same image, loaded by setting
`NODUS_ENVIRONMENT_LOADER` for one run, and grades InfrastructureFailure. ToolEnv shares the classic verifiers
adapter with the multi-turn game, so its raising reward is covered by the multi-turn variant.

skyrl-gym's `gsm8k` scores a reply without `#### n` 0.0, as it scores a wrong number; the adapter asks the
environment's own parser (`skyrl_gym.envs.gsm8k.utils.extract_solution`), which finds no answer in it, so a
malformed SkyRL reply is InvalidOutput (images/env-base/tests/test_openenv_skyrl.py shows the same in process).
"""

from __future__ import annotations

import ast
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest

from nodus.env.splits import held_out_positions
from nodus.testing.in_image import BuiltImage

pytestmark = [pytest.mark.podman, pytest.mark.slow]

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "environments"


def module_constant(path: Path, name: str) -> Any:
    """The literal NAME assigned in the module at PATH (the examples import verifiers, which the workspace lacks)."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{path.name} assigns no {name}")


def users(task: dict[str, Any]) -> list[str]:
    return [str(m["content"]) for m in task["prompt"] if m["role"] == "user"]


def verdicts(graded: list[dict[str, Any]]) -> list[tuple[str, Any, Any]]:
    return [(g["verdict"], g["reward"], g.get("done")) for g in graded]


def environment_yaml(name: str, loader: str) -> str:
    return (
        "apiVersion: nodus.dev/v1\nkind: Environment\n"
        f"metadata: {{name: {name}}}\nspec:\n  version: 0.1.0\n  package: {{path: ., loader: '{loader}'}}\n"
    )


# --- classic verifiers: a multi-turn game (MultiTurnEnv) ------------------------------------------------------

RAISING_WORD_GUESS = """
    '''Test-only: the word-guess game with one more weighted reward function, which raises.'''
    from vf_word_guess import load_environment as example


    def load_environment():
        env = example()

        def broken(completion, answer) -> float:
            raise RuntimeError("the test-only reward broke")

        env.rubric.add_reward_func(broken, weight=1.0)
        return env
"""


def test_the_multi_turn_game_holds_out_games_without_secrets_and_grades_episodes_offline_in_its_image(
    tmp_path: Path, build_example: Callable[..., dict[str, Any]]
) -> None:
    project = tmp_path / "project"
    files = {
        "environment.yaml": environment_yaml("word-guess", "vf_word_guess:load_environment"),
        "vf_word_guess_raising.py": RAISING_WORD_GUESS,
    }
    row = build_example("verifiers-multi-turn/vf-word-guess", project, files)
    words: list[str] = module_constant(EXAMPLES / "verifiers-multi-turn/vf-word-guess/vf_word_guess.py", "WORDS")
    held = sorted(held_out_positions(len(words)))
    assert row["splits"] == {"train": len(words) - len(held), "test": len(held)}
    image = BuiltImage(project, tmp_path, "env-word-guess-0.1.0")

    lines, listed = image.test_tasks()
    # One dataset only: every fifth game is held out. A line names the game, never its secret word.
    assert sorted(users(task)[-1] for task in listed) == sorted(f"Game {i + 1}: make your first guess." for i in held)
    for line, task in zip(lines, listed, strict=True):
        assert set(task) == {"taskId", "prompt", "metadata"}, line
        assert not {"answer", "info"} & set(task["metadata"]), line
        game = int(users(task)[-1].split()[1].rstrip(":"))
        assert words[game - 1] not in line, line

    first = listed[0]
    secret = words[int(users(first)[-1].split()[1].rstrip(":")) - 1]
    wrong = "zzzzz"  # no word of the game
    episodes = [
        [f"<guess>{secret}</guess>"],
        [f"<guess>{wrong}</guess>", f"<guess>{secret}</guess>"],
        [f"<guess>{wrong}</guess>"],
        [f"<guess>{wrong}</guess>"] * 6,
        ["I will not guess."],
    ]
    graded = image.grade([{"taskId": first["taskId"], "turns": turns} for turns in episodes])
    assert verdicts(graded) == [
        ("Correct", 1.0, True),  # solved at once: the @vf.stop condition ends the episode
        ("Correct", 1.0, True),  # the turns are replayed through env_response, then solved
        ("Incorrect", 0.0, False),  # the game goes on: the environment's marks are the next (user) turn
        ("Incorrect", 0.0, True),  # max_turns (6) ends the episode, graded as it stands
        ("InvalidOutput", 0.0, False),  # no guess: the parser finds nothing
    ], graded
    assert graded[2]["next"] == f"{wrong}: " + "".join("Y" if c in secret else "-" for c in wrong)
    assert "nextRole" not in graded[2], graded[2]

    (broken,) = image.grade([{"taskId": first["taskId"], "turns": episodes[0]}], loader="vf_word_guess_raising")
    assert (broken["verdict"], broken["reward"], broken["done"]) == ("InfrastructureFailure", None, True), broken
    assert "RuntimeError: the test-only reward broke" in broken["evidence"]["message"], broken


# --- classic verifiers: ToolEnv ---------------------------------------------------------------------------------


def test_the_tool_env_offers_its_tool_runs_calls_in_the_grader_and_grades_episodes_offline_in_its_image(
    tmp_path: Path, build_example: Callable[..., dict[str, Any]]
) -> None:
    project = tmp_path / "project"
    files = {"environment.yaml": environment_yaml("capitals-tools", "vf_capitals_tools:load_environment")}
    row = build_example("verifiers-tools/vf-capitals-tools", project, files)
    capitals: dict[str, str] = module_constant(
        EXAMPLES / "verifiers-tools/vf-capitals-tools/vf_capitals_tools.py", "CAPITALS"
    )
    held_out = list(capitals)[-5:]  # the example's eval_dataset: its last five countries
    assert row["splits"] == {"train": len(capitals) - 5, "test": 5}
    image = BuiltImage(project, tmp_path, "env-capitals-tools-0.1.0")

    lines, listed = image.test_tasks()
    assert sorted(users(task)[-1] for task in listed) == sorted(f"What is the capital of {c}?" for c in held_out)
    for line, task in zip(lines, listed, strict=True):
        assert set(task) == {"taskId", "prompt", "metadata"}, line
        assert set(task["metadata"]) == {"tools"}, line  # the tools offered through the chat template, no answer
        (tool,) = task["metadata"]["tools"]
        assert tool["function"]["name"] == "lookup_capital" and tool["function"]["parameters"]["required"] == [
            "country"
        ], line
        assert not any(capitals[c] in line for c in held_out), line

    task = listed[0]
    country = users(task)[-1].removeprefix("What is the capital of ").removesuffix("?")
    capital = capitals[country]
    call = json.dumps({"name": "lookup_capital", "arguments": {"country": country}})
    episodes = [
        [f"<tool_call>{call}</tool_call>"],
        [f"<tool_call>{call}</tool_call>", f"<answer>{capital}</answer>"],
        [f"<tool_call>{call}</tool_call>", "<answer>Paris</answer>"],
        ["<tool_call>{broken</tool_call>"],
    ]
    graded = image.grade([{"taskId": task["taskId"], "turns": turns} for turns in episodes])
    called, gold, wrong, malformed = graded
    # The call runs in the grader; its result is the next turn, a tool message.
    assert (called["next"], called.get("nextRole"), called["done"]) == (capital, "tool", False), called
    assert verdicts([gold, wrong, malformed]) == [
        ("Correct", 1.0, True),  # a reply without a call ends the episode and is scored
        ("Incorrect", 0.0, True),
        ("InvalidOutput", 0.0, True),  # a malformed call is no call, and the reply holds no answer
    ], graded


# --- verifiers 0.4: a verifiers.v1 Taskset ------------------------------------------------------------------------

RAISING_TASKSET = """
    '''Test-only: the multiply Taskset whose task's reward raises.'''
    import verifiers.v1 as vf
    from vf_multiply_taskset import MultiplyConfig, MultiplyTask, MultiplyTaskset

    __all__ = ["BrokenMultiplyTaskset"]


    class BrokenMultiplyTask(MultiplyTask):
        @vf.reward(weight=1.0)
        async def exact_product(self, trace: vf.Trace) -> float:
            raise RuntimeError("the test-only reward broke")


    class BrokenMultiplyTaskset(MultiplyTaskset):
        def load(self):
            return [BrokenMultiplyTask(task.data, self.config.task) for task in super().load()]
"""


def multiply_pairs(count: int = 80, seed: int = 14) -> list[tuple[int, int]]:
    """The example's pairs, made as its `load()` makes them (the module imports verifiers 0.4, not installed here)."""
    rng = random.Random(seed)
    pairs: list[tuple[int, int]] = []
    while len(pairs) < count:
        pair = (rng.randint(2, 19), rng.randint(2, 19))
        if pair not in pairs:
            pairs.append(pair)
    return pairs


def test_the_v1_taskset_holds_out_every_fifth_task_without_answers_and_grades_offline_in_its_image(
    tmp_path: Path, build_example: Callable[..., dict[str, Any]]
) -> None:
    project = tmp_path / "project"
    files = {"vf_multiply_taskset_raising.py": RAISING_TASKSET}
    row = build_example("verifiers-v1/vf-multiply-taskset", project, files)
    assert row["splits"] == {"train": 64, "test": 16}
    image = BuiltImage(project, tmp_path, "env-multiply-v1-0.1.0")

    lines, listed = image.test_tasks()
    pairs = multiply_pairs()
    held = sorted(held_out_positions(len(pairs)))
    assert sorted(users(task)[-1] for task in listed) == sorted(
        f"What is {a} * {b}?" for a, b in (pairs[i] for i in held)
    )
    for line, task in zip(lines, listed, strict=True):
        assert set(task) == {"taskId", "prompt", "metadata"}, line
        assert task["metadata"] == {"name": task["metadata"]["name"]}, line  # the data's answer stays behind
        assert [m["role"] for m in task["prompt"]] == ["system", "user"], line

    first = listed[0]
    a, b = (int(n) for n in users(first)[-1].removeprefix("What is ").removesuffix("?").split(" * "))
    replies = [str(a * b), str(a * b + 1), "   "]
    graded = image.grade([{"taskId": first["taskId"], "completion": reply} for reply in replies])
    assert [(g["verdict"], g["reward"]) for g in graded] == [
        ("Correct", 1.0),
        ("Incorrect", 0.0),
        ("InvalidOutput", 0.0),
    ]

    (broken,) = image.grade(
        [{"taskId": first["taskId"], "completion": str(a * b)}], loader="vf_multiply_taskset_raising"
    )
    assert (broken["verdict"], broken["reward"]) == ("InfrastructureFailure", None), broken
    assert "the test-only reward broke" in broken["evidence"]["message"], broken


# --- SkyRL: rows scored by the skyrl-gym environment their env_class names -----------------------------------

RAISING_SKYRL = """
    '''Test-only: the apples rows, with skyrl-gym's gsm8k replaced by an environment whose reward raises.'''
    from skyrl_gym.envs.gsm8k.env import GSM8kEnv
    from skyrl_gym.envs.registration import deregister, register

    from skyrl_apples import train_files, val_files


    class BrokenGSM8kEnv(GSM8kEnv):
        def _get_reward(self, action):
            raise RuntimeError("the test-only reward broke")


    deregister("gsm8k")
    register(id="gsm8k", entry_point=BrokenGSM8kEnv)
"""


def test_the_skyrl_dataset_lists_val_rows_without_ground_truth_and_grades_by_env_class_offline_in_its_image(
    tmp_path: Path, build_example: Callable[..., dict[str, Any]]
) -> None:
    project = tmp_path / "project"
    row = build_example("skyrl-dataset", project, {"skyrl_apples_raising.py": RAISING_SKYRL})
    assert row["splits"] == {"train": 80, "test": 20}
    image = BuiltImage(project, tmp_path, "env-apples-skyrl-1.0.0")

    lines, listed = image.test_tasks()
    rows = pq.read_table(EXAMPLES / "skyrl-dataset" / "data" / "test.parquet").to_pylist()
    assert sorted(users(task)[-1] for task in listed) == sorted(users(r)[-1] for r in rows)  # val_files only
    for line, task in zip(lines, listed, strict=True):
        assert set(task) == {"taskId", "prompt", "metadata"}, line
        assert set(task["metadata"]) <= {"data_source", "env_class", "index", "split"}, line
        assert task["metadata"]["env_class"] == "gsm8k" and task["metadata"]["split"] == "test", line
        # No field of the row's ground truth or of the rest of extra_info reaches a line.
        assert not any(f'"{key}"' in line for key in ("reward_spec", "ground_truth", "answer", "question")), line

    first = listed[0]
    (truth,) = [r["reward_spec"]["ground_truth"] for r in rows if users(r)[-1] == users(first)[-1]]
    replies = [f"Count them up.\n#### {truth}", f"#### {int(truth) + 1}", "many apples"]
    graded = image.grade([{"taskId": first["taskId"], "completion": reply} for reply in replies])
    # No `#### n` in the third: gsm8k's own parser finds no answer, so InvalidOutput (see the docstring).
    verdicts = [(g["verdict"], g["reward"]) for g in graded]
    assert verdicts == [("Correct", 1.0), ("Incorrect", 0.0), ("InvalidOutput", 0.0)]

    (broken,) = image.grade([{"taskId": first["taskId"], "completion": replies[0]}], loader="skyrl_apples_raising")
    assert (broken["verdict"], broken["reward"]) == ("InfrastructureFailure", None), broken
    assert "the test-only reward broke" in broken["evidence"]["message"], broken
