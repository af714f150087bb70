"""Reinforcement learning and evaluation on catalog Environments or your own.

Who calls it: users (`from nodus.recipes import rl`) and `python -m nodus.examples.rl`. From a task list and a
reward function to a training run in one call:

    def reward(completion, answer):
        return 1.0 if answer in completion else 0.0

    run = rl.train([("Spell 'cat' backwards.", "tac"), ...], reward, max_cost=2)   # model= picks another
    run.watch()                                  # each stage, then reward, loss and KL per step
    run.outputs.download("./outputs")            # the LoRA adapter and the before/after comparison

`train` packages the reward with the statements of its file it uses as an Environment in your project
(`nodus.recipes.environment`), checks it on this machine (`nodus.recipes.precheck`), then applies a
`nodus/grpo-lora` TrainingJob on it (`nodus.recipes.jobs`) through the functions `nodus apply --build` uses.
`rl.train("nodus/gsm8k@1.0.0")` trains on an Environment that is already there. `grpo_lora` sets every GRPO
parameter yourself and previews the job before it runs; `evaluate` scores a model without training it.

Every recipe takes `project=` (the project the resources go to; default `default`) and `options=`
(`rl.Options`: the project folder, the state store, and the build's `base` image, also NODUS_BUILD_BASE).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from nodus.errors import ConfigError
from nodus.recipes.apply import Options
from nodus.recipes.environment import PackagedEnvironment, package
from nodus.recipes.jobs import (
    DEFAULT_HELD_OUT,
    DEFAULT_TRAIN_TASKS,
    EVALUATE,
    GRPO_LORA,
    LoRA,
    Preview,
    RecipeJob,
    dns_label,
    environment_reference,
    environment_splits,
    parameters,
)
from nodus.recipes.models import DEFAULT_MODEL, TINY_MODEL, model_source
from nodus.recipes.precheck import precheck
from nodus.recipes.runs import Record, Run
from nodus.reconciler.state.records import DEFAULT_PROJECT

__all__ = [
    "DEFAULT_MODEL",
    "TINY_MODEL",
    "LoRA",
    "Options",
    "Preview",
    "RecipeJob",
    "Record",
    "Run",
    "evaluate",
    "grpo_lora",
    "train",
]

_GRPO_ARGUMENTS = ("train_tasks", "held_out", "seed", "task_filter", "min_comparison_tasks")
"""Keywords of `train` that go to `grpo_lora` as they are, not into the trainer's parameters."""


def train(
    tasks: Iterable[Any] | str,
    reward: Callable[..., Any] | None = None,
    *,
    model: Any = None,
    steps: int = 50,
    max_cost: Any = None,
    group_size: int = 8,
    groups_per_step: int = 4,
    max_tokens: int = 256,
    learning_rate: float = 4e-5,
    lora: LoRA | None = None,
    test_tasks: Iterable[Any] | None = None,
    pip: Sequence[str] = (),
    project: str | None = None,
    gpu: Any = None,
    options: Options | None = None,
    **params: Any,
) -> Run:
    """GRPO with LoRA on your tasks and reward (or on an Environment named `name@version`); the run's handle.

    Each step samples `group_size` replies to each of `groups_per_step` tasks and scores every reply against
    the others in its group. A fifth of the tasks, and at least 16, is held out (or `test_tasks`) and graded
    before and after training. Nothing is built or run until the reward has passed the check on this machine.
    """
    options = options or Options()
    namespace = dns_label(project or DEFAULT_PROJECT, "project")
    grpo = {name: params.pop(name) for name in _GRPO_ARGUMENTS if name in params}
    learning = {
        "group_size": group_size,
        "groups_per_step": groups_per_step,
        "max_tokens": max_tokens,
        "learning_rate": learning_rate,
        **params,
    }
    if isinstance(tasks, str):
        if reward is not None or test_tasks is not None or pip:
            raise ConfigError(
                f"rl.train({tasks!r}) trains on that Environment's own tasks and grader: pass no reward, "
                "test_tasks or pip"
            )
        job = grpo_lora(
            model=model,
            environment=tasks,
            steps=steps,
            lora=lora,
            project=namespace,
            options=options,
            **grpo,
            **learning,
        )
        return job.run(gpu=gpu, max_cost=max_cost)
    if reward is None:
        raise ConfigError("rl.train(tasks, reward): the reward function is missing")
    source = model_source(model)  # before anything is written: a model that is not cached stops here
    packaged = package(tasks, reward, store=options.project().files, project=namespace, test_tasks=test_tasks, pip=pip)
    precheck(packaged)
    grpo.setdefault("train_tasks", len(packaged.split.train))
    grpo.setdefault("held_out", len(packaged.split.test))
    job = _grpo_lora(
        model=source,
        environment=packaged.reference,
        steps=steps,
        lora=lora,
        project=namespace,
        options=options,
        packaged=packaged,
        **grpo,
        **learning,
    )
    return job.run(gpu=gpu, max_cost=max_cost)


def grpo_lora(
    *,
    model: Any,
    environment: str,
    steps: int = 50,
    train_tasks: int | None = None,
    held_out: int | None = None,
    seed: int = 0,
    lora: LoRA | None = None,
    task_filter: Mapping[str, str] | None = None,
    min_comparison_tasks: int = 16,
    project: str | None = None,
    options: Options | None = None,
    **params: Any,
) -> RecipeJob:
    """GRPO with a LoRA adapter (`nodus/grpo-lora`): baseline, train, then the final eval on the same held-out
    tasks. `train_tasks` and `held_out` default to 256 and 64, or the Environment's split sizes when smaller."""
    return _grpo_lora(
        model=model_source(model),
        environment=environment_reference(environment),
        steps=steps,
        train_tasks=train_tasks,
        held_out=held_out,
        seed=seed,
        lora=lora,
        task_filter=task_filter,
        min_comparison_tasks=min_comparison_tasks,
        project=project,
        options=options,
        **params,
    )


def _grpo_lora(
    *,
    model: dict[str, Any],
    environment: str,
    steps: int,
    train_tasks: int | None = None,
    held_out: int | None = None,
    seed: int = 0,
    lora: LoRA | None,
    task_filter: Mapping[str, str] | None = None,
    min_comparison_tasks: int = 16,
    project: str | None,
    options: Options | None,
    packaged: PackagedEnvironment | None = None,
    **params: Any,
) -> RecipeJob:
    options = options or Options()
    namespace = dns_label(project or DEFAULT_PROJECT, "project")
    if train_tasks is None or held_out is None:
        splits = environment_splits(options, environment, namespace)
        if train_tasks is None and "train" in splits:
            train_tasks = min(DEFAULT_TRAIN_TASKS, splits["train"])
        if held_out is None and "test" in splits:
            held_out = min(DEFAULT_HELD_OUT, splits["test"])
    tasks: dict[str, Any] = {"name": environment, "trainTasks": train_tasks, "heldOutTasks": held_out, "seed": seed}
    if task_filter:
        tasks["taskFilter"] = dict(task_filter)
    spec = {
        "runtime": GRPO_LORA,
        "model": model,
        "environment": {key: value for key, value in tasks.items() if value is not None},
        "evaluation": {"baseline": True, "final": True, "minComparisonTasks": min_comparison_tasks},
        "parameters": parameters(params, steps=steps, lora=lora),
    }
    hint = packaged.extracted.function if packaged is not None else _short_name(environment)
    return RecipeJob(spec, namespace, hint, options, packaged)


def evaluate(
    *,
    model: Any,
    environment: str | None = None,
    tasks: Iterable[str] | None = None,
    held_out: int = 64,
    seed: int = 0,
    task_filter: Mapping[str, str] | None = None,
    project: str | None = None,
    options: Options | None = None,
    **params: Any,
) -> RecipeJob:
    """`mode: Evaluate` on `nodus/evaluate`: an Environment's held-out tasks, or benchmark `tasks` such as arc_easy."""
    if environment is None and not tasks:
        raise ConfigError("rl.evaluate needs environment= (name@version) or tasks= (benchmark names)")
    if isinstance(tasks, str):
        raise ConfigError(f"tasks= is a list of benchmark names, such as [{tasks!r}]")
    spec: dict[str, Any] = {"runtime": EVALUATE, "mode": "Evaluate", "model": model_source(model)}
    if environment is not None:
        chosen: dict[str, Any] = {"name": environment_reference(environment), "heldOutTasks": held_out, "seed": seed}
        if task_filter:
            chosen["taskFilter"] = dict(task_filter)
        spec["environment"] = chosen
    if tasks:
        spec["evaluation"] = {"tasks": [str(task) for task in tasks]}
    spec["parameters"] = parameters(params)
    namespace = dns_label(project or DEFAULT_PROJECT, "project")
    hint = "eval-" + (_short_name(environment) if environment else "benchmarks")
    return RecipeJob(spec, namespace, hint, options or Options())


def _short_name(environment: str) -> str:
    """`nodus/gsm8k@1.0.0` -> `gsm8k` (the start of a run's name)."""
    return environment.partition("@")[0].rpartition("/")[2]
