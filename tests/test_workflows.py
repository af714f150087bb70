"""The GitHub workflows (.github/workflows/) are run here, step by step, with `nodus.testing.workflows`.

Fast tests: every workflow file loads in the runner, names only the actions the runner leaves to its caller,
evaluates every expression it has, and calls only commands that exist (`nodus` and `nodus-build` subcommands and
flags, make targets, scripts); every variable and secret it reads is documented in the README; the runner's
own rules (expressions, triggers, GITHUB_ENV/PATH/OUTPUT, conditions, failures).

The acceptance test (podman, registry, slow) is a pull request simulated in a temporary git repository: a project
with two Environments built and applied on main, then a branch that changes one Environment's source and adds a
TrainingJob. The build workflow's steps rebuild only the changed Environment and push it to a local registry, the
plan workflow's steps post one comment to a stand-in GitHub API (updated in place on the next run), and after
the merge the apply workflow's steps start exactly the job the plan showed. Each run is a fresh clone at its
commit, as on GitHub; the runner's persistent state folder (NODUS_HOME) and the team's state store (NODUS_STATE)
are shared between runs. `--sign` cannot run here (no Fulcio): NODUS_SIGN stays unset.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest

from nodus.testing.workflows import (
    RunResult,
    StepFailedError,
    WorkflowError,
    evaluate,
    load_workflow,
    run_workflow,
)

REPO = Path(__file__).resolve().parents[1]
WORKFLOW_DIR = REPO / ".github" / "workflows"
WORKFLOWS = sorted(WORKFLOW_DIR.glob("*.yml"))
# What a runner on GitHub does before our steps; the test prepares the clone and the interpreter itself.
ACTIONS = {"actions/checkout", "actions/setup-python"}
ZERO = "0" * 40
BIN = Path(sys.executable).parent


def workflow(name: str) -> Path:
    return WORKFLOW_DIR / f"nodus-{name}.yml"


# -- fast: the files ---------------------------------------------------------------------------------------


def test_there_are_the_three_workflows() -> None:
    assert [path.name for path in WORKFLOWS] == ["nodus-apply.yml", "nodus-build.yml", "nodus-plan.yml"]
    assert set(load_workflow(workflow("build")).on) == {"push"}
    assert set(load_workflow(workflow("plan")).on) == {"pull_request"}
    assert set(load_workflow(workflow("apply")).on) == {"push", "workflow_dispatch"}


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda path: path.name)
def test_every_step_is_one_the_runner_runs_or_leaves_to_its_caller(path: Path) -> None:
    loaded = load_workflow(path)
    for job in loaded.jobs:
        uses = {step.uses.split("@")[0] for step in job.steps if step.uses}
        assert uses <= ACTIONS, uses
        # The one step a local run replaces is the README's setup (the caller's .venv is on PATH instead).
        setup = [step for step in job.steps if step.id == "setup"]
        assert len(setup) == 1 and (setup[0].run or "").startswith("make setup\n"), setup
        assert all(step.run for step in job.steps if not step.uses)
    context = {
        "github": {"event": {"pull_request": {"number": 1}, "before": ZERO}, "actor": "someone"},
        "vars": {},
        "secrets": {},
        "env": {},
        "steps": {"apply": {"outcome": "success"}},
        "runner": {},
        "job": {},
    }
    for expression in loaded.expressions():
        evaluate(expression, context, where=path.name)  # every context and function is one the runner knows


def _commands(script: str) -> Iterator[tuple[str, list[str]]]:
    """(program, arguments) for each `nodus`, `nodus-build`, `make` and `.ci/` call in a step's script."""
    joined = script.replace("\\\n", " ")
    # A program in command position: at the start, after ; && || | ( $( then else do, or after sudo.
    where = r"(?:^\s*|[;&|(]\s*|\b(?:then|else|do|sudo)\s+)"
    for line in joined.splitlines():
        for match in re.finditer(where + r"(nodus-build|nodus|make|\.ci/[\w.-]+)(?=\s|$)(.*)", line):
            rest = re.split(r"\|\||&&|;|\||>", match.group(2))[0]
            yield match.group(1), shlex.split(rest, comments=True)


def _options(command: click.Command) -> set[str]:
    return {option for param in command.params for option in (*param.opts, *param.secondary_opts)} | {"--help"}


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda path: path.name)
def test_every_command_a_step_calls_exists(path: Path) -> None:
    from nodus.builder.cli import cli as build_cli
    from nodus.cli.main import cli

    targets = set(re.findall(r"^([A-Za-z][\w-]*):", (REPO / "Makefile").read_text(), re.MULTILINE))
    called: list[str] = []
    for job in load_workflow(path).jobs:
        for step in job.steps:
            for program, words in _commands(step.run or ""):
                called.append(program)
                if program == "make":
                    assert words and words[0] in targets, (step.name, words)
                elif program.startswith(".ci/"):
                    script = REPO / program
                    assert script.is_file() and os.access(script, os.X_OK), program
                    assert words and words[0] in script.read_text(), (program, words)
                else:
                    group = cli if program == "nodus" else build_cli
                    if program == "nodus":
                        name, words = words[0], words[1:]
                    else:
                        name = words[0] if words and words[0] in ("base", "verify") else "build"
                    command = group.commands.get(name)
                    assert command is not None, f"{path.name}: {step.name}: {program} {name} does not exist"
                    unknown = {w for w in words if w.startswith("-") and w not in _options(command)}
                    assert not unknown, f"{path.name}: {step.name}: {program} {name} has no {unknown}"
    assert {"make", "nodus"} & set(called), called
    # Flags gathered in bash arrays first (`select=(--changed --since "$before")`) are nodus-build's too.
    for flags in re.findall(r"\b\w+\+?=\(([^)]*)\)", path.read_text()):
        unknown = {
            w for w in shlex.split(flags) if w.startswith("-") and w not in _options(build_cli.commands["build"])
        }
        assert not unknown, unknown


def test_every_variable_and_secret_the_workflows_read_is_in_the_readme() -> None:
    readme = (REPO / "README.md").read_text()
    section = readme.split("## GitOps: workflows", 1)[1].split("\n## ", 1)[0]
    names = set()
    for path in WORKFLOWS:
        names |= set(re.findall(r"\b(?:vars|secrets)\.([A-Z_]+)", path.read_text()))
    names.discard("GITHUB_TOKEN")  # GitHub's own
    missing = sorted(name for name in names if name not in section)
    assert not missing, missing


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda path: path.name)
def test_a_repository_that_names_no_project_runs_nothing(path: Path, tmp_path: Path) -> None:
    event = {"event_name": "push", "ref": "refs/heads/main", "base_ref": "main"}
    if "pull_request" in load_workflow(path).on:
        event["event_name"] = "pull_request"
    result = run_workflow(path, workdir=tmp_path, github=event, vars={})
    assert result.triggered and set(result.jobs.values()) == {"skipped"} and result.steps == []


def test_the_plan_workflow_posts_a_failed_plan_then_the_fixed_one_in_the_same_comment(tmp_path: Path) -> None:
    from nodus.testing.fake_github import FakeGitHub

    project = tmp_path / "models"
    project.mkdir()
    for name in ("environment.yaml", "env/reverse_words.py", "trainingjob.yaml"):
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / "examples" / "quickstart" / name, project / name)
    (project / "nodus.lock").write_text("lockfileVersion: 1\nenvironments: {}\n")
    job = project / "trainingjob.yaml"
    job.write_text(job.read_text().replace("learningRate:", "learning_rate:"))
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "NO_COLOR": "1"}
    env.pop("NODUS_STATE", None)
    with FakeGitHub() as api:
        github = {
            "event_name": "pull_request",
            "base_ref": "main",
            "repository": "acme/models",
            "api_url": api.url,
            "event": {"pull_request": {"number": 3}},
        }
        secrets = {"GITHUB_TOKEN": api.token, "NODUS_STATE": str(tmp_path / "state.db")}
        options: dict[str, Any] = {"workdir": tmp_path, "github": github, "secrets": secrets, "env": env}
        options |= {"vars": {"NODUS_PROJECT": "models"}, "replaced": {"setup"}}
        failed = run_workflow(workflow("plan"), check=False, **options)
        assert failed.jobs == {"plan": "failure"}, failed.output
        (comment,) = api.comments[("acme/models", 3)]
        assert comment["body"].startswith("<!-- nodus-plan -->\n## nodus plan failed\n"), comment["body"]
        assert "spec.parameters.learning_rate" in comment["body"] and "learningRate" in comment["body"]

        job.write_text(job.read_text().replace("learning_rate:", "learningRate:"))
        fixed = run_workflow(workflow("plan"), **options)
        assert "updated comment" in fixed.step("plan").output
        assert [c["id"] for c in api.comments[("acme/models", 3)]] == [comment["id"]]
        assert "+ TrainingJob/quickstart" in comment["body"] and "nodus plan failed" not in comment["body"]

        # Without the state store's secret the job stops before planning against an empty store.
        missing = run_workflow(workflow("plan"), check=False, **{**options, "secrets": {"GITHUB_TOKEN": api.token}})
        assert missing.jobs == {"plan": "failure"} and "set the NODUS_STATE secret" in missing.step("plan").output


# -- fast: the runner's own rules --------------------------------------------------------------------------

RUNNER_WORKFLOW = """
name: t
on:
  push:
    branches: [main, "release/**"]
    tags-ignore: ["**"]
env:
  WHO: ${{ vars.WHO || 'nobody' }}
jobs:
  one:
    runs-on: ubuntu-24.04
    env:
      GREETING: hello ${{ env.WHO }}
    steps:
      - uses: actions/checkout@v4
      - id: first
        run: |
          echo "$GREETING from $GITHUB_REPOSITORY at ${{ github.sha }}"
          echo "ADDED=yes" >> "$GITHUB_ENV"
          mkdir -p tools && printf '#!/bin/sh\\necho tool\\n' > tools/tool && chmod +x tools/tool
          echo "$PWD/tools" >> "$GITHUB_PATH"
          { echo "multi<<EOF"; echo a; echo b; echo EOF; echo "one=1"; } >> "$GITHUB_OUTPUT"
      - id: second
        shell: bash
        env:
          FROM_OUTPUT: ${{ steps.first.outputs.multi }}
        run: |
          echo "added=$ADDED $(tool) ${{ format('{0}-{1}', steps.first.outputs.one, 'x') }}"
          echo "$FROM_OUTPUT" | tr '\\n' ,
      - id: never
        if: github.event_name == 'pull_request'
        run: exit 3
      - id: fails
        if: ${{ vars.FAIL == 'true' }}
        run: echo broken; exit 4
      - id: after-failure
        run: echo unreachable
      - id: cleanup
        if: always() && steps.fails.outcome == 'failure'
        run: echo cleaning
"""


def test_the_runner_runs_steps_like_actions(tmp_path: Path) -> None:
    path = tmp_path / "t.yml"
    path.write_text(RUNNER_WORKFLOW)
    github = {"event_name": "push", "ref": "refs/heads/main", "sha": "abc123", "repository": "acme/x"}
    result = run_workflow(path, workdir=tmp_path, github=github, vars={"WHO": "ci"})
    assert result.triggered and result.jobs == {"one": "success"}
    assert result.step("first").output == "hello ci from acme/x at abc123\n"
    assert result.step("first").outputs == {"multi": "a\nb", "one": "1"}
    assert result.step("second").output == "added=yes tool 1-x\na,b,"
    assert [(r.id, r.outcome, r.reason) for r in result.steps if r.outcome == "skipped"] == [
        (None, "skipped", "uses"),
        ("never", "skipped", "if"),
        ("fails", "skipped", "if"),
        ("cleanup", "skipped", "if"),
    ]

    with pytest.raises(StepFailedError, match=r"job one, step 'fails' exited 4:\nbroken"):
        run_workflow(path, workdir=tmp_path, github=github, vars={"FAIL": "TRUE"})  # == ignores case, as Actions
    failed = run_workflow(path, workdir=tmp_path, github=github, vars={"FAIL": "true"}, check=False)
    assert failed.jobs == {"one": "failure"}
    assert failed.step("after-failure").reason == "if" and failed.step("cleanup").output == "cleaning\n"

    assert not run_workflow(path, workdir=tmp_path, github={**github, "ref": "refs/heads/dev"}).triggered
    assert run_workflow(path, workdir=tmp_path, github={**github, "ref": "refs/heads/release/1.2"}).triggered
    assert not run_workflow(path, workdir=tmp_path, github={**github, "ref": "refs/tags/v1"}).triggered
    assert not run_workflow(path, workdir=tmp_path, github={**github, "event_name": "pull_request"}).triggered
    with pytest.raises(WorkflowError, match="no step has the id setpu"):
        run_workflow(path, workdir=tmp_path, github=github, replaced={"setpu"})


def test_the_runner_refuses_what_it_cannot_run(tmp_path: Path) -> None:
    path = tmp_path / "t.yml"
    path.write_text("on: push\njobs:\n  a:\n    strategy: {matrix: {x: [1, 2]}}\n    steps: [{run: 'true'}]\n")
    with pytest.raises(WorkflowError, match=r"t.yml: jobs.a: strategy not supported by this runner"):
        load_workflow(path)
    path.write_text("on: {push: {paths: ['src/**']}}\njobs:\n  a:\n    steps: [{run: 'true'}]\n")
    with pytest.raises(WorkflowError, match=r"on.push: paths not supported"):
        load_workflow(path)
    with pytest.raises(WorkflowError, match=r"the function hashFiles\(\) is not supported"):
        evaluate("hashFiles('x')", {})
    with pytest.raises(WorkflowError, match="unknown context 'matrx'"):
        evaluate("matrx.x", {})
    assert evaluate("fromJSON('[1, 2]')[1] == 2 && contains('Hello', 'ell') && !null", {}) is True
    assert evaluate("startsWith(github.ref, 'refs/HEADS') && 3 > '2'", {"github": {"ref": "refs/heads/x"}}) is True


# -- the acceptance test: a pull request simulated end to end ----------------------------------------------

TRAINING_JOB = """apiVersion: nodus.dev/v1beta1
kind: TrainingJob
metadata: {{name: reverse-smoke}}
spec:
  runtime: nodus/grpo-lora
  model: {{uri: "hf://nodus/tiny-qwen3@{revision}"}}
  environment: {{name: reverse-words@1.0.0, trainTasks: 600, heldOutTasks: 16, seed: 0}}
  evaluation: {{baseline: false, final: false}}
  parameters: {{steps: 2, groupSize: 4, groupsPerStep: 2, maxTokens: 16, saveSteps: 1}}
  maxCostUSD: "1.00"
"""


def git(folder: Path, *args: str) -> str:
    command = ["git", "-c", "user.name=Dev", "-c", "user.email=dev@example.invalid", "-c", "commit.gpgsign=false"]
    result = subprocess.run([*command, *args], cwd=folder, capture_output=True, text=True, check=False)
    assert result.returncode == 0, f"git {' '.join(args)}: {result.stderr}"
    return result.stdout.strip()


class Team:
    """The repository on "GitHub" (where the developer works too), and a runner that runs workflows on clones."""

    def __init__(self, root: Path, *, vars: dict[str, str], secrets: dict[str, str], env: dict[str, str]) -> None:
        self.root, self.vars, self.secrets, self.env = root, vars, secrets, env
        self.origin = root / "origin"
        self.runs = 0

    def commit(self, message: str) -> str:
        git(self.origin, "add", "-A")
        git(self.origin, "commit", "--quiet", "-m", message)
        return git(self.origin, "rev-parse", "HEAD")

    def clone_at(self, sha: str) -> Path:
        """What actions/checkout (fetch-depth 0) leaves: a fresh clone with origin/* refs, at the commit."""
        self.runs += 1
        clone = self.root / "runner" / f"run-{self.runs}"
        git(self.root, "clone", "--quiet", str(self.origin), str(clone))
        git(clone, "checkout", "--quiet", "--detach", sha)
        return clone

    def run(self, name: str, github: dict[str, Any]) -> RunResult:
        github = {"repository": "acme/models", "actor": "dev", **github}
        clone = self.clone_at(str(github["sha"]))
        echo = sys.stderr.write if os.environ.get("NODUS_TEST_ECHO") else None
        result = run_workflow(
            workflow(name),
            workdir=clone,
            github=github,
            vars=self.vars,
            secrets=self.secrets,
            env=self.env,
            replaced={"setup"},
            echo=echo,
        )
        assert result.triggered and set(result.jobs.values()) == {"success"}, result.output
        return result

    def push(self, branch: str, sha: str, before: str) -> RunResult:
        event = {"before": before, "after": sha, "repository": {"default_branch": "main"}}
        github = {"event_name": "push", "ref": f"refs/heads/{branch}", "ref_name": branch, "sha": sha, "event": event}
        return self.run("build", github)

    def developer_builds(self) -> None:
        """`nodus-build` on the developer's machine, then the lock is committed (what the README asks)."""
        flags = shlex.split(self.vars["NODUS_BUILD_ARGS"])
        result = subprocess.run(
            [str(BIN / "nodus-build"), "models", *flags, "--json"],
            cwd=self.origin,
            env={**self.env, "NODUS_HOME": self.vars["NODUS_HOME"]},
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == 0, result.stdout + result.stderr


def built(result: RunResult) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = json.loads(result.step("build").outputs["results"])["results"]
    return rows


@pytest.mark.podman
@pytest.mark.registry
@pytest.mark.slow
def test_a_pull_request_builds_what_changed_comments_its_plan_and_applies_after_the_merge(
    tmp_path: Path, base_reference: str, tiny_model: tuple[str, str], local_registry: str
) -> None:
    from nodus.builder.registry import RegistryRef, resolve_tag
    from nodus.reconciler.state import open_store
    from nodus.reconciler.state.records import ResourceKey
    from nodus.testing.fake_github import FakeGitHub

    cache, revision = tiny_model
    team_state = tmp_path / "team-state.db"  # stands in for the team's PostgreSQL (the NODUS_STATE secret)
    runner_home = tmp_path / "runner-home"  # a self-hosted runner's state folder kept between runs (NODUS_HOME)
    registry = f"{local_registry}/acme/envs"
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "HF_HUB_CACHE": cache,
        "NO_COLOR": "1",
    }
    env.pop("NODUS_STATE", None)
    env.pop("NODUS_HOME", None)
    with FakeGitHub(token="ghs-test") as api:
        team = Team(
            tmp_path,
            vars={
                "NODUS_PROJECT": "models",
                "NODUS_REGISTRY": registry,
                "NODUS_BUILD_ARGS": f"--network none --base {base_reference}",
                "NODUS_HOME": str(runner_home),
                "NODUS_APPLY_ARGS": "--wait --timeout 8m",
            },
            secrets={"GITHUB_TOKEN": api.token, "NODUS_STATE": str(team_state)},
            env=env,
        )
        origin = team.origin
        project = origin / "models"
        shutil.copytree(REPO / "catalog" / "arithmetic", project / "arithmetic", ignore=shutil.ignore_patterns("tests"))
        (project / "reverse-words").mkdir()
        for name in ("environment.yaml", "env/reverse_words.py"):
            (project / "reverse-words" / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(REPO / "examples" / "quickstart" / name, project / "reverse-words" / name)
        (project / "nodus.lock").write_text("lockfileVersion: 1\nenvironments: {}\n")
        shutil.copytree(WORKFLOW_DIR, origin / ".github" / "workflows")
        (origin / ".ci").mkdir()
        shutil.copy2(REPO / ".ci" / "system-packages", origin / ".ci" / "system-packages")
        (origin / ".gitignore").write_text(".nodus/\n")
        git(tmp_path, "init", "--quiet", "-b", "main", str(origin))
        first = team.commit("Two environments")

        # main's first push builds both Environments and pushes them; the developer commits the lock.
        pushed = team.push("main", first, before=ZERO)
        rows = built(pushed)
        assert sorted((row["name"], row["status"]) for row in rows) == [
            ("arithmetic", "built"),
            ("reverse-words", "built"),
        ]
        for row in rows:
            assert row["pushed"] == f"{registry}@{row['image']}"
            assert resolve_tag(RegistryRef.parse(registry), row["tag"]) == row["image"]
        team.developer_builds()
        locked = team.commit("nodus.lock: the images")
        assert built(team.push("main", locked, before=first)) == []  # only the lock changed: nothing to build
        applied = team.run("apply", {"event_name": "push", "ref": "refs/heads/main", "sha": locked})
        assert "Apply complete:" in applied.step("apply").output and " 0 launched" in applied.step("apply").output

        # The branch: arithmetic's source changes (a new version), and a TrainingJob on reverse-words is added.
        git(origin, "checkout", "--quiet", "-b", "feature")
        source = project / "arithmetic" / "arithmetic_env.py"
        source.write_text(source.read_text() + "\n# 2.1.0: the same tasks, rebuilt from a changed source.\n")
        spec = project / "arithmetic" / "environment.yaml"
        spec.write_text(spec.read_text().replace("version: 2.0.0", "version: 2.1.0"))
        (project / "trainingjob.yaml").write_text(TRAINING_JOB.format(revision=revision))
        change = team.commit("arithmetic 2.1.0 and a GRPO run")
        rows = built(team.push("feature", change, before=ZERO))  # a new branch: compared with where it left main
        assert [(row["name"], row["version"], row["status"]) for row in rows] == [("arithmetic", "2.1.0", "built")]
        # The catalog's copy keeps `project: nodus`, so its tag names the project.
        assert rows[0]["tag"] == "env-nodus.arithmetic-2.1.0"
        assert resolve_tag(RegistryRef.parse(registry), rows[0]["tag"]) == rows[0]["image"]
        team.developer_builds()
        head = team.commit("nodus.lock: arithmetic 2.1.0")
        assert built(team.push("feature", head, before=change)) == []

        # The pull request: one plan comment, created, then updated in place by the next run.
        pull = {
            "event_name": "pull_request",
            "ref": "refs/pull/7/merge",
            "base_ref": "main",
            "head_ref": "feature",
            "sha": head,
            "api_url": api.url,
            "event": {"number": 7, "pull_request": {"number": 7}},
        }
        api.add_comment("acme/models", 7, "Looks good to me")
        first_plan = team.run("plan", pull).step("plan")
        assert "created comment" in first_plan.output, first_plan.output
        second_plan = team.run("plan", pull).step("plan")
        assert "updated comment" in second_plan.output, second_plan.output
        comments = api.comments[("acme/models", 7)]
        ours = [c for c in comments if c["user"]["login"] == api.bot]
        assert len(comments) == 2 and len(ours) == 1, comments
        body = ours[0]["body"]
        assert body.startswith("<!-- nodus-plan -->\n") and "nodus plan" in body
        assert "reverse-smoke" in body and "arithmetic" in body, body
        assert [method for method, _ in api.requests if method != "GET"] == ["POST", "PATCH"]

        # What the plan would start: the TrainingJobs it creates (the same plan, as JSON, from the same commit).
        clone = team.clone_at(head)
        planned = subprocess.run(
            [str(BIN / "nodus"), "plan", "models", "-o", "json"],
            cwd=clone,
            env={**env, "NODUS_STATE": str(team_state), "NODUS_HOME": str(runner_home)},
            capture_output=True,
            text=True,
            check=False,
        )
        assert planned.returncode == 2, planned.stdout + planned.stderr
        actions = json.loads(planned.stdout)["actions"]
        jobs = {a["ref"] for a in actions if a["kind"] == "TrainingJob" and a["action"] in ("create", "replace")}
        assert jobs == {"TrainingJob/reverse-smoke"}
        assert any(a["ref"] == "Environment/nodus/arithmetic" and a["action"] != "noop" for a in actions), actions

        # The merge, then the apply workflow on main: exactly the planned job starts (and finishes).
        git(origin, "checkout", "--quiet", "main")
        git(origin, "merge", "--quiet", "--no-ff", "feature", "-m", "Merge pull request #7")
        merged = git(origin, "rev-parse", "HEAD")
        applied = team.run("apply", {"event_name": "push", "ref": "refs/heads/main", "sha": merged})
        output = applied.step("apply").output
        assert "1 launched" in output and "TrainingJob/reverse-smoke: launched" in output, output
        assert "TrainingJob/reverse-smoke: Succeeded" in output, output
        assert "reverse-smoke" in applied.step("What is running").output

        store = open_store(str(team_state), project_state_dir=runner_home)
        try:
            started = {str(r.key) for r in store.list("TrainingJob") if store.launches(r.key)}
            assert started == jobs
            assert len(store.launches(ResourceKey("TrainingJob", "default", "reverse-smoke"))) == 1
            arithmetic = store.get(ResourceKey("Environment", "nodus", "arithmetic"))
            assert arithmetic is not None and arithmetic.spec["spec"]["version"] == "2.1.0"
            assert arithmetic.status["phase"] == "Ready"
        finally:
            store.close()

        # Run again (a re-run of the workflow): nothing starts twice.
        again = team.run("apply", {"event_name": "push", "ref": "refs/heads/main", "sha": merged})
        assert " 0 launched" in again.step("apply").output, again.step("apply").output
