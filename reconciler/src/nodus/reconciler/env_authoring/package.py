"""A local Environment package folder: its spec, running `nodus-env` on it, and the contract checks.

Who uses it: `nodus env test` and `nodus env describe` (nodus.cli.env), and tests. It never imports the
environment: every check runs `python -m nodus.env` in a fresh process, as the grading service would, so
"deterministic" means byte-identical output from two separate processes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodus.errors import ConfigError
from nodus.specs import Environment, parse_resources

SPEC_NAMES = ("environment.yaml", "environment.yml")
FIXTURES = "fixtures.jsonl"
REQUIRED_CASES = ("full-reward", "zero-reward", "malformed")
SPLITS = ("train", "test")


@dataclass(frozen=True)
class EnvPackage:
    """An Environment spec with a local `package.path`, resolved to absolute paths."""

    spec_file: Path
    resource: Environment
    package_path: Path
    loader: str

    @property
    def name(self) -> str:
        return self.resource.metadata.name

    @property
    def version(self) -> str:
        return self.resource.spec.version

    @property
    def fixtures(self) -> Path | None:
        found = self.spec_file.parent / FIXTURES
        return found if found.is_file() else None

    @classmethod
    def open(cls, path: str | Path) -> EnvPackage:
        """From a folder holding environment.yaml, or the spec file itself."""
        given = Path(path)
        spec_file = next((given / n for n in SPEC_NAMES if (given / n).is_file()), given) if given.is_dir() else given
        if not spec_file.is_file():
            raise ConfigError(f"{given}: no environment.yaml here", hint="create one with `nodus env init NAME`")
        result = parse_resources([spec_file])
        result.raise_for_errors()
        environments = [p.resource for p in result.resources if isinstance(p.resource, Environment)]
        if len(environments) != 1:
            raise ConfigError(f"{spec_file}: expected exactly one Environment, found {len(environments)}")
        env = environments[0]
        if env.spec.package.path is None:
            raise ConfigError(
                f"{spec_file}: Environment/{env.metadata.name}: spec.package: only a local path package can be "
                "tested in place",
                hint="pip and image packages are checked by nodus-build when it builds them",
            )
        package_path = (spec_file.parent / env.spec.package.path).resolve()
        if not package_path.is_dir():
            raise ConfigError(
                f"{spec_file}: Environment/{env.metadata.name}: spec.package.path: no folder {package_path}"
            )
        return cls(spec_file.resolve(), env, package_path, env.spec.package.loader)

    def variables(self) -> dict[str, str]:
        """The NODUS_* variables that make `nodus-env` find this package."""
        return {
            "NODUS_ENVIRONMENT_PATH": str(self.package_path),
            "NODUS_ENVIRONMENT_LOADER": self.loader,
            "NODUS_ENVIRONMENT": self.name,
            "NODUS_ENVIRONMENT_VERSION": self.version,
            "NODUS_GRADING_TIMEOUT": str(self.resource.spec.grading.timeout.total_seconds()),
            # Grading never has network; neither do these checks.
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
        }

    def run(self, *args: str, stdin: str | None = None, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        """`python -m nodus.env ARGS` for this package in a fresh process."""
        env = {**os.environ, **self.variables(), "PYTHONHASHSEED": "random"}
        env.pop("NODUS_GRADER_UID", None)
        return subprocess.run(
            [sys.executable, "-m", "nodus.env", *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
            check=False,
        )

    def run_many(
        self, commands: list[tuple[str, ...]], stdin: str | None = None
    ) -> list[subprocess.CompletedProcess[str]]:
        """Several `run`s at once (separate processes), results in the order of `commands`."""
        with ThreadPoolExecutor(max_workers=len(commands)) as pool:
            return list(pool.map(lambda args: self.run(*args, stdin=stdin), commands))

    def info(self) -> dict[str, Any]:
        result = self.run("info")
        if result.returncode != 0:
            raise ConfigError(f"{self.spec_file}: nodus-env info failed: {_last_line(result.stderr)}")
        return dict(json.loads(result.stdout))


@dataclass
class Check:
    """One line of `nodus env test`."""

    name: str
    ok: bool
    detail: str = ""


@dataclass
class CheckReport:
    package: EnvPackage
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(c.ok for c in self.checks)


def check_package(
    package: EnvPackage, *, gold: int = 20, seed: int = 0, on_check: Callable[[Check], None] | None = None
) -> CheckReport:
    """The contract checks, each in fresh processes: load, determinism, disjoint splits, gold answers, an
    empty reply, the fixture cases (full-reward, zero-reward, malformed) and deterministic grading."""
    report = CheckReport(package)

    def add(check: Check) -> None:
        report.checks.append(check)
        if on_check:
            on_check(check)

    info = package.run("info")
    if info.returncode != 0:
        add(Check("the environment loads", False, _last_line(info.stderr)))
        return report
    splits = json.loads(info.stdout)["splits"]
    add(Check("the environment loads", all(splits.values()), f"train {splits['train']}, test {splits['test']} tasks"))
    prompts: dict[str, set[str]] = {}
    # The four task listings (two processes per split) are independent: run them side by side.
    listings = package.run_many([("tasks", "--split", split, "--seed", str(seed)) for split in SPLITS for _ in (1, 2)])
    for index, split in enumerate(SPLITS):
        first, second = listings[2 * index], listings[2 * index + 1]
        same = first.returncode == 0 and first.stdout == second.stdout
        add(
            Check(
                f"{split} tasks are byte-identical in two processes", same, _last_line(first.stderr) if not same else ""
            )
        )
        rows = [json.loads(line) for line in first.stdout.splitlines()] if first.returncode == 0 else []
        prompts[split] = {json.dumps(r["prompt"], sort_keys=True) for r in rows}
        leaked = [r["taskId"] for r in rows if set(r) != {"taskId", "prompt", "metadata"}]
        add(Check(f"{split} tasks carry only taskId, prompt and metadata", not leaked, ", ".join(leaked[:3])))
    shared = prompts["train"] & prompts["test"]
    add(Check("train and test share no prompt", not shared, f"{len(shared)} shared" if shared else ""))
    _selfcheck(package, gold, add)
    return report


def _selfcheck(package: EnvPackage, gold: int, add: Callable[[Check], None]) -> None:
    args = ["selfcheck", "--gold", str(gold)]
    cases: list[dict[str, Any]] = []
    lines_of_cases: list[int] = []
    if package.fixtures is not None:
        args += ["--fixtures", str(package.fixtures)]
        numbered = [(n, text) for n, text in enumerate(package.fixtures.read_text().splitlines(), 1) if text.strip()]
        cases = [json.loads(text) for _, text in numbered]
        lines_of_cases = [n for n, _ in numbered]
    result = package.run(*args)
    if result.returncode not in (0, 1) or not result.stdout.strip():
        add(Check("self-check runs", False, _last_line(result.stderr)))
        return
    checks = json.loads(result.stdout)["checks"]
    for item in checks:
        detail = "" if item["ok"] else json.dumps(item.get("detail"))[:200]
        fixture = _fixture_number(item["check"])
        if not item["ok"] and package.fixtures is not None and fixture is not None and fixture <= len(cases):
            detail = _fixture_detail(package.fixtures, lines_of_cases[fixture - 1], cases[fixture - 1], item)
        add(Check(f"{item.get('split', '')} {item['check']}".strip(), bool(item["ok"]), detail))
    kinds = {c.get("case") for c in cases}
    missing = [k for k in REQUIRED_CASES if k not in kinds]
    malformed_ok = all(c.get("verdict") == "InvalidOutput" for c in cases if c.get("case") == "malformed")
    add(
        Check(
            "fixture cases: full-reward, zero-reward and malformed (InvalidOutput)",
            package.fixtures is not None and not missing and malformed_ok,
            f"missing {', '.join(missing)}"
            if missing
            else ("" if malformed_ok else "a malformed case must be InvalidOutput"),
        )
    )
    lines = [
        json.dumps({"taskId": item["taskId"], "completion": case.get("completion", "")})
        for item, case in zip((c for c in checks if c["check"].startswith("fixture")), cases, strict=False)
        if "taskId" in item
    ]
    if lines:
        stdin = "\n".join(lines) + "\n"
        # One after the other: completion code runs as NODUS_RUNNER_UID, whose processes are all killed after
        # each run, so two graders sharing that uid at once would kill each other's runners.
        runs = [package.run("grade", stdin=stdin) for _ in range(2)]
        verdicts = [[(v["verdict"], v["reward"]) for v in map(json.loads, r.stdout.splitlines())] for r in runs]
        add(
            Check(
                "grading is deterministic across two fresh processes",
                verdicts[0] == verdicts[1] and len(verdicts[0]) == len(lines),
                "",
            )
        )


def _fixture_number(check: str) -> int | None:
    """`fixture 2 (zero-reward)` -> 2 (the selfcheck numbers the cases from 1, in file order); None otherwise."""
    words = check.split(" ")
    return int(words[1]) if len(words) > 1 and words[0] == "fixture" and words[1].isdigit() else None


def _fixture_detail(fixtures: Path, line: int, case: dict[str, Any], item: dict[str, Any]) -> str:
    """What failed in a fixture case, where it is, and what to edit: the scaffold's cases fit the scaffold's
    task, so a rewritten task fails them until its fixture cases are rewritten too."""
    detail = item.get("detail") or {}
    where = f"{case.get('split')}[{case.get('index')}]"
    if isinstance(detail, dict) and "expected" in detail:
        verdict, reward = [*(detail.get("got") or []), None, None][:2]
        wanted, wanted_reward = [*(detail.get("expected") or []), None, None][:2]
        found = f"expected {wanted} ({wanted_reward}), got {verdict} ({reward}) for task {where}"
    else:
        found = str(detail)
    return (
        f"{fixtures}:{line}: case {case.get('case', 'unnamed')}: {found}; edit this line of {fixtures.name} so its "
        f"completion (and verdict, reward) fits your task at {where}"
    )


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no output"
