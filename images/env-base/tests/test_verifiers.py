"""The verifiers adapters against the real packages: classic verifiers 0.3.1, 0.2.1 and 0.1.14 (the
`verifiers.clients.Client` API), 0.1.3 (an AsyncOpenAI-shaped client) and 0.4.0 (`verifiers.v1`).

The two versions conflict, and neither belongs in the workspace's venv, so each gets a scratch venv (uv installs
it from the package registry pip is configured with; the cache makes this seconds after the first time) and the
environments run there in one process per case, with nodus-env from this checkout on PYTHONPATH. The classic
cases are the examples under examples/environments/verifiers-*/ plus small environments written here.
The tool-call parser has fast tests of its own that need no verifiers.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from nodus.env.adapters.verifiers_replay_openai import unsupported
from nodus.env.adapters.verifiers_tool_calls import openai_tool_schema, split_tool_calls

ROOT = Path(__file__).resolve().parents[3]
ENV_SRC = ROOT / "images" / "env-base" / "src"
EXAMPLES = ROOT / "examples" / "environments"

DRIVER = r"""
import json, sys
from nodus.env.adapters import AdapterError
from nodus.env.environment import load_environment
from nodus.env.loader import LoadError, Settings

path, loader, requests = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
try:
    env = load_environment(Settings(path=(path,), loader=loader, name="demo", version="1.0.0"))
except (AdapterError, LoadError) as exc:
    print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
    raise SystemExit(0)
info = env.info()
info.pop("packages")
out = {"info": info, "tasks": {}, "answers": {}, "grades": []}
for split in ("train", "test"):
    tasks = env.tasks(split)
    out["tasks"][split] = [t.public() for t in tasks]
    out["answers"][split] = [env.adapter_task(t).answer for t in tasks]
for request in requests:
    task = env.tasks(request.pop("split"))[request.pop("index")]
    if request.pop("gold", False):
        request["completion"] = env.adapter.gold_completions(env.adapter_task(task))[0]
    out["grades"].append(env.grade_line({"taskId": task.task_id, **request}))
print(json.dumps(out, default=repr))
"""


def _uv() -> list[str]:
    found = shutil.which("uv")
    return [found] if found else [sys.executable, "-m", "uv"]


def _venv(folder: Path, requirement: str) -> Path:
    subprocess.run([*_uv(), "venv", "--quiet", "--python", sys.executable, str(folder)], check=True)
    python = folder / "bin" / "python"
    subprocess.run([*_uv(), "pip", "install", "--quiet", "--python", str(python), requirement], check=True)
    return python


@pytest.fixture(scope="session")
def vf03(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _venv(tmp_path_factory.mktemp("vf03"), "verifiers==0.3.1")


CLIENT_VERSIONS = ["0.3.1", "0.2.1", "0.1.14"]
"""Classic verifiers whose rollout calls the model through `verifiers.clients.Client` (0.1.11 and later)."""


@pytest.fixture(scope="session", params=CLIENT_VERSIONS)
def classic(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv with one classic verifiers of the Client API; 0.3.1 is the session's `vf03`."""
    if request.param == "0.3.1":
        return Path(request.getfixturevalue("vf03"))
    return _venv(tmp_path_factory.mktemp(f"vf{request.param}"), f"verifiers=={request.param}")


@pytest.fixture(scope="session")
def vf013(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """verifiers 0.1.3: the rollout calls an AsyncOpenAI-shaped client, multi-turn is is_completed/env_response."""
    return _venv(tmp_path_factory.mktemp("vf013"), "verifiers==0.1.3")


@pytest.fixture(scope="session")
def vf04(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _venv(tmp_path_factory.mktemp("vf04"), "verifiers==0.4.0")


def drive(python: Path, folder: Path, loader: str, requests: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ENV_SRC), "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [str(python), "-c", DRIVER, str(folder), loader, json.dumps(requests or [])],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def write_module(tmp_path: Path, name: str, source: str) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / f"{name}.py").write_text(textwrap.dedent(source))
    return folder


def verdicts(out: dict[str, Any]) -> list[tuple[str, float | None]]:
    return [(g["verdict"], g["reward"]) for g in out["grades"]]


def assert_no_ground_truth(out: dict[str, Any]) -> None:
    """Task lines carry only taskId, prompt and metadata, and no answer anywhere in the metadata."""
    for split, lines in out["tasks"].items():
        for line, answer in zip(lines, out["answers"][split], strict=True):
            assert set(line) == {"taskId", "prompt", "metadata"}
            assert not {"answer", "info"} & set(line["metadata"])
            gold = answer["answer"] if isinstance(answer, dict) else None
            if gold:
                assert str(gold) not in json.dumps(line["metadata"])


# --- the tool-call parser (no verifiers needed) ----------------------------------------------------------


def test_a_tool_call_block_becomes_a_call_and_leaves_the_text() -> None:
    text, calls = split_tool_calls('Let me look. <tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>')
    assert text == "Let me look."
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("f", {"x": 1})]


def test_arguments_written_as_a_json_string_are_decoded() -> None:
    _, calls = split_tool_calls('<tool_call>{"name": "f", "arguments": "{\\"x\\": 2}"}</tool_call>')
    assert json.loads(calls[0].arguments) == {"x": 2}


@pytest.mark.parametrize(
    "body", ["{not json", '{"arguments": {}}', '["f"]', '{"name": "f", "arguments": [1]}', '{"name": 3}']
)
def test_a_malformed_block_is_no_call_and_stays_in_the_text(body: str) -> None:
    reply = f"<tool_call>{body}</tool_call>"
    assert split_tool_calls(reply) == (reply, [])


def test_an_unclosed_block_is_no_call() -> None:
    assert split_tool_calls('<tool_call>{"name": "f"}') == ('<tool_call>{"name": "f"}', [])


def test_a_reply_full_of_opening_tags_parses_in_linear_time() -> None:
    reply = "<tool_call>" * 200_000
    assert split_tool_calls(reply) == (reply, [])


def test_verifiers_tool_definitions_become_openai_function_schemas() -> None:
    schema = openai_tool_schema({"name": "f", "description": "d", "parameters": {"type": "object"}})
    assert schema == {
        "type": "function",
        "function": {"name": "f", "description": "d", "parameters": {"type": "object"}},
    }
    assert openai_tool_schema(schema) == schema


class _SyncRolloutEnv:
    def rollout(self, client: Any, model: str, prompt: Any, answer: str = "") -> Any:
        return None


class _OddRolloutEnv:
    async def rollout(self, episode: Any) -> Any:
        return None


class _InputRolloutEnv:
    async def rollout(self, input: Any, client: Any, model: str, sampling_args: Any = None) -> Any:
        return None


def test_a_rollout_nodus_cannot_replay_is_named_with_its_reason() -> None:
    assert "synchronous (verifiers 0.1.0 and 0.1.1)" in str(unsupported(_SyncRolloutEnv()))
    assert unsupported(_OddRolloutEnv()) == "its rollout takes (episode), a shape nodus does not replay"
    assert unsupported(_InputRolloutEnv()) is None


# --- classic verifiers of the Client API (0.3.1 as verifiers.legacy, 0.2.1, 0.1.14) -----------------------


@pytest.mark.slow
def test_single_turn_example_splits_grades_and_keeps_answers_in_the_grader(classic: Path) -> None:
    folder = EXAMPLES / "verifiers-single-turn" / "vf-reverse-text"
    answer_probe = drive(classic, folder, "vf_reverse_text")
    gold = answer_probe["answers"]["test"][0]["answer"]
    out = drive(
        classic,
        folder,
        "vf_reverse_text",
        [
            {"split": "test", "index": 0, "gold": True},
            {"split": "test", "index": 0, "completion": f"<answer>{gold}x</answer>"},
            {"split": "test", "index": 0, "completion": gold},  # no answer tag: the parser finds nothing
            {"split": "test", "index": 0, "completion": ""},
        ],
    )
    assert out["info"]["adapter"] == "verifiers"
    assert out["info"]["multiTurn"] is False
    # eval_dataset is the held-out split, in its order; dataset is train.
    assert out["info"]["splits"] == {"train": 64, "test": 16}
    assert [a["example_id"] for a in out["answers"]["test"]] == list(range(16))
    assert_no_ground_truth(out)
    # The rubric's weights: 0.8 exact answer + 0.2 answer tag.
    assert verdicts(out) == [
        ("Correct", 1.0),
        ("Incorrect", pytest.approx(0.2)),
        ("InvalidOutput", 0.0),
        ("InvalidOutput", 0.0),
    ]
    assert out["grades"][0]["evidence"]["answer"] == gold


ONE_DATASET = """
import verifiers as vf
from datasets import Dataset

def load_environment():
    rows = [{"question": f"What is {i} + {i}?", "answer": str(2 * i), "info": {"solution": str(2 * i), "level": 1}}
            for i in range(100)]
    parser = vf.XMLParser(["answer"], answer_field="answer")

    def correct(completion, answer, info, parser):
        found = parser.parse_answer(completion)
        if found is not None and found.strip() == "boom":
            raise ZeroDivisionError("the reward itself broke")
        return 1.0 if found is not None and found.strip() == answer == info["solution"] else 0.0

    async def state_seen(state, prompt, task):
        return 1.0 if state["answer"] and prompt else 0.0

    rubric = vf.Rubric(funcs=[correct, state_seen], weights=[0.75, 0.25], parser=parser)
    return vf.SingleTurnEnv(dataset=Dataset.from_list(rows), parser=parser, rubric=rubric)
"""


@pytest.mark.slow
def test_one_dataset_holds_out_every_fifth_task_and_a_raising_reward_is_an_infrastructure_failure(
    classic: Path, tmp_path: Path
) -> None:
    folder = write_module(tmp_path, "vf_one_dataset", ONE_DATASET)
    out = drive(
        classic,
        folder,
        "vf_one_dataset",
        [
            {"split": "test", "index": 0, "completion": "<answer>8</answer>"},
            {"split": "test", "index": 0, "completion": "<answer>9</answer>"},
            {"split": "test", "index": 0, "completion": "<answer>boom</answer>"},
        ],
    )
    assert out["info"]["splits"] == {"train": 80, "test": 20}
    assert [a["example_id"] for a in out["answers"]["test"]] == list(range(4, 100, 5))
    assert_no_ground_truth(out)
    assert all(line["metadata"] == {} for line in out["tasks"]["test"])  # info (with the solution) stays behind
    (correct, wrong, broken) = out["grades"]
    assert (correct["verdict"], correct["reward"]) == ("Correct", 1.0)  # sync and async functions, weighted
    assert (wrong["verdict"], wrong["reward"]) == ("Incorrect", 0.25)
    assert broken["verdict"] == "InfrastructureFailure"
    assert broken["reward"] is None
    assert "ZeroDivisionError: the reward itself broke" in broken["evidence"]["message"]


@pytest.mark.slow
def test_multi_turn_game_replays_turns_through_env_response_and_stops_when_solved(classic: Path) -> None:
    folder = EXAMPLES / "verifiers-multi-turn" / "vf-word-guess"
    secret = drive(classic, folder, "vf_word_guess")["answers"]["test"][0]["answer"]
    wrong = "zzzzz" if secret != "zzzzz" else "yyyyy"
    out = drive(
        classic,
        folder,
        "vf_word_guess",
        [
            {"split": "test", "index": 0, "turns": [f"<guess>{wrong}</guess>"]},
            {"split": "test", "index": 0, "turns": [f"<guess>{wrong}</guess>", f"<guess>{secret}</guess>"]},
            {"split": "test", "index": 0, "turns": ["I will not guess."]},
            {"split": "test", "index": 0, "turns": [f"<guess>{wrong}</guess>"] * 6},
        ],
    )
    assert out["info"]["multiTurn"] is True
    assert_no_ground_truth(out)
    first, solved, malformed, capped = out["grades"]
    assert first["done"] is False
    assert first["next"] == f"{wrong}: " + "".join("Y" if c in secret else "-" for c in wrong)
    assert "nextRole" not in first  # the environment's feedback is the user's turn
    assert (solved["verdict"], solved["reward"], solved["done"], solved["next"]) == ("Correct", 1.0, True, None)
    assert (malformed["verdict"], malformed["done"]) == ("InvalidOutput", False)
    assert malformed["next"] == "A guess is five letters inside <guess></guess>."
    # max_turns (6) ends the episode: graded as it stands.
    assert (capped["verdict"], capped["reward"], capped["done"]) == ("Incorrect", 0.0, True)


def check_capitals_tool_env(venv: Path, *, gold: bool) -> None:
    """The capitals ToolEnv example in `venv`'s verifiers: its tool offered in task metadata (no answer there), a
    call answered by the tool as a `tool` turn, a reply without a call ending the episode, a malformed call no
    call; and its gold episode Correct when `gold`."""
    folder = EXAMPLES / "verifiers-tools" / "vf-capitals-tools"
    call = '<tool_call>{"name": "lookup_capital", "arguments": {"country": "Mali"}}</tool_call>'
    probe = drive(venv, folder, "vf_capitals_tools")
    index = next(i for i, line in enumerate(probe["tasks"]["test"]) if "Mali" in json.dumps(line["prompt"]))
    requests = [
        {"split": "test", "index": index, "turns": [call]},
        {"split": "test", "index": index, "turns": [call, "<answer>Bamako</answer>"]},
        {"split": "test", "index": index, "turns": ["<answer>Paris</answer>"]},
        {"split": "test", "index": index, "turns": ["<tool_call>{broken</tool_call>"]},
    ]
    out = drive(
        venv,
        folder,
        "vf_capitals_tools",
        [*requests, *([{"split": "test", "index": index, "gold": True}] if gold else [])],
    )
    assert out["info"]["splits"] == {"train": 20, "test": 5}
    assert_no_ground_truth(out)
    (tool,) = out["tasks"]["test"][index]["metadata"]["tools"]
    assert (tool["type"], tool["function"]["name"]) == ("function", "lookup_capital")
    assert tool["function"]["parameters"]["required"] == ["country"]
    called, answered, wrong, broken, *rest = out["grades"]
    assert (called["next"], called["nextRole"], called["done"]) == ("Bamako", "tool", False)
    assert (answered["verdict"], answered["done"], answered["next"]) == ("Correct", True, None)
    assert (wrong["verdict"], wrong["done"]) == ("Incorrect", True)
    assert (broken["verdict"], broken["done"]) == ("InvalidOutput", True)  # a malformed call is no call
    assert [line["verdict"] for line in rest] == (["Correct"] if gold else [])


@pytest.mark.slow
def test_tool_env_offers_its_tools_runs_the_call_and_ends_on_a_reply_without_one(classic: Path) -> None:
    check_capitals_tool_env(classic, gold=True)


JUDGED = """
import verifiers as vf
from datasets import Dataset
from openai import AsyncOpenAI

def load_environment():
    judge = vf.JudgeRubric(judge_client=AsyncOpenAI(api_key="unused", base_url="http://127.0.0.1:9/v1"))
    return vf.SingleTurnEnv(dataset=Dataset.from_list([{"question": "q", "answer": "a"}]), rubric=judge)
"""

SANDBOXED = """
import verifiers as vf

def load_environment():
    env = object.__new__(vf.SandboxEnv)  # the real class; building one would reach for a remote sandbox
    env.rubric = vf.Rubric()
    return env
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("source", "reason"),
    [
        (JUDGED, "it is scored by another model (a JudgeRubric)"),
        (SANDBOXED, "its tools run in a remote sandbox"),
    ],
)
def test_environments_that_need_what_grading_has_not_are_refused_with_the_reason(
    classic: Path, tmp_path: Path, source: str, reason: str
) -> None:
    folder = write_module(tmp_path, "vf_refused", source)
    out = drive(classic, folder, "vf_refused")
    assert out["error"].startswith("AdapterError: verifiers environment")
    assert reason in out["error"]


# --- classic verifiers 0.1.3: an AsyncOpenAI-shaped client, is_completed/env_response returning (messages, state)

OLD_GAME = """
import verifiers as vf
from datasets import Dataset

WORDS = ["apple", "brave", "crane", "drink", "eagle", "flame", "grape", "house", "ivory", "joker"] * 2


def marks(guess, secret):
    return "".join("G" if g == s else ("Y" if g in secret else "-") for g, s in zip(guess, secret))


class OldWordGuess(vf.MultiTurnEnv):
    async def is_completed(self, messages, state, **kwargs):
        if not messages or messages[-1]["role"] != "assistant":
            return False
        return (self.parser.parse_answer([messages[-1]]) or "").strip().lower() == state["answer"]

    async def env_response(self, messages, state, **kwargs):
        guess = (self.parser.parse_answer(messages) or "").strip().lower()
        if len(guess) != 5 or not guess.isalpha():
            return [{"role": "user", "content": "A guess is five letters inside <guess></guess>."}], state
        return [{"role": "user", "content": f"{guess}: {marks(guess, state['answer'])}"}], state


def load_environment():
    parser = vf.XMLParser(["guess"], answer_field="guess")

    def solved(completion, answer, parser):
        return 1.0 if (parser.parse_answer(completion) or "").strip().lower() == answer else 0.0

    rows = [{"question": f"Game {i}: guess.", "answer": w} for i, w in enumerate(WORDS)]
    return OldWordGuess(dataset=Dataset.from_list(rows), system_prompt="Guess the word.", parser=parser,
                        rubric=vf.Rubric(funcs=[solved], parser=parser), max_turns=4)
"""


@pytest.mark.slow
def test_verifiers_0_1_3_single_turn_holds_out_every_fifth_and_scores_with_its_rubric(
    vf013: Path, tmp_path: Path
) -> None:
    folder = write_module(tmp_path, "vf_one_dataset", ONE_DATASET)
    out = drive(
        vf013,
        folder,
        "vf_one_dataset",
        [
            {"split": "test", "index": 0, "completion": "<answer>8</answer>"},
            {"split": "test", "index": 0, "completion": "<answer>9</answer>"},
            {"split": "test", "index": 0, "completion": "<answer>boom</answer>"},
        ],
    )
    assert out["info"]["multiTurn"] is False  # a SingleTurnEnv, though 0.1.3 gives it max_turns=10
    assert out["info"]["splits"] == {"train": 80, "test": 20}
    assert [int(a["answer"]) // 2 for a in out["answers"]["test"]] == list(range(4, 100, 5))
    assert_no_ground_truth(out)
    assert all(line["metadata"] == {} for line in out["tasks"]["test"])
    correct, wrong, broken = out["grades"]
    assert (correct["verdict"], correct["reward"]) == ("Correct", 1.0)  # sync and async functions, weighted
    assert (wrong["verdict"], wrong["reward"]) == ("Incorrect", 0.25)
    assert (broken["verdict"], broken["reward"]) == ("InfrastructureFailure", None)
    assert "ZeroDivisionError: the reward itself broke" in broken["evidence"]["message"]


@pytest.mark.slow
def test_verifiers_0_1_3_multi_turn_game_replays_turn_by_turn_until_solved_or_max_turns(
    vf013: Path, tmp_path: Path
) -> None:
    folder = write_module(tmp_path, "vf_old_game", OLD_GAME)
    secret = drive(vf013, folder, "vf_old_game")["answers"]["test"][0]["answer"]
    wrong = "zzzzz"
    out = drive(
        vf013,
        folder,
        "vf_old_game",
        [
            {"split": "test", "index": 0, "turns": [f"<guess>{wrong}</guess>"]},
            {"split": "test", "index": 0, "turns": [f"<guess>{wrong}</guess>", f"<guess>{secret}</guess>"]},
            {"split": "test", "index": 0, "turns": ["I will not guess."]},
            {"split": "test", "index": 0, "turns": [f"<guess>{wrong}</guess>"] * 4},
        ],
    )
    assert out["info"]["multiTurn"] is True
    assert out["info"]["splits"] == {"train": 4, "test": 16}  # every fifth, and at least 16
    assert_no_ground_truth(out)
    first, solved, malformed, capped = out["grades"]
    assert (first["verdict"], first["done"], first["next"]) == ("Incorrect", False, f"{wrong}: -----")
    assert "nextRole" not in first
    assert (solved["verdict"], solved["reward"], solved["done"], solved["next"]) == ("Correct", 1.0, True, None)
    assert (malformed["verdict"], malformed["done"]) == ("InvalidOutput", False)
    assert malformed["next"] == "A guess is five letters inside <guess></guess>."
    assert (capped["verdict"], capped["reward"], capped["done"]) == ("Incorrect", 0.0, True)  # max_turns (4)


@pytest.mark.slow
def test_verifiers_0_1_3_tool_env_gets_openai_tool_calls_and_returns_the_result_as_a_tool_turn(vf013: Path) -> None:
    check_capitals_tool_env(vf013, gold=False)


# --- verifiers 0.4.0, verifiers.v1 -------------------------------------------------------------------------

TASKSET = """
import verifiers.v1 as vf

__all__ = ["SumTaskset"]


class SumData(vf.TaskData):
    answer: str = ""


class SumTask(vf.Task[SumData]):
    @vf.reward(weight=0.5)
    async def exact(self, trace: vf.Trace) -> float:
        if trace.last_reply == "boom":
            raise RuntimeError("reward exploded")
        return float(trace.last_reply == self.data.answer)

    @vf.reward(weight=0.5)
    async def numeric(self, trace: vf.Trace) -> float:
        return float(trace.last_reply.isdigit())


class SumConfig(vf.TasksetConfig):
    count: int = 50


class SumTaskset(vf.Taskset[SumTask, SumConfig]):
    def load(self):
        return [SumTask(SumData(prompt=f"{i} + 3 = ?", system_prompt="Reply with a number.", answer=str(i + 3),
                                name=f"sum-{i}"), self.config.task) for i in range(self.config.count)]
"""

TOOLSET = TASKSET.replace(
    "    def load(self):",
    "    @classmethod\n    def toolsets(cls, config):\n        return [object()]\n\n    def load(self):",
)


@pytest.mark.slow
def test_v1_taskset_scores_with_task_score_and_holds_out_every_fifth_task(vf04: Path, tmp_path: Path) -> None:
    folder = write_module(tmp_path, "vf_sum_taskset", TASKSET)
    out = drive(
        vf04,
        folder,
        "vf_sum_taskset",
        [
            {"split": "test", "index": 0, "gold": True},
            {"split": "test", "index": 0, "completion": "99"},
            {"split": "test", "index": 0, "completion": "   "},
            {"split": "test", "index": 0, "completion": "boom"},
        ],
    )
    assert out["info"]["adapter"] == "verifiers-v1"
    assert out["info"]["splits"] == {"train": 34, "test": 16}  # every fifth, and at least 16
    line = out["tasks"]["test"][0]
    assert line["prompt"] == [
        {"role": "system", "content": "Reply with a number."},
        {"role": "user", "content": "3 + 3 = ?"},
    ]
    assert line["metadata"] == {"name": "sum-3"}  # the data's answer stays in the grader
    assert verdicts(out)[:3] == [("Correct", 1.0), ("Incorrect", 0.5), ("InvalidOutput", 0.0)]
    broken = out["grades"][3]
    assert broken["verdict"] == "InfrastructureFailure"
    assert "reward exploded" in broken["evidence"]["message"]


@pytest.mark.slow
def test_v1_taskset_with_tools_served_by_an_mcp_server_is_refused(vf04: Path, tmp_path: Path) -> None:
    folder = write_module(tmp_path, "vf_tool_taskset", TOOLSET)
    out = drive(vf04, folder, "vf_tool_taskset")
    assert out["error"] == (
        "AdapterError: verifiers Taskset SumTaskset cannot be graded here: its tools run in an MCP server (a Toolset)"
    )
