"""Shared fixtures of the catalog tests: loading an environment through its loader, the checks every
environment must pass (splits, determinism, fixture cases, junk input), and one pair of subprocess runs
that print every environment's tasks, so that the slow imports (reasoning_gym, datasets) happen twice,
not twice per file. The pair starts as soon as collection ends and the tests that compare with it run
last, so the two processes work while this one runs the other tests.

Who uses it: every `catalog/tests/test_<environment>.py` (test_letter_counting_legacy.py covers both
letter-counting-legacy profiles) and test_catalog_metadata.py. pytest runs with `--import-mode=importlib`, so
the helpers reach the tests as fixtures (`catalog`, `checks`, `task_dumps`), never by import.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from nodus.env.contract import classify

CATALOG = Path(__file__).resolve().parents[1]


class Source(NamedTuple):
    """Where an environment's code is: the catalog folder of its package (what `package.path` in its
    environment.yaml names) and its loader in nodus-env's form, `module` (the module's load_environment,
    which returns the module itself) or `module:function` (a package that serves several environments)."""

    package: str
    loader: str

    @property
    def module(self) -> str:
        return self.loader.partition(":")[0]

    @property
    def function(self) -> str:
        return self.loader.partition(":")[2] or "load_environment"


# environment folder -> its source (test_catalog_metadata checks that each environment.yaml agrees). The
# loader is also the key of the environment's task lists in `task_dumps`.
ENVIRONMENTS = {
    "graph-coloring": Source("graph-coloring", "graph_coloring_env"),
    "arithmetic": Source("arithmetic", "arithmetic_env"),
    "gsm8k": Source("gsm8k", "gsm8k_env"),
    "reasoning-gym": Source("reasoning-gym", "reasoning_gym_env"),
    "python-functions": Source("python-functions", "python_functions_env"),
    "letter-counting-legacy-eval": Source("letter-counting-legacy", "letter_counting_legacy_env:load_eval"),
    "letter-counting-legacy-rl": Source("letter-counting-legacy", "letter_counting_legacy_env:load_rl"),
    "tool-calculator": Source("tool-calculator", "tool_calculator_env"),
    "higher-lower": Source("higher-lower", "higher_lower_env"),
}

GSM8K_SAMPLE = json.dumps(
    {"train": str(CATALOG / "gsm8k" / "data" / "train.jsonl"), "test": str(CATALOG / "gsm8k" / "data" / "test.jsonl")}
)

# Replies no reward may raise on: empty, blank, broken tags, huge numbers, control characters, a lone
# surrogate, thousands of opening tags (quadratic for a naive regex), code fences without code.
GARBAGE = [
    "",
    " ",
    "\n\n",
    "<answer>",
    "</answer>",
    "<answer></answer>",
    "</answer><answer>",
    "<answer>\x00</answer>",
    "<answer>\udcff</answer>",
    "<ANSWER>1</ANSWER>",
    "<answer>-</answer>",
    "<answer>.</answer>",
    "<answer>1e309</answer>",
    "<answer>nan</answer>",
    "<answer>-inf</answer>",
    "<answer>٣</answer>",
    "<answer>[1, [2]]</answer>",
    '<answer>{"a": 1}</answer>',
    "<answer>" + "9" * 5000 + "</answer>",
    "9" * 5000,
    "<answer>" * 20000,
    "x" * 200_000,
    "```python",
    "```python\n",
    "```\n```",
    "None",
    "True",
]

# The catalog's own dependency pins: every environment imported in the same interpreter. Arguments: JSON
# [[package folder, loader, module, function], ...].
DUMP_SCRIPT = """
import importlib, json, sys
for folder, loader, module, function in json.loads(sys.argv[1]):
    sys.path.insert(0, folder)
    env = getattr(importlib.import_module(module), function)()
    tasks = {split: env.tasks(split) for split in ("train", "test")}
    print(loader, json.dumps(tasks, sort_keys=True, ensure_ascii=False), sep="\\t")
"""


class Catalog:
    """Imports catalog environment modules from their package folders, once per test session."""

    def __init__(self) -> None:
        self.added: list[str] = []

    @staticmethod
    def source(folder: str) -> Source:
        """Where the environment of `folder` has its code (test_catalog_metadata compares it with the yaml)."""
        return ENVIRONMENTS[folder]

    def load(self, folder: str) -> Any:
        """The environment of `folder` as nodus-env gets it: its loader's return value (the module itself for
        a load_environment loader, a profile object for a shared package's loader)."""
        source = self.source(folder)
        path = str(CATALOG / source.package)
        if path not in sys.path:
            sys.path.insert(0, path)
            self.added.append(path)
        module = importlib.import_module(source.module)
        loaded = getattr(module, source.function)()
        if source.function == "load_environment":
            assert loaded is module, "a catalog module's load_environment returns the module"
        return loaded

    def cleanup(self) -> None:
        for path in self.added:
            if path in sys.path:
                sys.path.remove(path)


class Checks:
    """The checks every catalog environment must pass, given the environment `catalog.load` returns (a
    module, or an object with the same attributes) and its folder."""

    @staticmethod
    def fixture_cases(folder: str) -> list[dict[str, Any]]:
        lines = (CATALOG / folder / "fixtures.jsonl").read_text().splitlines()
        return [json.loads(line) for line in lines if line.strip()]

    @staticmethod
    def verdict(env: Any, completion: str, answer: Any) -> tuple[str, float | None]:
        outcome = classify(env.reward(completion, answer))
        return outcome.verdict, outcome.reward

    @staticmethod
    def check_shapes(env: Any, sizes: dict[str, int]) -> None:
        """Split sizes, task shape, JSON-serialisable answers and metadata, splits without a shared prompt."""
        prompts: dict[str, set[str]] = {}
        for split, size in sizes.items():
            tasks = env.tasks(split)
            assert len(tasks) == size, f"{split}: {len(tasks)} tasks, expected {size}"
            for task in tasks:
                assert set(task) == {"prompt", "answer", "metadata"}
                prompt = task["prompt"]
                assert isinstance(prompt, str) or all(set(m) == {"role", "content"} for m in prompt)
                json.dumps(task["answer"])
                json.dumps(task["metadata"])
            keys = [p if isinstance(p, str) else json.dumps(p) for p in (t["prompt"] for t in tasks)]
            assert len(set(keys)) == len(keys), f"{split} repeats a prompt"
            prompts[split] = set(keys)
        assert not prompts["train"] & prompts["test"], "train and test share a prompt"

    @staticmethod
    def check_repeatable(env: Any) -> None:
        """Two calls give equal lists, and editing a returned task, down to its innermost answer list or
        dict, does not change what the next call returns."""
        for split in ("train", "test"):
            first = env.tasks(split)
            assert first == env.tasks(split)
            before = json.dumps(first[0], sort_keys=True)
            first[0]["metadata"]["edited"] = True
            _edit_innermost(first[0]["answer"])
            assert json.dumps(env.tasks(split)[0], sort_keys=True) == before

    @staticmethod
    def check_fixtures(env: Any, folder: str) -> None:
        cases = Checks.fixture_cases(folder)
        kinds = {case["case"] for case in cases}
        assert kinds == {"full-reward", "zero-reward", "malformed"}, kinds
        expected_verdicts = {"full-reward": "Correct", "zero-reward": "Incorrect", "malformed": "InvalidOutput"}
        for case in cases:
            assert case["verdict"] == expected_verdicts[case["case"]], case
            answer = env.tasks(case["split"])[case["index"]]["answer"]
            verdict, reward = Checks.verdict(env, case["completion"], answer)
            assert (verdict, reward) == (case["verdict"], case["reward"]), (case, verdict, reward)

    @staticmethod
    def check_junk(env: Any, answer: Any) -> None:
        """An empty reply is not Correct, and no junk reply raises or gives an InfrastructureFailure."""
        empty = env.reward("", answer)
        assert empty is None or empty < 1
        for completion in GARBAGE:
            verdict, _ = Checks.verdict(env, completion, answer)
            assert verdict in ("Incorrect", "InvalidOutput"), (completion[:40], verdict)

    @staticmethod
    def check_gold(env: Any, completions: list[tuple[str, Any]]) -> None:
        for completion, answer in completions:
            assert env.reward(completion, answer) == 1.0, completion[:200]


def _edit_innermost(value: Any) -> None:
    """Change the deepest list or dict inside `value` (a task's answer), in place."""
    children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else []
    for child in children:
        if isinstance(child, dict | list):
            _edit_innermost(child)
            return
    if isinstance(value, dict):
        value["edited"] = True
    elif isinstance(value, list):
        value.append("edited")


@pytest.fixture(scope="session")
def catalog() -> Iterator[Catalog]:
    loader = Catalog()
    yield loader
    loader.cleanup()


@pytest.fixture(scope="session")
def checks() -> type[Checks]:
    return Checks


@pytest.fixture(scope="session")
def gsm8k_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A datasets cache of the test session's own, so loading the sample data leaves no trace in $HOME."""
    return tmp_path_factory.mktemp("hf-datasets")


def _start_dumps(workdir: Path) -> list[tuple[subprocess.Popen[bytes], Path, Path]]:
    """Two fresh interpreters with different hash seeds, each printing every environment's tasks into a
    file of `workdir` (a file, not a pipe, so that they finish without anyone reading)."""
    folders = json.dumps([[str(CATALOG / s.package), s.loader, s.module, s.function] for s in ENVIRONMENTS.values()])
    processes = []
    for hash_seed in ("1", "2"):
        env = {
            **os.environ,
            "PYTHONHASHSEED": hash_seed,
            "NODUS_GSM8K_DATA_FILES": GSM8K_SAMPLE,
            "HF_DATASETS_CACHE": str(workdir / "hf-datasets"),
            "HF_DATASETS_OFFLINE": "1",
            "HF_HUB_OFFLINE": "1",
            "PYTHONWARNINGS": "ignore",
        }
        out, err = workdir / f"tasks-{hash_seed}.out", workdir / f"tasks-{hash_seed}.err"
        with out.open("wb") as stdout, err.open("wb") as stderr:
            command = [sys.executable, "-c", DUMP_SCRIPT, folders]
            processes.append((subprocess.Popen(command, env=env, stdout=stdout, stderr=stderr), out, err))
    return processes


_DUMPS: dict[str, Any] = {}
"""The dump processes, started once collection is done (see pytest_collection_finish)."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # The cross-process comparisons run last, so that the two dump processes (about 10 s each: they import
    # reasoning_gym and datasets) work while this process runs every other test.
    items.sort(key=lambda item: "task_dumps" in getattr(item, "fixturenames", ()))


def pytest_collection_finish(session: pytest.Session) -> None:
    if any("task_dumps" in getattr(item, "fixturenames", ()) for item in session.items):
        workdir = Path(tempfile.mkdtemp(prefix="nodus-catalog-tasks-"))
        _DUMPS.update(workdir=workdir, processes=_start_dumps(workdir))


def pytest_sessionfinish(session: pytest.Session) -> None:
    for process, _, _ in _DUMPS.get("processes", []):
        if process.poll() is None:  # the session ended before the comparisons ran (-x, interrupted)
            process.kill()
            process.wait()
    if "workdir" in _DUMPS:
        shutil.rmtree(_DUMPS["workdir"], ignore_errors=True)


@pytest.fixture(scope="session")
def task_dumps() -> tuple[dict[str, str], dict[str, str]]:
    """Every environment's task lists as printed by the two dump processes: loader (as ENVIRONMENTS writes
    it: the module's name for a module that is its own environment) -> the JSON text of
    {"train": [...], "test": [...]}."""
    dumps = []
    for process, out, err in _DUMPS["processes"]:
        assert process.wait(timeout=300) == 0, err.read_text(errors="replace")[-3000:]
        dumps.append(dict(line.split("\t", 1) for line in out.read_text(encoding="utf-8").splitlines()))
    return dumps[0], dumps[1]


def dump_in_process(env: Any) -> str:
    """The same JSON text the subprocesses print, from the environment loaded in this process."""
    return json.dumps({split: env.tasks(split) for split in ("train", "test")}, sort_keys=True, ensure_ascii=False)


@pytest.fixture(scope="session")
def dump() -> Any:
    return dump_in_process
