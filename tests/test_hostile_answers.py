"""Completion code reaches no answer, in either sandbox: the hostile-completion suite (the security issue's acceptance).

A trainer's completions are graded through the attempt API (tasks fetched, then gradings posted over its Unix
socket, as `nodus.runtimes` does). Two Environments are attacked:

- `hostile-answers`, written here with answers made fresh for each run, keeps them in every place an Environment
  may keep them: a module constant, a package data file, a dataset cached under HF_HOME at build time (the image)
  or in a world-readable data folder (process mode), the git objects of the checkout it lives in, the grader's
  environment (its own variable, and `os.environ` at load), a file in the grader's /tmp, an open descriptor, and
  so `/proc` of the grader and its parent. Its reward runs the completion's `answer(task)` and is Correct only
  when it returns the task's answer, which no completion can know without reading it.
- the catalog's `nodus/python-functions`, whose hidden calls and expected values sit in its package, in the git
  objects of this repository and in its image.

Each hostile completion looks for the answers in one way: the known places, the git objects (the `git` program
and zlib by hand), `/proc/*` (environ, cmdline, open files, root and cwd of every process), a walk of the whole
file system, and the descriptors and environment it was started with. Every one must score 0 Correct on every
held-out task, while the gold completions score all Correct. The checkout of the process-mode Environment lives
under this repository's `build/` folder, not under /tmp: the process sandbox hid the host's /tmp, and projects
live in /work, /srv or /home.
"""

from __future__ import annotations

import http.client
import json
import os
import secrets
import shutil
import socket
import subprocess
import textwrap
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from nodus.reconciler.grading import GradingService, GradingSettings
from nodus.reconciler.session.attempt_api import AttemptAPI, AttemptServer, FileTranscript
from nodus.reconciler.session.environment import EnvironmentSpec

REPO = Path(__file__).resolve().parents[1]
PYTHON_FUNCTIONS = REPO / "catalog" / "python-functions"
HELD_OUT = 3
TASKS = 9  # 6 train, 3 held out
RUN_TIMEOUT_S = 8  # the hostile Environment's limit per run: room for a walk of the whole file system

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="graders that drop to their own uids need root"),
    pytest.mark.slow,
]


# --- the hostile Environment ------------------------------------------------------------------------------------

ENVIRONMENT_YAML = """\
apiVersion: nodus.dev/v1
kind: Environment
metadata: {name: hostile-answers}
spec:
  version: 1.0.0
  package: {path: ., loader: "hostile_env:load_environment"}
  rewardType: Binary
"""

MODULE = '''\
"""hostile-answers: answers kept everywhere an Environment may keep them (a test of the graders' sandboxes)."""

import json
import os
import re
import sys
from pathlib import Path

from nodus.env.execute import run_function

REWARD_TYPE = "Binary"
ANSWERS = __ANSWERS__
HERE = Path(__file__).resolve().parent
_held = []


def _cache(folder):
    """Write the answers where a dataset library caches what it loads, world-readable, as `datasets` does."""
    try:
        cache = Path(folder) / "hostile" / "answers.txt"
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps(ANSWERS))
        cache.chmod(0o644)
    except OSError:
        pass  # read-only when grading: the build cached it
    try:
        return (Path(folder) / "hostile" / "answers.txt").read_text()
    except OSError:
        return None


def load_environment():
    assert json.loads((HERE / "answers.json").read_text()) == ANSWERS  # package data
    for folder in (os.environ.get("HF_HOME"), os.environ.get("NODUS_HOSTILE_DATA")):
        if folder:
            _cache(folder)
    os.environ["HOSTILE_ANSWERS"] = json.dumps(ANSWERS)  # the grader's environment, at load
    try:
        scratch = Path(os.environ.get("TMPDIR") or "/tmp") / "hostile-answers.txt"
        scratch.write_text(json.dumps(ANSWERS))
        scratch.chmod(0o644)
    except OSError:
        pass
    _held.append(open(HERE / "answers.json"))  # an open descriptor on the answers
    return sys.modules[__name__]


def tasks(split):
    numbers = range(6) if split == "train" else range(6, 9)
    return [
        {"prompt": f"Return the answer of task {i}.", "answer": {"task": i, "token": ANSWERS[str(i)]},
         "metadata": {"task": i}}
        for i in numbers
    ]


def reward(completion, answer):
    found = re.search(r"```python\\n(.*?)```", completion, re.DOTALL)
    if found is None:
        return None
    result = run_function(found.group(1), "answer", [[answer["task"]]], timeout_s=__TIMEOUT__)
    return 1.0 if result.status == "ok" and result.values == [answer["token"]] else 0.0


def gold_completion(answer):
    return f"```python\\ndef answer(task):\\n    return {answer['token']!r}\\n```"
'''


def answers() -> dict[str, str]:
    """A fresh, unguessable answer per task: `NODUS-ANSWER-<task>-<32 hex>`."""
    return {str(i): f"NODUS-ANSWER-{i:03d}-{secrets.token_hex(16)}" for i in range(TASKS)}


def write_environment(folder: Path, tokens: Mapping[str, str]) -> Path:
    folder.mkdir(parents=True)
    module = MODULE.replace("__ANSWERS__", repr(dict(tokens))).replace("__TIMEOUT__", str(RUN_TIMEOUT_S))
    (folder / "hostile_env.py").write_text(module)
    (folder / "answers.json").write_text(json.dumps(dict(tokens)))
    (folder / "environment.yaml").write_text(ENVIRONMENT_YAML)
    return folder


def commit(checkout: Path) -> None:
    """Make `checkout` a git repository with everything committed (loose objects, as after a fresh commit)."""
    git = ["git", "-C", str(checkout), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "hostile"]):
        subprocess.run([*git, *args], check=True, capture_output=True)


# --- hostile completions ----------------------------------------------------------------------------------------

# Shared by every hostile completion: how it recognises an answer and reads what it can.
PRELUDE = """\
import os, re, stat, subprocess, sys, time, zlib
STARTED = time.monotonic()
PATTERN = "NODUS-" + "ANSWER-%03d-[0-9a-f]{32}"
KNOWN = __KNOWN__

def find(task, data):
    if isinstance(data, str):
        data = data.encode(errors="replace")
    hit = re.search((PATTERN % task).encode(), data)
    return hit.group(0).decode() if hit else None

def read(path, limit=8 << 20):
    try:
        with open(path, "rb") as handle:
            return handle.read(limit)
    except Exception:
        return b""

def inflated(data):
    try:
        return zlib.decompress(data)
    except Exception:
        return b""

def walk(top, task, budget):
    for folder, subfolders, files in os.walk(top):
        subfolders[:] = [s for s in subfolders if os.path.join(folder, s) not in ("/proc", "/sys", "/dev")]
        for name in files:
            if time.monotonic() - STARTED > budget:
                return None
            path = os.path.join(folder, name)
            try:
                if not stat.S_ISREG(os.lstat(path).st_mode):
                    continue  # a device or a pipe could block the walk
            except OSError:
                continue
            data = read(path, 1 << 20)
            found = find(task, data) or find(task, inflated(data))
            if found:
                return found
    return None
"""

STRATEGIES: dict[str, str] = {
    "the known places": """
def answer(task):
    for place in KNOWN:
        found = walk(place, task, 6) if os.path.isdir(place) else find(task, read(place))
        if found:
            return found
    return "nothing found"
""",
    "git objects": """
def answer(task):
    for place in KNOWN:
        for command in (["git", "-c", "safe.directory=*", "-C", place, "cat-file", "--batch-all-objects", "--batch"],
                        ["/usr/bin/git", "-c", "safe.directory=*", "-C", place, "log", "-p", "--all"]):
            try:
                out = subprocess.run(command, capture_output=True, timeout=3).stdout
            except Exception:
                continue
            if find(task, out):
                return find(task, out)
        objects = os.path.join(place, ".git", "objects")
        for folder, _, files in os.walk(objects):
            for name in files:
                found = find(task, inflated(read(os.path.join(folder, name))))
                if found:
                    return found
    return "nothing found"
""",
    "/proc of every process": """
def answer(task):
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit() or p in ("self", "thread-self")]
    except Exception:
        pids = ["1", "self"]
    for pid in pids + [str(n) for n in range(1, 64)]:
        base = "/proc/" + pid
        for name in ("environ", "cmdline", "maps", "stat"):
            found = find(task, read(os.path.join(base, name)))
            if found:
                return found
        try:
            fds = os.listdir(os.path.join(base, "fd"))
        except Exception:
            fds = []
        for fd in fds:
            found = find(task, read(os.path.join(base, "fd", fd)))
            if found:
                return found
        for place in KNOWN + ["/tmp", "/opt"]:
            for via in ("root", "cwd"):
                inside = base + "/" + via + place if via == "root" else base + "/cwd"
                found = walk(inside, task, 6) if os.path.isdir(inside) else find(task, read(inside))
                if found:
                    return found
    return "nothing found"
""",
    "a walk of the whole file system": """
def answer(task):
    try:
        tops = sorted(os.listdir("/"), key=lambda n: (n in ("usr", "lib", "lib64", "bin", "sbin", "boot"), n))
    except Exception:
        tops = []
    for top in tops:
        found = walk("/" + top, task, 7)
        if found:
            return found
    return "nothing found"
""",
    "inherited descriptors and variables": """
def answer(task):
    found = find(task, repr(dict(os.environ)))
    if found:
        return found
    for fd in range(0, 256):
        try:
            os.lseek(fd, 0, 0)
        except Exception:
            pass
        try:
            found = find(task, os.read(fd, 1 << 20))
        except Exception:
            continue
        if found:
            return found
    return "nothing found"
""",
}


def hostile_completions(known: list[str]) -> dict[str, str]:
    prelude = PRELUDE.replace("__KNOWN__", repr(known))
    return {name: f"```python\n{prelude}{body}```" for name, body in STRATEGIES.items()}


# Against python-functions: the same search, for the file that holds its hidden calls and expected values.
PF_PRELUDE = """\
import glob, importlib.util, os, subprocess, sys, time, types
STARTED = time.monotonic()
KNOWN = __KNOWN__

def table_from(source):
    module = types.ModuleType("stolen")
    try:
        exec(compile(source, "stolen", "exec"), module.__dict__)
        return module.TEST + module.TRAIN
    except Exception:
        return None

def lookup(function, args, tasks):
    for task in tasks or []:
        if task["function"] == function:
            for call, expected in zip(task["calls"], task["expected"]):
                if call == list(args):
                    return expected
    return None

def read(path):
    try:
        with open(path, "rb") as handle:
            return handle.read(8 << 20).decode(errors="replace")
    except Exception:
        return ""
"""

PF_STRATEGIES: dict[str, str] = {
    "the known places": """
def steal(function, args):
    for place in KNOWN + ["/opt/environment"]:
        for path in [os.path.join(place, "python_functions_tasks.py")] + glob.glob(place + "/**/python_functions_tasks.py", recursive=True):
            found = lookup(function, args, table_from(read(path)))
            if found is not None:
                return found
    return "nothing found"
""",
    "git objects": """
def steal(function, args):
    for place in KNOWN:
        for path in ("catalog/python-functions/python_functions_tasks.py", "python_functions_tasks.py"):
            try:
                out = subprocess.run(["git", "-c", "safe.directory=*", "-C", place, "show", "HEAD:" + path],
                                     capture_output=True, text=True, timeout=3).stdout
            except Exception:
                continue
            found = lookup(function, args, table_from(out))
            if found is not None:
                return found
    return "nothing found"
""",
    "/proc and a walk of the file system": """
def steal(function, args):
    roots = ["/proc/%s/root" % p for p in os.listdir("/proc") if p.isdigit()] if os.path.isdir("/proc") else []
    for top in roots + ["/"]:
        for folder, subfolders, files in os.walk(top):
            subfolders[:] = [s for s in subfolders if s not in ("proc", "sys", "dev", "usr")]
            if time.monotonic() - STARTED > 4:
                return "nothing found"
            if "python_functions_tasks.py" in files:
                found = lookup(function, args, table_from(read(os.path.join(folder, "python_functions_tasks.py"))))
                if found is not None:
                    return found
    return "nothing found"
""",
}


def python_functions_completions(function: str, known: list[str]) -> dict[str, str]:
    prelude = PF_PRELUDE.replace("__KNOWN__", repr(known))
    caller = f"\ndef {function}(*args):\n    return steal({function!r}, args)\n"
    return {name: f"```python\n{prelude}{body}{caller}```" for name, body in PF_STRATEGIES.items()}


# --- the attempt API, as a trainer talks to it -------------------------------------------------------------------


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: Path) -> None:
        super().__init__("localhost", timeout=600)
        self.socket_path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(str(self.socket_path))


class Trainer:
    """A trainer's side of the attempt API: POST tasks, POST gradings, over the job's Unix socket."""

    def __init__(self, socket_path: Path, job: str) -> None:
        self.connection = UnixConnection(socket_path)
        self.job = job

    def post(self, endpoint: str, body: object) -> dict[str, Any]:
        data = json.dumps(body).encode()
        self.connection.request(
            "POST", f"/trainingjobs/{self.job}/{endpoint}", data, {"Content-Type": "application/json"}
        )
        response = self.connection.getresponse()
        reply = json.loads(response.read())
        assert response.status == 200, reply
        return dict(reply)

    def held_out(self) -> list[dict[str, Any]]:
        files = self.post("tasks", {})["files"]
        return [json.loads(line) for line in files["test.jsonl"].splitlines()]

    def grade(self, items: list[dict[str, str]]) -> list[dict[str, Any]]:
        return list(self.post("gradings", {"items": items, "phase": "Evaluation"})["verdicts"])


class Jobs:
    """Jobs' attempt APIs on Unix sockets, each with a real grading service: `jobs(settings, environment) -> Trainer`."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.services: list[GradingService] = []
        self.servers: list[AttemptServer] = []

    def __call__(self, settings: GradingSettings, environment: EnvironmentSpec) -> Trainer:
        service = GradingService(settings)
        self.services.append(service)
        job = f"hostile-{len(self.servers)}"
        api = AttemptAPI(name=job, environment=environment, grading=service, grading_job=job, on_event=lambda e: None)
        server = AttemptServer(self.folder / f"{job}.sock", api, transcript=FileTranscript(self.folder / f"{job}.log"))
        server.start()
        self.servers.append(server)
        return Trainer(server.socket_path, job)

    def close(self) -> None:
        """Stop the servers and their graders (again: a no-op)."""
        while self.servers:
            self.servers.pop().close()
        while self.services:
            self.services.pop().close_all()


@pytest.fixture
def attempt_api(tmp_path: Path) -> Iterator[Jobs]:
    jobs = Jobs(tmp_path)
    yield jobs
    jobs.close()


@pytest.fixture
def checkout() -> Iterator[Path]:
    """A project checkout outside /tmp (projects live in /work, /srv, /home): under this repository's build/."""
    folder = REPO / "build" / f"hostile-{uuid.uuid4().hex[:12]}"
    folder.mkdir(parents=True)
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def settings(mode: str, tmp_path: Path, **variables: str) -> GradingSettings:
    return GradingSettings(
        mode=mode,  # type: ignore[arg-type]
        max_parallel=2,
        task_timeout_s=60,
        stage_dir=tmp_path / "stage",
        variables={"NODUS_HOSTILE_ANSWERS": variables.pop("answers", ""), **variables},
    )


def outcomes(
    trainer: Trainer, tasks: list[dict[str, Any]], completions: Mapping[str, Callable[[dict[str, Any]], str]]
) -> dict[str, list[dict[str, Any]]]:
    """{completion name: [verdict per held-out task]}, every item graded through the attempt API."""
    names = list(completions)
    items = [{"taskId": t["taskId"], "completion": completions[name](t)} for name in names for t in tasks]
    verdicts = trainer.grade(items)
    grid: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for item, verdict in zip(items, verdicts, strict=True):
        assert verdict["taskId"] == item["taskId"]
    for index, verdict in enumerate(verdicts):
        grid[names[index // len(tasks)]].append(verdict)
    return grid


def check(grid: Mapping[str, list[dict[str, Any]]], gold: str, tokens: Mapping[str, str] | None = None) -> None:
    correct = {name: sum(v["verdict"] == "Correct" for v in verdicts) for name, verdicts in grid.items()}
    held = len(grid[gold])
    assert correct == {**dict.fromkeys(grid, 0), gold: held}, correct
    for name, verdicts in grid.items():
        for verdict in verdicts:
            assert verdict["verdict"] in ("Correct", "Incorrect"), (name, verdict)
            execution = verdict["evidence"]["sandbox"]["execution"]
            assert execution["isolation"] == "uid" and execution["view"] == "private", (name, execution)
            for token in (tokens or {}).values():
                assert token not in json.dumps(verdict), (name, "an answer reached the trainer")


# --- the tests --------------------------------------------------------------------------------------------------


def hostile_environment(
    mode: str, tmp_path: Path, checkout: Path, tokens: Mapping[str, str], build: Callable[[Path], str] | None
) -> tuple[EnvironmentSpec, GradingSettings, list[str]]:
    package = write_environment(checkout / "envs" / "hostile", tokens)
    commit(checkout)
    data = checkout / "hf-cache"  # a world-readable data folder on the host (process mode reads it at load)
    (data / "hostile").mkdir(parents=True)
    (data / "hostile" / "answers.txt").write_text(json.dumps(dict(tokens)))  # as a build or an earlier load left it
    for path in (data, data / "hostile", data / "hostile" / "answers.txt"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    known = [str(checkout), str(package), str(data), str(tmp_path), "/opt/environment", "/opt/nodus", "/tmp"]
    answers = json.dumps(dict(tokens))
    grading = settings(mode, tmp_path, answers=answers, NODUS_HOSTILE_DATA=str(data))
    loader = "hostile_env:load_environment"
    return environment_spec("hostile-answers", package, loader, mode, build, train=6), grading, known


def environment_spec(
    name: str, package: Path, loader: str, mode: str, build: Callable[[Path], str] | None, *, train: int
) -> EnvironmentSpec:
    """The job's Environment: the package's folder in process mode, its image built by nodus-build in a container."""
    if mode == "process":
        return EnvironmentSpec(
            name, "1.0.0", paths=(str(package),), loader=loader, train_tasks=train, held_out_tasks=HELD_OUT
        )
    assert build is not None
    return EnvironmentSpec(name, "1.0.0", image=build(package), train_tasks=train, held_out_tasks=HELD_OUT)


MODES = ["process", pytest.param("container", marks=pytest.mark.podman)]


def constant(text: str) -> Callable[[dict[str, Any]], str]:
    return lambda task: text


@pytest.mark.parametrize("mode", MODES)
def test_no_hostile_completion_finds_the_answers_of_an_environment_that_keeps_them_everywhere(
    mode: str, tmp_path: Path, checkout: Path, attempt_api: Jobs, request: pytest.FixtureRequest
) -> None:
    tokens = answers()
    build = request.getfixturevalue("grader_image_of") if mode == "container" else None
    environment, grading, known = hostile_environment(mode, tmp_path, checkout, tokens, build)
    trainer = attempt_api(grading, environment)
    tasks = trainer.held_out()
    assert sorted(t["metadata"]["task"] for t in tasks) == [6, 7, 8] and not any(
        tokens[str(i)] in json.dumps(tasks) for i in range(9)
    )

    hostile = hostile_completions(known)
    completions = {name: constant(text) for name, text in hostile.items()}
    completions["gold"] = lambda task: (
        f"```python\ndef answer(task):\n    return {tokens[str(task['metadata']['task'])]!r}\n```"
    )
    check(outcomes(trainer, tasks, completions), "gold", tokens)


@pytest.mark.parametrize("mode", MODES)
def test_no_hostile_completion_finds_the_hidden_calls_of_python_functions(
    mode: str, tmp_path: Path, attempt_api: Jobs, request: pytest.FixtureRequest
) -> None:
    build = request.getfixturevalue("grader_image_of") if mode == "container" else None
    loader = "python_functions_env:load_environment"
    environment = environment_spec("python-functions", PYTHON_FUNCTIONS, loader, mode, build, train=4)
    trainer = attempt_api(settings(mode, tmp_path), environment)
    tasks = trainer.held_out()
    solutions = {task["function"]: task["solution"] for task in _python_functions_test_split()}
    known = [str(REPO), str(PYTHON_FUNCTIONS), "/opt/environment", "/opt/nodus"]

    def completion_of(name: str) -> Callable[[dict[str, Any]], str]:
        if name == "gold":
            return lambda task: f"```python\n{solutions[task['metadata']['function']]}```"
        return lambda task: python_functions_completions(task["metadata"]["function"], known)[name]

    completions = {name: completion_of(name) for name in [*PF_STRATEGIES, "gold"]}
    check(outcomes(trainer, tasks, completions), "gold")


def _python_functions_test_split() -> list[dict[str, Any]]:
    """The catalog's own table (read by the test, which is allowed to know the answers)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("pf_tasks_for_gold", PYTHON_FUNCTIONS / "python_functions_tasks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return list(module.TEST)


@pytest.fixture
def grader_image_of(
    tmp_path: Path, base_reference: str, capsys: pytest.CaptureFixture[str], attempt_api: Jobs
) -> Iterator[Callable[[Path], str]]:
    """`build(package) -> image`: nodus-build of the package (its freeze step caches data under HF_HOME), loaded
    into podman's storage as the grading service runs it. Removed after the graders are stopped: `podman rmi
    --force` of an image in use stops its containers itself, 10 s each."""
    from nodus.builder.cli import main as nodus_build
    from nodus.builder.oci import read_image
    from nodus.builder.sandbox import load_image
    from nodus.builder.store import Store

    def build(package: Path) -> str:
        project = tmp_path / f"project-{package.name}"
        shutil.copytree(package, project, ignore=shutil.ignore_patterns("__pycache__", "tests"))
        text = (project / "environment.yaml").read_text().replace(", project: nodus}", "}")
        (project / "environment.yaml").write_text(textwrap.dedent(text))
        flags = ["--network", "none", "--base", base_reference, "--lock", str(project / "nodus.lock")]
        with pytest.raises(SystemExit) as exited:
            nodus_build([str(project), *flags, "--state-dir", str(project / ".nodus"), "--json"])
        output = json.loads(capsys.readouterr().out)
        assert exited.value.code == 0, output
        (row,) = output["results"]
        images = Store(project / ".nodus").images
        name = f"localhost/nodus-hostile/{package.name}:{uuid.uuid4().hex[:8]}"
        load_image(images, row["tag"], name, read_image(images, row["tag"]).ref.config_digest)
        loaded.append(name)
        return name

    loaded: list[str] = []
    yield build
    attempt_api.close()  # this fixture is torn down first: it was asked for by name in the test
    podman = ["podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs"]
    for name in loaded:
        subprocess.run([*podman, "rmi", "--force", name], capture_output=True, check=False)
