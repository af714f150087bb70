"""Fixtures for the SDK's tests (`nodus.recipes`): a project folder, a fake Hugging Face cache, a catalog of
managed runtimes of our own, and reward files written and imported on the spot.

Who uses it: the tests in this folder (pytest runs with --import-mode=importlib, so helpers come as fixtures).
Nothing here needs podman or a network: builds are never reached (admission or the checks stop first, or the
job has no Environment), and the only process started is a supervisor running `python -c`, which ends by itself.
"""

from __future__ import annotations

import importlib.util
import itertools
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest

COMMIT = "c1899de289a04d12100db370d81485cdf75e47ca"
_counter = itertools.count()

GRPO_RUNTIME = """apiVersion: nodus.dev/v1beta1
kind: TrainingRuntime
metadata: {name: grpo-lora, project: nodus}
spec:
  command: [python, -m, nodus.runtimes.grpo_lora]
  tasks: [GRPO]
  environmentTasks: AttemptAPI
  managed: true
  parameterSchema:
    type: object
    additionalProperties: false
    properties:
      steps: {type: integer, minimum: 1}
      learningRate: {type: number}
      groupSize: {type: integer}
      groupsPerStep: {type: integer}
      maxTokens: {type: integer}
      temperature: {type: number}
      lora:
        type: object
        properties:
          r: {type: integer}
          alpha: {type: integer}
          dropout: {type: number}
          targetModules: {}
"""
EVALUATE_RUNTIME = """apiVersion: nodus.dev/v1beta1
kind: TrainingRuntime
metadata: {{name: evaluate, project: nodus}}
spec:
  command: [{python}, -c, "print('evaluated')"]
  tasks: [Evaluate]
  modes: [Evaluate]
  environmentTasks: AttemptAPI
  managed: true
"""


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], str]:
    """A Hugging Face cache of our own (HF_HUB_CACHE); `add("org/name")` caches a model, returns its commit."""
    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))

    def add(repository: str, commit: str = COMMIT) -> str:
        folder = cache / f"models--{repository.replace('/', '--')}"
        (folder / "snapshots" / commit).mkdir(parents=True)
        (folder / "snapshots" / commit / "config.json").write_text('{"model_type": "qwen3"}')
        (folder / "refs").mkdir()
        (folder / "refs" / "main").write_text(commit + "\n")
        return commit

    return add


@pytest.fixture
def runtimes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty catalog of managed runtimes (NODUS_RUNTIMES_DIR); tests add the ones they need."""
    folder = tmp_path / "runtimes"
    folder.mkdir()
    monkeypatch.setenv("NODUS_RUNTIMES_DIR", str(folder))
    return folder


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hub: Callable[[str], str], runtimes: Path) -> Path:
    """A nodus project (a folder with nodus.lock) as the current folder, with the tiny model cached."""
    root = tmp_path / "project"
    root.mkdir()
    (root / "nodus.lock").write_text("")
    monkeypatch.chdir(root)
    monkeypatch.delenv("NODUS_STATE", raising=False)
    monkeypatch.delenv("NODUS_HOME", raising=False)
    hub("nodus/tiny-qwen3")
    return root


@pytest.fixture
def reward_file(tmp_path: Path) -> Iterator[Callable[[str], ModuleType]]:
    """`load(source)`: write `source` as a module file of its own and import it (removed from sys.modules after)."""
    folder = tmp_path / "rewards"
    folder.mkdir()
    names: list[str] = []

    def load(source: str) -> ModuleType:
        name = f"reward_module_{next(_counter)}"
        path = folder / f"{name}.py"
        path.write_text(textwrap.dedent(source).lstrip("\n"))
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        names.append(name)
        spec.loader.exec_module(module)
        return module

    yield load
    for name in names:
        sys.modules.pop(name, None)


@pytest.fixture
def grpo_runtime(runtimes: Path) -> Path:
    """`nodus/grpo-lora` in the managed catalog: a schema of its own, a command never started by these tests."""
    path = runtimes / "grpo-lora.yaml"
    path.write_text(GRPO_RUNTIME)
    return path


@pytest.fixture
def evaluate_runtime(runtimes: Path) -> Path:
    """`nodus/evaluate` in the managed catalog, whose trainer is `python -c print(...)`: a run ends in a second."""
    path = runtimes / "evaluate.yaml"
    path.write_text(EVALUATE_RUNTIME.format(python=sys.executable))
    return path
