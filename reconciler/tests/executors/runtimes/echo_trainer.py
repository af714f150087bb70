"""A test runtime that speaks the attempt API end to end, standing in for the real trainers (stdlib only).

Who runs it: the local executor's supervisor, in the executor tests, as a job's command. It follows the
runtime contract: `$NODUS_INPUT_PARAMS/params.json` holds `{"parameters": {...}}`; the attempt API is the
Unix socket at `$NODUS_ATTEMPT_API`; progress goes to `$NODUS_STATE_DIR/checkpoint.json` after every step and
is resumed from there; results go to `$NODUS_OUTPUT_DIR`. Parameters (all optional):

    steps        training steps (default 5)             sleepS      seconds to sleep per step (default 0.1)
    batch        completions graded per step (4)        failAtStep  exit 3 at this step (a failing trainer)
    evaluate     grade the held-out tasks before and after training (default true)
    ignoreSigterm  keep running through SIGTERM (a stubborn trainer: only SIGKILL stops it)

Its "model" solves every other arithmetic prompt itself (so some verdicts are Correct) and answers the
rest off by one. The held-out tasks are graded with phase Baseline before training and Evaluation after. It exits 2 if a task it was given carries anything but taskId, prompt and metadata.
Every step it ran is appended to `$NODUS_STATE_DIR/steps.jsonl` with the attempt and its pid, so tests
can tell a resumed run from a restarted one.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

EXPRESSION = re.compile(r"^[0-9+\-* ()]+$")


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str) -> None:
        super().__init__("localhost", timeout=120)
        self.path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)


class AttemptAPI:
    def __init__(self) -> None:
        self.connection = UnixConnection(os.environ["NODUS_ATTEMPT_API"])
        self.base = f"/trainingjobs/{os.environ['NODUS_JOB_NAME']}"

    def post(self, endpoint: str, body: dict[str, Any]) -> dict[str, Any]:
        data = json.dumps(body).encode()
        self.connection.request("POST", f"{self.base}/{endpoint}", data, {"Content-Type": "application/json"})
        response = self.connection.getresponse()
        payload = json.loads(response.read())
        if response.status != 200:
            raise SystemExit(f"echo-trainer: POST {endpoint} failed with {response.status}: {payload}")
        return payload


def solve(prompt: str) -> int | None:
    """The expression between the blank lines of an arithmetic prompt, evaluated (digits and + - * only)."""
    parts = prompt.split("\n\n")
    expression = parts[1].strip() if len(parts) >= 2 else ""
    if not EXPRESSION.match(expression):
        return None
    return int(eval(expression, {"__builtins__": {}}))


def completion(index: int, prompt: str) -> str:
    value = solve(prompt)
    if value is None:
        return f"<answer>{len(prompt)}</answer>"
    return f"<answer>{value if index % 2 == 0 else value + 1}</answer>"


def read_tasks(files: dict[str, str], name: str) -> list[dict[str, Any]]:
    tasks = [json.loads(line) for line in files[name].splitlines() if line.strip()]
    for task in tasks:
        if set(task) != {"taskId", "prompt", "metadata"}:
            print(f"echo-trainer: task {task.get('taskId')} carries {sorted(task)}", file=sys.stderr)
            raise SystemExit(2)
    return tasks


def grade(api: AttemptAPI, tasks: list[dict[str, Any]], phase: str | None = None) -> list[dict[str, Any]]:
    """Grade one completion per task; `phase` Baseline or Evaluation for the held-out tasks (Training if None)."""
    items = [{"taskId": t["taskId"], "completion": completion(i, t["prompt"])} for i, t in enumerate(tasks)]
    body: dict[str, Any] = {"items": items} if phase is None else {"items": items, "phase": phase}
    return list(api.post("gradings", body)["verdicts"])


def pass_rate(verdicts: list[dict[str, Any]]) -> float:
    return sum(v["verdict"] == "Correct" for v in verdicts) / max(1, len(verdicts))


def write_json(path: Path, document: object) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(document))
    os.replace(temporary, path)


def main() -> int:
    params = json.loads((Path(os.environ["NODUS_INPUT_PARAMS"]) / "params.json").read_text())
    parameters = params.get("parameters", {})
    steps, sleep_s = int(parameters.get("steps", 5)), float(parameters.get("sleepS", 0.1))
    batch, fail_at = int(parameters.get("batch", 4)), parameters.get("failAtStep")
    evaluate = bool(parameters.get("evaluate", True))
    if parameters.get("ignoreSigterm"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    state, outputs = Path(os.environ["NODUS_STATE_DIR"]), Path(os.environ["NODUS_OUTPUT_DIR"])
    attempt = os.environ.get("NODUS_ATTEMPT", "?")
    print(f"echo-trainer: attempt {attempt}, {steps} steps", flush=True)

    api = AttemptAPI()
    files = api.post("tasks", {})["files"]
    train, test = read_tasks(files, "train.jsonl"), read_tasks(files, "test.jsonl")

    checkpoint = state / "checkpoint.json"
    done = json.loads(checkpoint.read_text())["step"] + 1 if checkpoint.exists() else 0
    baseline = json.loads(checkpoint.read_text()).get("baseline") if checkpoint.exists() else None
    if done == 0 and evaluate:
        api.post("events", {"stage": "Baseline", "totalSteps": steps})
        baseline = pass_rate(grade(api, test, "Baseline"))
        # The platform computes its own pass rates from the gradings and drops these two keys; a trainer may
        # still report them (and keys of its own, which are kept).
        api.post("events", {"summary": {"baselinePassRate": baseline, "echoBaseline": baseline}})

    for step in range(done, steps):
        if fail_at is not None and step == int(fail_at):
            print(f"echo-trainer: failing on purpose at step {step}", file=sys.stderr, flush=True)
            return 3
        api.post("events", {"stage": "Training", "step": step, "totalSteps": steps})
        chosen = [train[(step * batch + i) % len(train)] for i in range(batch)]
        verdicts = grade(api, chosen)
        rewards = [v["reward"] for v in verdicts if v["reward"] is not None]
        api.post("events", {"step": step, "metrics": {"reward": sum(rewards) / max(1, len(rewards))}})
        with (state / "steps.jsonl").open("a") as log:
            log.write(json.dumps({"step": step, "attempt": attempt, "pid": os.getpid()}) + "\n")
        write_json(checkpoint, {"step": step, "baseline": baseline})
        print(f"echo-trainer: step {step} done", flush=True)
        time.sleep(sleep_s)

    final = None
    if evaluate:
        api.post("events", {"stage": "Evaluating", "step": steps, "totalSteps": steps})
        final = pass_rate(grade(api, test, "Evaluation"))
        api.post("events", {"summary": {"finalPassRate": final}})
    api.post("events", {"stage": "Exporting"})
    (outputs / "adapter").mkdir(parents=True, exist_ok=True)
    (outputs / "adapter" / "weights.bin").write_bytes(bytes(range(256)) * 16)
    write_json(outputs / "results.json", {"steps": steps, "baselinePassRate": baseline, "finalPassRate": final})
    print("echo-trainer: done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
