"""The OpenEnv and SkyRL adapters against the real packages (openenv-core 0.3.0, skyrl-gym 0.4.0).

The workspace does not install them (openenv-core brings gradio and a web stack), so a scratch venv is made once
per module with `uv pip install` (from uv's cache when it has them, else the package registry), and `nodus-env` runs there as a subprocess with
PYTHONPATH pointing at this checkout's `nodus.env`: the same code and commands a grader image runs.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytestmark = pytest.mark.slow

SOURCE = Path(__file__).resolve().parents[1] / "src"
GUESS_NUMBER = Path(__file__).resolve().parents[3] / "examples" / "environments" / "openenv" / "guess_number.py"
PACKAGES = ["openenv-core==0.3.0", "skyrl-gym==0.4.0", "pyarrow"]


@pytest.fixture(scope="module")
def python(tmp_path_factory: pytest.TempPathFactory) -> str:
    venv = tmp_path_factory.mktemp("ecosystem") / "venv"
    uv = shutil.which("uv", path=os.path.dirname(sys.executable)) or shutil.which("uv")
    assert uv, "uv is a dev dependency of the workspace"
    subprocess.run([uv, "venv", "-q", "-p", sys.executable, str(venv)], check=True)
    installed = subprocess.run(
        [uv, "pip", "install", "-q", "--compile-bytecode", "-p", str(venv / "bin" / "python"), *PACKAGES],
        capture_output=True,
        text=True,
    )
    assert installed.returncode == 0, f"uv could not install {PACKAGES}: {installed.stderr[-500:]}"
    return str(venv / "bin" / "python")


def nodus_env(python: str, folder: Path, loader: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(SOURCE),
        "NODUS_ENVIRONMENT_PATH": str(folder),
        "NODUS_ENVIRONMENT_LOADER": loader,
        "HF_HUB_OFFLINE": "1",
    }
    return subprocess.run(
        [python, "-m", "nodus.env.cli", *args], input=stdin, capture_output=True, text=True, env=env, timeout=120
    )


def lines(result: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    assert result.returncode == 0, result.stderr[-2000:]
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def grade(python: str, folder: Path, loader: str, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    stdin = "".join(json.dumps(r) + "\n" for r in requests)
    return lines(nodus_env(python, folder, loader, "grade", stdin=stdin))


# --- OpenEnv -------------------------------------------------------------------------------------------


@pytest.fixture
def guess_number(tmp_path: Path) -> Path:
    folder = tmp_path / "openenv"
    folder.mkdir()
    shutil.copy(GUESS_NUMBER, folder / "guess_number.py")
    return folder


def secret(seed: int) -> int:
    return random.Random(seed).randint(1, 50)


def test_openenv_seeds_are_tasks_and_the_environment_grades_each_episode(python: str, guess_number: Path) -> None:
    out = guess_number / "manifests"
    out.mkdir()
    written = nodus_env(python, guess_number, "guess_number", "manifests", "--out", str(out), "--seed", "3")
    assert written.returncode == 0, written.stderr[-2000:]
    test = [json.loads(line) for line in (out / "tasks-test-3.jsonl").read_text().splitlines()]
    train = [json.loads(line) for line in (out / "tasks-train-3.jsonl").read_text().splitlines()]
    # Every episode opens with the same rules: the seed tells tasks apart, 800-999 held out.
    assert sorted(t["metadata"]["seed"] for t in test) == list(range(800, 1000))
    assert sorted(t["metadata"]["seed"] for t in train) == list(range(800))
    assert all(set(t) == {"taskId", "prompt", "metadata"} and set(t["metadata"]) == {"seed"} for t in test)
    assert all("secret" not in json.dumps(t) for t in test)
    task, seed = test[0]["taskId"], test[0]["metadata"]["seed"]
    wrong = secret(seed) % 50 + 1
    results = grade(
        python,
        guess_number,
        "guess_number",
        [
            {"taskId": task, "completion": f"[{secret(seed)}]"},
            {"taskId": task, "completion": f"[{wrong}]"},
            {"taskId": task, "completion": "fifty"},
            {"taskId": task, "turns": [f"[{wrong}]"]},
            {"taskId": task, "turns": [f"[{wrong}]", f"[{secret(seed)}]"]},
        ],
    )
    assert [r["verdict"] for r in results] == ["Correct", "Incorrect", "InvalidOutput", "Incorrect", "Correct"]
    assert results[3]["done"] is False and results[3]["next"] in ("No, higher.", "No, lower.")
    assert results[4]["done"] is True and results[4]["next"] is None
    check = json.loads(nodus_env(python, guess_number, "guess_number", "selfcheck").stdout)
    assert check["ok"], check["checks"]


OPENENV_VARIANT = """
import random
from guess_number import GuessAction, GuessNumberEnvironment, GuessObservation, GuessState

class Variant(GuessNumberEnvironment):
    train_seeds = range(10)
    test_seeds = [100, 101, 102]
    def __init__(self):
        super().__init__()
        self.calls = 0
    def reset(self, seed=None, episode_id=None, **kwargs):
        self.calls += 1
        observation = super().reset(seed=seed)
        if MODE == "random":
            self._state.secret = random.randint(1, 10**9)  # the seed does not decide the episode
        return observation
    def step(self, action, timeout_s=None, **kwargs):
        if MODE == "explode" and "boom" in action.message:
            raise RuntimeError("the game crashed")
        return super().step(action)

def load_environment():
    return Variant()
"""


def variant(folder: Path, mode: str) -> None:
    (folder / "variant.py").write_text(f"MODE = {mode!r}\n" + textwrap.dedent(OPENENV_VARIANT))


def test_openenv_train_seeds_and_test_seeds_choose_the_splits_and_a_raising_step_is_an_infrastructure_failure(
    python: str, guess_number: Path
) -> None:
    variant(guess_number, "explode")
    test = lines(nodus_env(python, guess_number, "variant", "tasks", "--split", "test"))
    assert sorted(t["metadata"]["seed"] for t in test) == [100, 101, 102]
    (result,) = grade(python, guess_number, "variant", [{"taskId": test[0]["taskId"], "completion": "boom"}])
    assert result["verdict"] == "InfrastructureFailure" and result["reward"] is None
    assert "the game crashed" in result["evidence"]["message"]


def test_openenv_that_plays_another_episode_for_the_same_seed_is_refused(python: str, guess_number: Path) -> None:
    variant(guess_number, "random")
    result = nodus_env(python, guess_number, "variant", "tasks", "--split", "train")
    assert result.returncode == 2
    assert "does not play the same episode for the same seed: reset(seed=0)" in result.stderr, result.stderr


def test_openenv_action_without_one_text_field_is_refused(python: str, tmp_path: Path) -> None:
    (tmp_path / "two_fields.py").write_text(
        textwrap.dedent(
            """
            from openenv.core.env_server.interfaces import Environment
            from openenv.core.env_server.types import Action, Observation, State
            class Move(Action):
                text: str
                note: str
            class Board(Environment[Move, Observation, State]):
                def reset(self, seed=None, episode_id=None, **kwargs):
                    return Observation()
                def step(self, action, timeout_s=None, **kwargs):
                    return Observation(done=True, reward=0.0)
                @property
                def state(self):
                    return State()
            def load_environment():
                return Board()
            """
        )
    )
    result = nodus_env(python, tmp_path, "two_fields", "info")
    assert result.returncode == 2
    assert "action class Move has 2 text fields (text, note)" in result.stderr, result.stderr


# --- SkyRL ---------------------------------------------------------------------------------------------


def skyrl_rows(count: int, env_class: str = "gsm8k") -> list[dict[str, Any]]:
    return [
        {
            "data_source": "test/gsm8k",
            "prompt": [{"role": "user", "content": f"What is {i} * 3? End with #### n."}],
            "env_class": env_class,
            "reward_spec": {"method": "rule", "ground_truth": str(3 * i)},
            "extra_info": {"index": i, "split": "train", "answer": f"SECRET {3 * i}"},
        }
        for i in range(count)
    ]


def skyrl_package(folder: Path, rows: list[dict[str, Any]]) -> Path:
    folder.mkdir()
    pq.write_table(pa.Table.from_pylist(rows), folder / "rows.parquet")
    (folder / "skyrl_dataset.py").write_text('train_files = "rows.parquet"\n')
    return folder


def test_skyrl_rows_are_scored_by_their_env_class(python: str, tmp_path: Path) -> None:
    folder = skyrl_package(tmp_path / "skyrl", skyrl_rows(10))
    info = json.loads(nodus_env(python, folder, "skyrl_dataset", "info").stdout)
    assert info["adapter"] == "skyrl" and info["splits"] == {"train": 8, "test": 2}
    test = lines(nodus_env(python, folder, "skyrl_dataset", "tasks", "--split", "test"))
    assert sorted(t["metadata"]["index"] for t in test) == [4, 9]
    for task in test:
        assert set(task["metadata"]) <= {"data_source", "env_class", "index", "split"}
        assert "SECRET" not in json.dumps(task) and "ground_truth" not in json.dumps(task)
    row4 = next(t["taskId"] for t in test if t["metadata"]["index"] == 4)
    results = grade(
        python,
        folder,
        "skyrl_dataset",
        [
            {"taskId": row4, "completion": "4 * 3 = 12\n#### 12"},
            {"taskId": row4, "completion": "#### 13"},
            {"taskId": row4, "completion": "twelve"},
        ],
    )
    # gsm8k's reward is 0.0 for both; its own parser (skyrl_gym.envs.gsm8k.utils.extract_solution) finds no
    # `#### n` in the third, so that one is InvalidOutput.
    verdicts = [(r["verdict"], r["reward"]) for r in results]
    assert verdicts == [("Correct", 1.0), ("Incorrect", 0.0), ("InvalidOutput", 0.0)]
    check = json.loads(nodus_env(python, folder, "skyrl_dataset", "selfcheck").stdout)
    assert check["ok"], check["checks"]


def test_a_multi_turn_skyrl_environment_is_refused_with_that_reason(python: str, tmp_path: Path) -> None:
    rows = skyrl_rows(5, env_class="gsm8k_multi_turn")
    folder = skyrl_package(tmp_path / "multi", rows)
    result = nodus_env(python, folder, "skyrl_dataset", "tasks", "--split", "train")
    assert result.returncode == 2
    assert "SkyRL environment 'gsm8k_multi_turn' is multi-turn (max_turns=5)" in result.stderr, result.stderr


def test_an_unknown_env_class_names_the_registered_ones(python: str, tmp_path: Path) -> None:
    folder = skyrl_package(tmp_path / "unknown", skyrl_rows(5, env_class="no-such-env"))
    result = nodus_env(python, folder, "skyrl_dataset", "info")
    assert result.returncode == 2
    assert "env_class 'no-such-env' is not a registered SkyRL-gym environment" in result.stderr, result.stderr
