"""`nodus-env`: the commands every grader image provides (tasks, grade, info, selfcheck).

Who uses it: the host's grading service runs it inside a sandbox (`python -m nodus.env.cli ...` or the
`nodus-env` script); people run it to debug an image. Standard output carries only the protocol: anything
the environment prints (while loading or grading) goes to standard error, so a chatty reward function
cannot corrupt the JSON lines. Exit status 2 when the environment cannot be loaded.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import IO, Any

from nodus.env import contract
from nodus.env.adapters import AdapterError
from nodus.env.environment import Environment, load_environment
from nodus.env.loader import LoadError
from nodus.env.privileges import drop_privileges

DEFAULT_TIMEOUT = float(os.environ.get("NODUS_GRADING_TIMEOUT", "30"))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nodus-env", description="The nodus Environment contract.")
    commands = parser.add_subparsers(dest="command", required=True)
    tasks = commands.add_parser("tasks", help="print the tasks of a split as JSON lines (no answers)")
    tasks.add_argument("--split", choices=["train", "test"], required=True)
    tasks.add_argument("--seed", type=int, default=0)
    tasks.add_argument("--limit", type=int, default=None, help="at most this many tasks")
    grade = commands.add_parser("grade", help="grade {taskId, completion} lines from stdin, one line out each")
    grade.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds per task (default 30)")
    commands.add_parser("info", help="name, version, adapter, split sizes, reward type, packages")
    commands.add_parser("selfcheck", help="grade a gold answer and an empty reply per split")
    return parser


def _protocol_stream() -> IO[str]:
    """Keep the real stdout for protocol lines and point fd 1 (and sys.stdout) at stderr."""
    protocol = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return protocol


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    out = _protocol_stream()
    isolation = drop_privileges(spawner=args.command in ("grade", "selfcheck"))
    try:
        env = load_environment(isolation=isolation)
        env.tasks("train")  # load the task lists now, so a broken environment fails here, not mid-stream
    except (LoadError, AdapterError) as exc:
        print(f"nodus-env: cannot load the environment: {exc}", file=sys.stderr)
        return 2
    if args.command == "tasks":
        tasks = env.ordered(args.split, args.seed)
        for task in tasks[: args.limit] if args.limit is not None else tasks:
            out.write(contract.dumps(task.public()) + "\n")
    elif args.command == "grade":
        _grade_stream(env, args.timeout, out)
    elif args.command == "info":
        out.write(json.dumps(env.info(), indent=2, sort_keys=True) + "\n")
    else:
        report = selfcheck(env)
        out.write(json.dumps(report, indent=2, sort_keys=True) + "\n")
        return 0 if report["ok"] else 1
    out.flush()
    return 0


def _grade_stream(env: Environment, timeout_s: float, out: IO[str]) -> None:
    stdin = sys.stdin.buffer
    while True:
        raw = stdin.readline()
        if not raw:
            return
        if not raw.strip():
            continue
        try:
            line: Any = json.loads(raw)
        except json.JSONDecodeError as exc:
            result = {
                "taskId": None,
                "verdict": contract.INFRASTRUCTURE_FAILURE,
                "reward": None,
                "evidence": {"durationMs": 0.0, "message": f"malformed line: not JSON ({exc.msg})"},
            }
        else:
            result = env.grade_line(line, timeout_s)
        out.write(contract.dumps(result) + "\n")
        out.flush()


def selfcheck(env: Environment, timeout_s: float = DEFAULT_TIMEOUT) -> dict[str, Any]:
    """Per split: a gold answer must be Correct; an empty reply must not crash (InvalidOutput or Incorrect)."""
    checks: list[dict[str, Any]] = []
    for split in ("train", "test"):
        tasks = env.tasks(split)
        if not tasks:
            checks.append({"split": split, "check": "has tasks", "ok": False, "detail": "the split is empty"})
            continue
        task = tasks[0]
        raw = _raw(task)
        verdicts = [
            env.grade_line({"taskId": task.task_id, "completion": c}, timeout_s)
            for c in env.adapter.gold_completions(raw)
        ]
        gold_ok = any(v["verdict"] == contract.CORRECT for v in verdicts)
        checks.append(
            {
                "split": split,
                "check": "gold answer is Correct",
                "ok": gold_ok,
                "taskId": task.task_id,
                "detail": [v["verdict"] for v in verdicts],
            }
        )
        empty = env.grade_line({"taskId": task.task_id, "completion": ""}, timeout_s)
        empty_ok = empty["verdict"] in (contract.INVALID_OUTPUT, contract.INCORRECT)
        checks.append(
            {
                "split": split,
                "check": "empty reply is InvalidOutput or Incorrect",
                "ok": empty_ok,
                "taskId": task.task_id,
                "detail": empty["verdict"],
                **({"message": empty["evidence"].get("message")} if not empty_ok else {}),
            }
        )
    return {"ok": all(c["ok"] for c in checks), "checks": checks, "info": env.info()}


def _raw(task: contract.Task) -> Any:
    from nodus.env.adapters import RawTask

    return RawTask(task.prompt, task.answer, task.metadata)


if __name__ == "__main__":
    raise SystemExit(main())
