"""Running a data-driven runtime (`nodus.runtimes.sft`, `dpo`, ...) as the supervisor would, for the runtimes' tests.

Who uses it: runtimes/tests/test_*_trainer.py of the supervised, preference and distillation runtimes. It writes
params.json and the data Volume's folder, serves the attempt API with `fake_platform.FakePlatform` (events only:
these runtimes fetch no tasks and grade nothing), runs the trainer as a process with the contract's variables, and
returns what it wrote. The data sets are made here from the quickstart's reverse-words tasks (made-up words, a
fixed seed), so every runtime learns one skill the tiny model was warmed up on: spelling a word backwards.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fake_platform import FakePlatform

REPO = Path(__file__).resolve().parents[2]
REVERSE_WORDS = REPO / "examples" / "quickstart" / "env" / "reverse_words.py"


def words(count: int) -> list[str]:
    """`count` made-up words of the quickstart's (its train split first, then its held-out split)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("reverse_words_for_data", REVERSE_WORDS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    tasks = module.tasks("train") + module.tasks("test")
    return [str(task["answer"])[::-1] for task in tasks[:count]]


PROMPT = "Spell the word backwards inside <answer></answer>.\n\nWord: {word}"


def answer(text: str) -> str:
    return f"<answer>{text}</answer>"


def preference_rows(count: int) -> list[dict[str, str]]:
    """prompt / chosen (the word backwards) / rejected (the word as it is: a wrong answer)."""
    return [{"prompt": PROMPT.format(word=w), "chosen": answer(w[::-1]), "rejected": answer(w)} for w in words(count)]


@dataclass
class Result:
    returncode: int
    output: str
    outputs: Path
    state: Path
    platform: FakePlatform
    results: dict[str, Any] = field(default_factory=dict)

    def metrics(self, stage: str) -> list[dict[str, Any]]:
        return [e["metrics"] for e in self.platform.events if e.get("stage") == stage and e.get("metrics")]


def write_rows(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def run_runtime(
    module: str,
    root: Path,
    model: Path,
    *,
    parameters: dict[str, Any],
    data: dict[str, Any],
    task: str | None = None,
    teacher: Path | None = None,
    tracking: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
    timeout: int = 600,
) -> Result:
    """Run `python -m nodus.runtimes.<module>` on `root/volume` (write the data files there first)."""
    (root / "input").mkdir(parents=True, exist_ok=True)
    params: dict[str, Any] = {
        "task": task,
        "mode": "Train",
        "parameters": parameters,
        "data": data,
        "modelRevision": "hf://nodus/tiny-qwen3@test",
        "runtime": {"name": f"nodus/{module.replace('_', '-')}", "digest": "sha256:test", "managed": True},
        "trainingJob": "test",
    }
    if teacher is not None:
        params["teacherRevision"] = "hf://nodus/tiny-qwen3@teacher"
    if tracking is not None:
        params["tracking"] = tracking
    (root / "input" / "params.json").write_text(json.dumps(params))
    socket = root / "api.sock"
    socket.unlink(missing_ok=True)  # an earlier attempt's (a Unix socket's file outlives its server)
    with FakePlatform(socket, REVERSE_WORDS, train=0, test=0) as fake:
        contract = {
            "NODUS_INPUT_PARAMS": str(root / "input"),
            "NODUS_INPUT_MODEL": str(model),
            "NODUS_INPUT_DATA": str(root / "volume"),
            "NODUS_STATE_DIR": str(root / "state"),
            "NODUS_OUTPUT_DIR": str(root / "outputs"),
            "NODUS_ATTEMPT_API": str(socket),
            "NODUS_JOB_NAME": "test",
            "HF_HUB_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
        }
        if teacher is not None:
            contract["NODUS_INPUT_TEACHER"] = str(teacher)
        process = subprocess.run(
            [sys.executable, "-m", f"nodus.runtimes.{module}"],
            env={**os.environ, **contract, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    result = Result(process.returncode, process.stdout + process.stderr, root / "outputs", root / "state", fake)
    results_file = root / "outputs" / "results.json"
    if results_file.is_file():
        result.results = json.loads(results_file.read_text())
    return result
