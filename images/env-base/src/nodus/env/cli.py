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
from collections.abc import Callable
from typing import IO, Any

from nodus.env import contract
from nodus.env.adapters import AdapterError
from nodus.env.environment import Environment, load_environment
from nodus.env.loader import LoadError
from nodus.env.privileges import drop_privileges

DEFAULT_TIMEOUT = float(os.environ.get("NODUS_GRADING_TIMEOUT", "30"))

# The C scanner under `json.loads` (one JSON value from a position, no whitespace handling around it). It is
# set up by `JSONDecoder.__init__`, which typeshed does not declare.
_SCAN: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
# `contract.dumps` itself: its encoder is built once (`json.dumps` with arguments builds one per call,
# which cost about as much as encoding a reply).
_encode_reply = contract.LINE_ENCODER.encode


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
    manifests = commands.add_parser(
        "manifests", help="write info.json and every split's tasks at each seed into a folder (one load)"
    )
    manifests.add_argument("--out", required=True, help="folder for info.json and tasks-<split>-<seed>.jsonl")
    manifests.add_argument("--seed", type=int, action="append", required=True, help="a seed (repeat for more)")
    check = commands.add_parser("selfcheck", help="grade gold answers, an empty reply and fixture cases")
    check.add_argument("--gold", type=int, default=1, help="tasks per split whose gold answer must be Correct")
    check.add_argument("--fixtures", default=None, help="JSONL fixture cases to grade (see README)")
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
    elif args.command == "manifests":
        write_manifests(env, args.out, sorted(set(args.seed)))
    else:
        report = selfcheck(env, gold=args.gold, fixtures=_read_fixtures(args.fixtures))
        out.write(json.dumps(report, indent=2, sort_keys=True) + "\n")
        return 0 if report["ok"] else 1
    out.flush()
    return 0


def write_manifests(env: Environment, folder: str, seeds: list[int]) -> None:
    """What nodus-build's freeze and check steps read: `info` and `tasks` output, byte for byte, as files.

    One process loads the environment once for all of them (loading is most of the cost of `tasks`).
    """
    with open(os.path.join(folder, "info.json"), "w", encoding="utf-8") as handle:
        handle.write(json.dumps(env.info(), indent=2, sort_keys=True) + "\n")
    for split in ("train", "test"):
        for seed in seeds:
            with open(os.path.join(folder, f"tasks-{split}-{seed}.jsonl"), "w", encoding="utf-8") as handle:
                handle.writelines(contract.dumps(task.public()) + "\n" for task in env.ordered(split, seed))


def _grade_stream(env: Environment, timeout_s: float, out: IO[str]) -> None:
    stdin = sys.stdin.buffer
    while True:
        raw = stdin.readline()
        if not raw:
            return
        if not raw.strip():
            continue
        try:
            line: Any = _decode_request(raw)
        except json.JSONDecodeError as exc:
            result = {
                "taskId": None,
                "verdict": contract.INFRASTRUCTURE_FAILURE,
                "reward": None,
                "evidence": {"durationMs": 0.0, "message": f"malformed line: not JSON ({exc.msg})"},
            }
        else:
            result = env.grade_line(line, timeout_s)
        out.write(_encode_reply(result) + "\n")
        out.flush()


def _decode_request(raw: bytes) -> Any:
    """`json.loads(raw)`, taking a shortcut for the usual line: UTF-8, a JSON value, then the newline.

    `json.loads` on bytes first guesses their encoding, then skips whitespace around the value, which costs
    more than the parse itself. Any other line goes to `json.loads` itself, errors included.
    """
    try:
        text = raw.decode()
        value, end = _SCAN(text, 0)
        if end == len(text) - 1 and text[end] == "\n":
            return value
    except (ValueError, StopIteration):  # StopIteration: no JSON value starts at position 0
        pass
    return json.loads(raw)


def _read_fixtures(path: str | None) -> list[dict[str, Any]]:
    if not path:
        return []
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def selfcheck(
    env: Environment, *, gold: int = 1, fixtures: list[dict[str, Any]] | None = None, timeout_s: float = DEFAULT_TIMEOUT
) -> dict[str, Any]:
    """The contract's self-check.

    Per split: the gold answers of the first `gold` tasks must be Correct; an empty reply must not crash
    (InvalidOutput or Incorrect). Each fixture case (`{"case", "split", "index", "completion", "verdict",
    "reward"}`, index into the list the environment returns) must give its verdict and reward.
    """
    checks: list[dict[str, Any]] = []
    for split in ("train", "test"):
        tasks = env.tasks(split)
        if not tasks:
            checks.append({"split": split, "check": "has tasks", "ok": False, "detail": "the split is empty"})
            continue
        wrong = []
        for task in tasks[: max(gold, 1)]:
            completions = env.adapter.gold_completions(env.adapter_task(task))
            if not completions and getattr(env.adapter, "gold_optional", False):
                # An episode with no answer key (an OpenEnv game): the adapter checked determinism when it loaded.
                continue
            results = [env.grade_line({"taskId": task.task_id, "completion": c}, timeout_s) for c in completions]
            verdicts = [result["verdict"] for result in results]
            if contract.CORRECT not in verdicts:
                # The grader's own words (`ZeroDivisionError: ... in reward (env.py:12)`): what the build error shows.
                messages = [result["evidence"]["message"] for result in results if "message" in result["evidence"]]
                wrong.append(
                    {"taskId": task.task_id, "verdicts": verdicts, **({"messages": messages} if messages else {})}
                )
        checks.append(
            {
                "split": split,
                "check": f"gold answers of {min(max(gold, 1), len(tasks))} tasks are Correct",
                "ok": not wrong,
                "detail": wrong,
            }
        )
        first = tasks[0]
        empty = env.grade_line({"taskId": first.task_id, "completion": ""}, timeout_s)
        checks.append(
            {
                "split": split,
                "check": "empty reply is InvalidOutput or Incorrect",
                "ok": empty["verdict"] in (contract.INVALID_OUTPUT, contract.INCORRECT),
                "taskId": first.task_id,
                "detail": empty["verdict"],
                **({"message": empty["evidence"]["message"]} if "message" in empty["evidence"] else {}),
            }
        )
    for number, case in enumerate(fixtures or [], start=1):
        checks.append(_fixture_check(env, number, case, timeout_s))
    return {"ok": all(c["ok"] for c in checks), "checks": checks, "info": env.info()}


def _fixture_check(env: Environment, number: int, case: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    name = f"fixture {number} ({case.get('case', 'unnamed')})"
    task = env.by_index(str(case.get("split")), int(case.get("index", -1)))
    if task is None:
        return {"check": name, "ok": False, "detail": f"no task at {case.get('split')}[{case.get('index')}]"}
    result = env.grade_line({"taskId": task.task_id, "completion": case.get("completion", "")}, timeout_s)
    expected = (case.get("verdict"), case.get("reward"))
    got = (result["verdict"], result["reward"])
    ok = got[0] == expected[0] and (expected[1] is None or (got[1] is not None and abs(got[1] - expected[1]) < 1e-9))
    return {
        "check": name,
        "ok": ok,
        "taskId": task.task_id,
        "detail": {
            "expected": expected,
            "got": got,
            **({"message": result["evidence"]["message"]} if "message" in result["evidence"] else {}),
        },
    }


if __name__ == "__main__":
    raise SystemExit(main())
