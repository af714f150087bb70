"""Run a GitHub Actions workflow's `run:` steps on this machine, in order, the way a runner would.

Who uses it: `tests/test_workflows.py`, which runs `.github/workflows/*.yml` against a temporary git repository,
a local registry and a stand-in GitHub API, and checks that every workflow file is one this runner can run. A
workflow that is only YAML no one ran is not done; this is how it gets run without GitHub.

What it does, and what it leaves to the caller:
- `uses:` steps (actions/checkout, actions/setup-python) are skipped: the caller prepares the folder (a git
  clone at the commit) and the interpreter itself. Steps the caller replaces by id (`replaced={"setup"}`:
  `make setup` is replaced by the caller's own virtual environment on PATH) are skipped too.
- `run:` steps run in a bash like Actions' (`shell: bash` is `bash --noprofile --norc -eo pipefail`), with the
  workflow's, job's and step's `env`, `working-directory`, `if:` and `continue-on-error`, and the files
  Actions gives a step: GITHUB_ENV, GITHUB_PATH, GITHUB_OUTPUT (read back as `steps.<id>.outputs`),
  GITHUB_STEP_SUMMARY and the event file GITHUB_EVENT_PATH.
- `${{ ... }}` expressions are evaluated from the contexts passed in: `github` (a dict: event_name, sha, ref,
  repository, api_url, event, ...), `vars` and `secrets`, plus `env`, `steps`, `runner` and `job`. Operators
  `! == != < <= > >= && || ( ) . []`, and the functions success, failure, always, cancelled, contains,
  startsWith, endsWith, format, join, toJSON and fromJSON. Anything else is a WorkflowError naming the file.
- `on:` is checked against `github.event_name` and the branch and tag filters of push and pull_request.
Keys it cannot honour (matrix, services, container, paths filters...) are refused when the file is loaded.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

JSONObject = dict[str, Any]

WORKFLOW_KEYS = {"name", "run-name", "on", "permissions", "env", "defaults", "concurrency", "jobs"}
JOB_KEYS = {
    "name",
    "runs-on",
    "if",
    "needs",
    "permissions",
    "env",
    "defaults",
    "steps",
    "timeout-minutes",
    "concurrency",
    "environment",
    "outputs",
    "continue-on-error",
}
STEP_KEYS = {"name", "id", "uses", "with", "run", "env", "if", "shell", "working-directory", "timeout-minutes"}
STEP_KEYS |= {"continue-on-error"}
FILTERS = {"branches", "branches-ignore", "tags", "tags-ignore", "types"}
SHELLS = {
    None: ["bash", "-e"],  # what Actions runs when a step names no shell
    "bash": ["bash", "--noprofile", "--norc", "-eo", "pipefail"],
    "sh": ["sh", "-e"],
}
STATUS_FUNCTIONS = re.compile(r"\b(success|failure|always|cancelled)\s*\(")


class WorkflowError(Exception):
    """The workflow file asks for something this runner cannot do, or is not a workflow."""


class StepFailedError(Exception):
    """A `run:` step exited non-zero; the message names the workflow, job and step and ends with its output."""

    def __init__(self, result: StepResult, workflow: str) -> None:
        tail = result.output[-6000:]
        super().__init__(
            f"{workflow}: job {result.job}, step {result.name!r} exited {result.returncode}:\n{tail}".rstrip()
        )
        self.result = result


# -- the workflow file -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    name: str
    id: str | None
    raw: JSONObject

    @property
    def uses(self) -> str | None:
        value = self.raw.get("uses")
        return str(value) if value is not None else None

    @property
    def run(self) -> str | None:
        value = self.raw.get("run")
        return str(value) if value is not None else None


@dataclass(frozen=True)
class Job:
    id: str
    raw: JSONObject
    steps: tuple[Step, ...]

    @property
    def needs(self) -> list[str]:
        needs = self.raw.get("needs") or []
        return [needs] if isinstance(needs, str) else [str(need) for need in needs]


@dataclass(frozen=True)
class Workflow:
    path: Path
    name: str
    on: JSONObject
    """Event name -> its filters ({} when none)."""
    raw: JSONObject
    jobs: tuple[Job, ...]

    def expressions(self) -> list[str]:
        """Every `${{ }}` expression and `if:` condition of the file (a test evaluates them all)."""
        found: list[str] = []

        def walk(value: Any, key: str = "") -> None:
            if isinstance(value, dict):
                for name, item in value.items():
                    walk(item, str(name))
            elif isinstance(value, list):
                for item in value:
                    walk(item)
            elif isinstance(value, str):
                if key == "if" and "${{" not in value:
                    found.append(value)
                found.extend(match.group(1) for match in _INTERPOLATION.finditer(value))

        walk(self.raw)
        return found


def load_workflow(path: Path) -> Workflow:
    """Parse and check a workflow file; WorkflowError (naming the file) for what the runner cannot run."""
    try:
        raw = YAML(typ="safe", pure=True).load(path.read_text(encoding="utf-8"))
    except (OSError, YAMLError) as exc:
        raise WorkflowError(f"{path}: not readable YAML: {exc}") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("jobs"), dict) or "on" not in raw:
        raise WorkflowError(f"{path}: a workflow needs `on:` and `jobs:`")
    _only(raw, WORKFLOW_KEYS, f"{path}")
    jobs = []
    for job_id, job in raw["jobs"].items():
        where = f"{path}: jobs.{job_id}"
        if not isinstance(job, dict) or not isinstance(job.get("steps"), list):
            raise WorkflowError(f"{where}: a job needs `steps:` (reusable workflows are not run here)")
        _only(job, JOB_KEYS, where)
        steps = []
        for index, step in enumerate(job["steps"]):
            if not isinstance(step, dict):
                raise WorkflowError(f"{where}.steps[{index}]: not a mapping")
            _only(step, STEP_KEYS, f"{where}.steps[{index}]")
            if ("uses" in step) == ("run" in step):
                raise WorkflowError(f"{where}.steps[{index}]: a step has exactly one of `uses:` and `run:`")
            if step.get("shell") not in SHELLS:
                raise WorkflowError(f"{where}.steps[{index}]: shell {step.get('shell')!r} is not one of bash, sh")
            label = step.get("name") or step.get("id") or step.get("uses") or str(step.get("run", "")).split("\n")[0]
            steps.append(Step(str(label), str(step["id"]) if "id" in step else None, step))
        jobs.append(Job(str(job_id), job, tuple(steps)))
    return Workflow(path, str(raw.get("name") or path.name), _events(raw["on"], path), raw, tuple(_ordered(jobs)))


def _only(mapping: Mapping[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(mapping) - allowed)
    if unknown:
        raise WorkflowError(f"{where}: {', '.join(unknown)} not supported by this runner")


def _events(on: Any, path: Path) -> JSONObject:
    if isinstance(on, str):
        return {on: {}}
    if isinstance(on, list):
        return {str(event): {} for event in on}
    if not isinstance(on, dict):
        raise WorkflowError(f"{path}: `on:` is not an event, a list or a mapping")
    events: JSONObject = {}
    for event, filters in on.items():
        filters = filters or {}
        if not isinstance(filters, dict):
            raise WorkflowError(f"{path}: on.{event} is not a mapping")
        if event in ("push", "pull_request"):
            _only(filters, FILTERS, f"{path}: on.{event}")
        events[str(event)] = filters
    return events


def _ordered(jobs: list[Job]) -> list[Job]:
    """Jobs in an order that honours `needs:` (file order otherwise)."""
    done: list[Job] = []
    names = {job.id for job in jobs}
    pending = list(jobs)
    while pending:
        ready = [job for job in pending if all(need in {d.id for d in done} for need in job.needs)]
        if not ready:
            missing = {need for job in pending for need in job.needs if need not in names}
            raise WorkflowError(f"jobs need {', '.join(sorted(missing)) or 'each other (a cycle)'}")
        done.append(ready[0])
        pending.remove(ready[0])
    return done


def triggered(workflow: Workflow, github: Mapping[str, Any]) -> bool:
    """Whether the event in `github` starts the workflow (event name, then branch and tag filters)."""
    event = str(github.get("event_name", ""))
    if event not in workflow.on:
        return False
    filters = workflow.on[event]
    if event == "pull_request":
        return _ref_allowed(filters, f"refs/heads/{github.get('base_ref', '')}")
    if event == "push":
        return _ref_allowed(filters, str(github.get("ref", "")))
    return True


def _ref_allowed(filters: JSONObject, ref: str) -> bool:
    kind, _, name = ref.removeprefix("refs/").partition("/")
    if kind not in ("heads", "tags"):
        return True
    kind = "branches" if kind == "heads" else "tags"
    other = "tags" if kind == "branches" else "branches"
    chosen, ignored = filters.get(kind), filters.get(f"{kind}-ignore")
    if chosen is None and ignored is None and (other in filters or f"{other}-ignore" in filters):
        return False  # only the other kind of ref was asked for
    if chosen is not None and not any(_glob(pattern, name) for pattern in chosen):
        return False
    return not (ignored is not None and any(_glob(pattern, name) for pattern in ignored))


def _glob(pattern: str, name: str) -> bool:
    """Actions' filter patterns: `**` matches anything, `*` anything but `/`."""
    regex = "".join(
        ".*" if part == "**" else "[^/]*" if part == "*" else re.escape(part)
        for part in re.split(r"(\*\*|\*)", pattern)
    )
    return re.fullmatch(regex, name) is not None


# -- running -----------------------------------------------------------------------------------------------


@dataclass
class StepResult:
    job: str
    name: str
    id: str | None
    outcome: str
    """success, failure or skipped."""
    reason: str = ""
    """Why it was skipped: `uses` (an action), `replaced` (the caller did it), `if` (its condition was false)."""
    returncode: int | None = None
    output: str = ""
    seconds: float = 0.0
    outputs: dict[str, str] = field(default_factory=dict)


@dataclass
class RunResult:
    workflow: str
    triggered: bool
    jobs: dict[str, str] = field(default_factory=dict)
    """Job id -> success, failure or skipped."""
    steps: list[StepResult] = field(default_factory=list)

    def step(self, key: str) -> StepResult:
        """The step with this id (or name)."""
        for result in self.steps:
            if key in (result.id, result.name):
                return result
        raise KeyError(f"{self.workflow}: no step {key!r} ran or was skipped")

    @property
    def output(self) -> str:
        return "".join(f"== {r.job} / {r.name} ({r.outcome})\n{r.output}" for r in self.steps)


def run_workflow(
    workflow: Workflow | Path,
    *,
    workdir: Path,
    github: Mapping[str, Any],
    vars: Mapping[str, str] | None = None,
    secrets: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
    replaced: Iterable[str] = (),
    check: bool = True,
    echo: Callable[[str], None] | None = None,
) -> RunResult:
    """Run every job's `run:` steps in `workdir`; StepFailedError for the first failing step when `check`.

    `env` is the process environment steps start from (default: this process's). `replaced` names step ids
    the caller has done itself; naming an id no job has is a WorkflowError (a typo would skip nothing)."""
    chosen = workflow if isinstance(workflow, Workflow) else load_workflow(workflow)
    skip = set(replaced)
    known = {step.id for job in chosen.jobs for step in job.steps}
    if skip - known:
        raise WorkflowError(f"{chosen.path}: no step has the id {', '.join(sorted(skip - known))}")
    context: JSONObject = {
        "github": {"workspace": str(workdir), **github},
        "vars": dict(vars or {}),
        "secrets": dict(secrets or {}),
        "runner": {"os": "Linux", "arch": "X64", "temp": tempfile.gettempdir()},
        "inputs": {},
        "matrix": {},
        "strategy": {},
    }
    result = RunResult(chosen.name, triggered(chosen, context["github"]))
    if not result.triggered:
        return result
    with tempfile.TemporaryDirectory(prefix="nodus-workflow-") as scratch:
        for job in chosen.jobs:
            runner = _JobRunner(chosen, job, workdir, context, dict(os.environ if env is None else env), Path(scratch))
            result.jobs[job.id] = runner.run(skip, result.steps, check=check, echo=echo)
    return result


class _JobRunner:
    """One job: its contexts, environment and the files Actions hands each step."""

    def __init__(
        self, workflow: Workflow, job: Job, workdir: Path, context: JSONObject, base_env: dict[str, str], scratch: Path
    ) -> None:
        self.workflow, self.job, self.workdir, self.scratch = workflow, job, workdir, scratch
        self.context = {**context, "steps": {}, "job": {"status": "success"}, "needs": {}}
        self.base_env = base_env
        self.added_env: dict[str, str] = {}
        self.added_path: list[str] = []
        self.failed = False

    def evaluate(self, text: str, extra: Mapping[str, Any] | None = None) -> Any:
        return evaluate(text, {**self.context, **(extra or {})}, failed=self.failed, where=str(self.workflow.path))

    def interpolate(self, value: Any, env: Mapping[str, str]) -> str:
        return interpolate(
            str(value), {**self.context, "env": dict(env)}, failed=self.failed, where=str(self.workflow.path)
        )

    def scoped_env(self, *levels: Any, outer: Mapping[str, str] | None = None) -> dict[str, str]:
        """The `env` context: workflow, then job, then step mappings, each evaluated with the outer ones."""
        scoped: dict[str, str] = dict(outer or {})
        for level in levels:
            for name, value in (level or {}).items():
                scoped[str(name)] = self.interpolate(value, scoped)
        return scoped

    def run(self, skip: set[str], results: list[StepResult], *, check: bool, echo: Callable[[str], None] | None) -> str:
        outer = self.scoped_env(self.workflow.raw.get("env"), self.job.raw.get("env"))
        condition = self.job.raw.get("if")
        if condition is not None and not _truthy(self._condition(condition, outer)):
            return "skipped"
        for step in self.job.steps:
            result = self.step(step, outer, skip)
            results.append(result)
            if echo is not None:
                echo(f"== {self.workflow.name} / {self.job.id} / {step.name}: {result.outcome} {result.reason}\n")
                echo(result.output)
            if result.outcome == "failure" and not _truthy(self._flag(step.raw.get("continue-on-error"), outer)):
                self.failed = True
                self.context["job"] = {"status": "failure"}
                if check:
                    raise StepFailedError(result, self.workflow.name)
        return "failure" if self.failed else "success"

    def _condition(self, condition: Any, env: Mapping[str, str]) -> Any:
        text = str(condition).strip()
        if text.startswith("${{") and text.endswith("}}"):
            text = text[3:-2]
        if not STATUS_FUNCTIONS.search(text):
            text = f"success() && ({text})"
        return self.evaluate(text, {"env": dict(env)})

    def _flag(self, value: Any, env: Mapping[str, str]) -> Any:
        if isinstance(value, str) and "${{" in value:
            return self.interpolate(value, env)
        return value

    def step(self, step: Step, outer: Mapping[str, str], skip: set[str]) -> StepResult:
        result = StepResult(self.job.id, step.name, step.id, "skipped")
        env = self.scoped_env(step.raw.get("env"), outer=outer)
        condition = step.raw.get("if", "success()")  # the default condition
        if not _truthy(self._condition(condition, env)):
            result.reason = "if"
        elif step.uses is not None or step.id in skip:
            # The caller prepared what the action or the replaced step does: to later steps it succeeded.
            result.reason = "uses" if step.uses is not None else "replaced"
            self._record(step, "success", {})
            return result
        else:
            return self._execute(step, env, result)
        self._record(step, "skipped", {})
        return result

    def _record(self, step: Step, outcome: str, outputs: dict[str, str]) -> None:
        """`steps.<id>` for later expressions: outputs, outcome and conclusion."""
        if step.id:
            self.context["steps"][step.id] = {"outputs": outputs, "outcome": outcome, "conclusion": outcome}

    def _execute(self, step: Step, env: Mapping[str, str], result: StepResult) -> StepResult:
        script = self.interpolate(step.run, env)
        folder = self.scratch / f"step-{len(self.context['steps'])}-{os.getpid()}-{time.monotonic_ns()}"
        folder.mkdir()
        files = {name: folder / name.lower() for name in ("GITHUB_ENV", "GITHUB_PATH", "GITHUB_OUTPUT")}
        files["GITHUB_STEP_SUMMARY"] = folder / "summary.md"
        for path in files.values():
            path.touch()
        event = folder / "event.json"
        event.write_text(json.dumps(self.context["github"].get("event") or {}), encoding="utf-8")
        (folder / "script.sh").write_text(script, encoding="utf-8")
        process_env = {**self.base_env, **self._github_env(), **self.added_env, **env}
        process_env.update({name: str(path) for name, path in files.items()})
        process_env["GITHUB_EVENT_PATH"] = str(event)
        if self.added_path:
            process_env["PATH"] = os.pathsep.join([*reversed(self.added_path), process_env.get("PATH", "")])
        shell = step.raw.get("shell") or (self._defaults().get("shell"))
        directory = step.raw.get("working-directory") or self._defaults().get("working-directory")
        cwd = self.workdir / self.interpolate(directory, env) if directory else self.workdir
        minutes = step.raw.get("timeout-minutes") or self.job.raw.get("timeout-minutes")
        log = folder / "output.log"
        started = time.monotonic()
        with log.open("wb") as sink:
            # Output goes to a file, not a pipe: a step may start a process that outlives it (a job supervisor),
            # and a pipe would stay open until that one exits.
            process = subprocess.Popen(
                [*SHELLS[shell], str(folder / "script.sh")],
                cwd=cwd,
                env=process_env,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
            )
            try:
                result.returncode = process.wait(timeout=float(minutes) * 60 if minutes else None)
            except subprocess.TimeoutExpired:
                process.kill()
                result.returncode = process.wait()
        result.seconds = round(time.monotonic() - started, 3)
        result.output = log.read_text(encoding="utf-8", errors="replace")
        result.outcome = "success" if result.returncode == 0 else "failure"
        self.added_env.update(_key_values(files["GITHUB_ENV"].read_text(encoding="utf-8")))
        self.added_path += [line for line in files["GITHUB_PATH"].read_text(encoding="utf-8").splitlines() if line]
        result.outputs = _key_values(files["GITHUB_OUTPUT"].read_text(encoding="utf-8"))
        self._record(step, result.outcome, result.outputs)
        return result

    def _defaults(self) -> JSONObject:
        workflow = ((self.workflow.raw.get("defaults") or {}).get("run")) or {}
        job = ((self.job.raw.get("defaults") or {}).get("run")) or {}
        return {**workflow, **job}

    def _github_env(self) -> dict[str, str]:
        """GITHUB_<KEY> for every scalar of the github context, as Actions sets them, and CI=true."""
        found = {"CI": "true", "RUNNER_OS": "Linux", "RUNNER_TEMP": str(self.scratch)}
        for key, value in self.context["github"].items():
            if isinstance(value, str | int | float) and not isinstance(value, bool):
                found[f"GITHUB_{str(key).upper()}"] = str(value)
        return found


def _key_values(text: str) -> dict[str, str]:
    """The GITHUB_ENV / GITHUB_OUTPUT format: `NAME=value` lines, or `NAME<<DELIMITER` ... `DELIMITER`."""
    found: dict[str, str] = {}
    lines = iter(text.splitlines())
    for line in lines:
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, _, delimiter = line.partition("<<")
            collected: list[str] = []
            for item in lines:
                if item == delimiter:
                    break
                collected.append(item)
            found[name] = "\n".join(collected)
        elif "=" in line:
            name, _, value = line.partition("=")
            found[name] = value
    return found


# -- expressions -------------------------------------------------------------------------------------------

_INTERPOLATION = re.compile(r"\$\{\{(.*?)\}\}", re.DOTALL)
_TOKEN = re.compile(
    r"\s*(?:(?P<number>0x[0-9a-fA-F]+|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)|(?P<string>'(?:[^']|'')*')"
    r"|(?P<op>==|!=|<=|>=|&&|\|\||[!<>()\[\].,*])|(?P<name>[A-Za-z_][A-Za-z0-9_-]*))"
)


def interpolate(text: str, context: Mapping[str, Any], *, failed: bool = False, where: str = "workflow") -> str:
    """`text` with every `${{ expression }}` replaced by its value as Actions prints it."""
    return _INTERPOLATION.sub(lambda match: _text(evaluate(match.group(1), context, failed=failed, where=where)), text)


def evaluate(text: str, context: Mapping[str, Any], *, failed: bool = False, where: str = "workflow") -> Any:
    """The value of one expression (without `${{ }}`) over the contexts; WorkflowError for what it cannot read."""
    tokens = _tokens(text, where)
    parser = _Parser(tokens, context, failed, f"{where}: ${{{{ {text.strip()} }}}}")
    value = parser.expression()
    if parser.position != len(tokens):
        raise WorkflowError(f"{parser.where}: unexpected {tokens[parser.position][1]!r}")
    return value


def _tokens(text: str, where: str) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    position = 0
    text = text.rstrip()
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None or match.end() == position:
            raise WorkflowError(f"{where}: cannot read the expression {text.strip()!r} at {text[position:]!r}")
        kind = match.lastgroup
        assert kind is not None
        found.append((kind, match.group(kind)))
        position = match.end()
    return found


class _Parser:
    """Recursive descent over Actions' expression grammar, evaluating as it goes."""

    def __init__(self, tokens: list[tuple[str, str]], context: Mapping[str, Any], failed: bool, where: str) -> None:
        self.tokens, self.context, self.failed, self.where = tokens, context, failed, where
        self.position = 0

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def take(self, value: str | None = None) -> tuple[str, str]:
        token = self.peek()
        if token is None or (value is not None and token[1] != value):
            raise WorkflowError(f"{self.where}: expected {value or 'more'}, found {token[1] if token else 'the end'}")
        self.position += 1
        return token

    def expression(self) -> Any:
        left = self.conjunction()
        while self.peek() == ("op", "||"):
            self.take()
            right = self.conjunction()
            left = left if _truthy(left) else right
        return left

    def conjunction(self) -> Any:
        left = self.equality()
        while self.peek() == ("op", "&&"):
            self.take()
            right = self.equality()
            left = right if _truthy(left) else left
        return left

    def equality(self) -> Any:
        left = self.comparison()
        while self.peek() in (("op", "=="), ("op", "!=")):
            _, op = self.take()
            right = self.comparison()
            left = _equal(left, right) == (op == "==")
        return left

    def comparison(self) -> Any:
        left = self.unary()
        while self.peek() in (("op", "<"), ("op", "<="), ("op", ">"), ("op", ">=")):
            _, op = self.take()
            right = self.unary()
            a, b = _number(left), _number(right)
            left = {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]
        return left

    def unary(self) -> Any:
        if self.peek() == ("op", "!"):
            self.take()
            return not _truthy(self.unary())
        return self.postfix()

    def postfix(self) -> Any:
        value = self.primary()
        while self.peek() in (("op", "."), ("op", "[")):
            _, op = self.take()
            if op == ".":
                kind, name = self.take()
                value = "*" if kind == "op" and name == "*" else _member(value, name)
            else:
                key = self.expression()
                self.take("]")
                value = (
                    value[int(_number(key))]
                    if isinstance(value, list) and _in_range(value, key)
                    else _member(value, key)
                )
        return value

    def primary(self) -> Any:
        kind, value = self.take()
        if kind == "number":
            return float(int(value, 16)) if value.startswith("0x") else float(value)
        if kind == "string":
            return value[1:-1].replace("''", "'")
        if kind == "op" and value == "(":
            inner = self.expression()
            self.take(")")
            return inner
        if kind != "name":
            raise WorkflowError(f"{self.where}: unexpected {value!r}")
        if value in ("true", "false"):
            return value == "true"
        if value == "null":
            return None
        if self.peek() == ("op", "("):
            return self.call(value)
        if value not in self.context:
            raise WorkflowError(f"{self.where}: unknown context {value!r}")
        return self.context[value]

    def call(self, name: str) -> Any:
        self.take("(")
        args: list[Any] = []
        while self.peek() != ("op", ")"):
            args.append(self.expression())
            if self.peek() == ("op", ","):
                self.take()
        self.take(")")
        function = _FUNCTIONS.get(name.lower())
        if function is None:
            raise WorkflowError(f"{self.where}: the function {name}() is not supported by this runner")
        return function(self, *args)


def _member(value: Any, key: Any) -> Any:
    if not isinstance(value, dict):
        return None
    if key in value:
        return value[key]
    lowered = str(key).lower()
    return next((item for name, item in value.items() if str(name).lower() == lowered), None)


def _in_range(value: list[Any], key: Any) -> bool:
    index = _number(key)
    return not math.isnan(index) and 0 <= index < len(value) and index == int(index)


def _truthy(value: Any) -> bool:
    if isinstance(value, float) and math.isnan(value):
        return False
    return value not in (None, False, 0, "")


def _number(value: Any) -> float:
    if value is None:
        return 0.0
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return 0.0
        try:
            return float(int(text, 16)) if text.lower().startswith("0x") else float(text)
        except ValueError:
            return math.nan
    return math.nan


def _equal(left: Any, right: Any) -> bool:
    if isinstance(left, str) and isinstance(right, str):
        return left.lower() == right.lower()
    if isinstance(left, dict | list) or isinstance(right, dict | list):
        return left is right
    if type(left) is type(right):
        return bool(left == right)
    return _number(left) == _number(right)


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, dict | list):
        return json.dumps(value, indent=2)
    return str(value)


def _format(parser: _Parser, template: Any, *args: Any) -> str:
    def fill(match: re.Match[str]) -> str:
        index = int(match.group(1))
        if index >= len(args):
            raise WorkflowError(f"{parser.where}: format() has no argument {index}")
        return _text(args[index])

    return (
        re.sub(r"\{(\d+)\}", fill, str(template).replace("{{", "\0").replace("}}", "\1"))
        .replace("\0", "{")
        .replace("\1", "}")
    )


_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "success": lambda parser: not parser.failed,
    "failure": lambda parser: parser.failed,
    "always": lambda parser: True,
    "cancelled": lambda parser: False,
    "contains": lambda parser, haystack, needle: (
        any(_equal(item, needle) for item in haystack)
        if isinstance(haystack, list)
        else _text(needle).lower() in _text(haystack).lower()
    ),
    "startswith": lambda parser, text, prefix: _text(text).lower().startswith(_text(prefix).lower()),
    "endswith": lambda parser, text, suffix: _text(text).lower().endswith(_text(suffix).lower()),
    "format": _format,
    "join": lambda parser, items, separator=",": (
        _text(separator).join(_text(item) for item in items) if isinstance(items, list) else _text(items)
    ),
    "tojson": lambda parser, value: json.dumps(value, indent=2),
    "fromjson": lambda parser, text: json.loads(_text(text)),
}
