"""The TrainingJobs recipes write: GRPO with LoRA (`nodus/grpo-lora`) and evaluation (`nodus/evaluate`).

Who calls it: `nodus.recipes.rl` builds a `RecipeJob` from its arguments; users call `.preview()` (the compiled
TrainingJob document, the plan, the reasons it would be refused) and `.run()` (apply it, get a `Run`). The
document is what a person would write in a file (`spec.parameters` in camelCase, `maxCostUSD` a decimal
string) and is read back through `nodus.specs` like one, so it is validated exactly as `nodus apply` would.
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import yaml

from nodus.errors import ConfigError, SpecError
from nodus.recipes.apply import (
    Options,
    apply_desired,
    desired_from_file,
    desired_of,
    ensure_built,
    preview,
    with_runtimes,
)
from nodus.recipes.environment import PackagedEnvironment
from nodus.recipes.runs import Run, camel
from nodus.reconciler.controllers.coverage import stored_only_notes
from nodus.reconciler.planning.desired import Desired
from nodus.reconciler.planning.diff import CREATED_BY, SDK, Plan
from nodus.reconciler.planning.render import render_table
from nodus.reconciler.references import environment_ref
from nodus.reconciler.state.records import DEFAULT_PROJECT, ResourceKey, spec_hash
from nodus.specs.types import format_usd

API_VERSION = "nodus.dev/v1beta1"
GRPO_LORA = "nodus/grpo-lora"
EVALUATE = "nodus/evaluate"
DEFAULT_TRAIN_TASKS = 256
DEFAULT_HELD_OUT = 64
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_ENVIRONMENT = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?/)?[a-z0-9]([-a-z0-9]*[a-z0-9])?@\d+\.\d+\.\d+\S*$")
_GPU = re.compile(r"^[a-z0-9][a-z0-9-]*$")


@dataclass(frozen=True)
class LoRA:
    """The LoRA adapter GRPO trains (`spec.parameters.lora`); the runtime's defaults when left out."""

    r: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: str | Sequence[str] = "all-linear"
    """`all-linear`, or the names of the modules to adapt (e.g. `["q_proj", "v_proj"]`)."""

    def to_json(self) -> dict[str, Any]:
        modules = self.target_modules if isinstance(self.target_modules, str) else list(self.target_modules)
        return {"r": self.r, "alpha": self.alpha, "dropout": self.dropout, "targetModules": modules}


def dns_label(value: Any, what: str) -> str:
    if not isinstance(value, str) or not _LABEL.match(value):
        raise ConfigError(f"{what}={value!r} must be a DNS label: a-z, 0-9 and '-', at most 63 characters")
    return value


def environment_reference(value: Any) -> str:
    if not isinstance(value, str) or not _ENVIRONMENT.match(value):
        raise ConfigError(f"environment={value!r} is not [project/]name@version, such as nodus/gsm8k@1.0.0")
    return value


def max_cost_usd(value: Any) -> str | None:
    """`max_cost=` as the spec writes money: a decimal string of US dollars ("2.00")."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | str | Decimal):
        raise ConfigError(f"max_cost={value!r} must be an amount of US dollars such as 2 or '2.50'")
    try:
        amount = Decimal(str(value).strip())
    except InvalidOperation:
        raise ConfigError(f"max_cost={value!r} must be an amount of US dollars such as 2 or '2.50'") from None
    exponent = amount.as_tuple().exponent
    if not amount.is_finite() or amount < 0 or (isinstance(exponent, int) and exponent < -6):
        raise ConfigError(f"max_cost={value!r} must be a finite, non-negative amount with at most 6 decimals")
    return format_usd(amount)


def gpu_resources(gpu: Any) -> dict[str, Any] | None:
    """`resources` for `gpu=` ("rtx4090-24g", or a list of types any of which will do)."""
    if gpu is None:
        return None
    types = [gpu] if isinstance(gpu, str) else list(gpu)
    chosen = [str(item).strip().lower() for item in types]
    for item in chosen:
        if not _GPU.match(item):
            raise ConfigError(f"gpu={gpu!r}: {item!r} is not a GPU type such as rtx4090-24g or h100-sxm-80g")
    if not chosen:
        raise ConfigError("gpu= names no GPU type")
    return {"gpu": {"type": chosen, "count": 1}}


def parameters(params: Mapping[str, Any], *, steps: int | None = None, lora: LoRA | None = None) -> dict[str, Any]:
    """`spec.parameters`: the named ones, then every other keyword camelCased (`top_p` -> `topP`)."""
    out: dict[str, Any] = {}
    if steps is not None:
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ConfigError(f"steps={steps!r} must be a whole number of at least 1")
        out["steps"] = steps
    if lora is not None:
        if not isinstance(lora, LoRA):
            raise ConfigError(f"lora= must be rl.LoRA(r=..., alpha=...), not {type(lora).__name__}")
        out["lora"] = lora.to_json()
    for name, value in params.items():
        if value is not None:
            out[camel(name)] = value
    return out


def run_name(hint: str) -> str:
    """A fresh TrainingJob name: the hint, the time and a few random digits (two runs a second differ)."""
    stem = re.sub(r"[^a-z0-9-]+", "-", hint.lower()).strip("-")[:36].strip("-") or "run"
    return f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


@dataclass
class RecipeJob:
    """A TrainingJob a recipe compiled, not applied yet: `.preview()` shows it, `.run()` applies it."""

    spec: dict[str, Any]
    """`spec` without the cap and resources, which `.run()` and `.preview()` add."""
    project: str = DEFAULT_PROJECT
    name_hint: str = "run"
    options: Options = field(default_factory=Options)
    packaged: PackagedEnvironment | None = None
    """An Environment the recipe packaged, applied (and built) with the job."""

    def document(self, name: str, *, gpu: Any = None, max_cost: Any = None) -> dict[str, Any]:
        spec = dict(self.spec)
        resources = gpu_resources(gpu)
        if resources is not None:
            spec["resources"] = resources
        cost = max_cost_usd(max_cost)
        if cost is not None:
            spec["maxCostUSD"] = cost
        return {
            "apiVersion": API_VERSION,
            "kind": "TrainingJob",
            "metadata": {
                "name": dns_label(name, "idempotency_key"),
                "project": self.project,
                "labels": {CREATED_BY: SDK},
            },
            "spec": spec,
        }

    def _desired(self, document: dict[str, Any], file: Path) -> list[Desired]:
        """The packaged Environment (if any), the TrainingJob, and the managed runtime it names."""
        found = desired_from_file(self.packaged.spec_file) if self.packaged is not None else []
        return with_runtimes([*found, *desired_of(_yaml(document), file)])

    def _job_file(self, name: str) -> Path:
        return self.options.project().files.root / "rl" / "jobs" / self.project / f"{name}.yaml"

    def preview(self, gpu: Any = None, max_cost: Any = None, idempotency_key: str | None = None) -> Preview:
        """The compiled TrainingJob, the plan and why it would be refused (nothing is written)."""
        name = idempotency_key or run_name(self.name_hint)
        document = self.document(name, gpu=gpu, max_cost=max_cost)
        desired = self._desired(document, self._job_file(name))
        planned, blocking = preview(self.options.project(), desired)
        job = next(item for item in desired if item.key.kind == "TrainingJob")
        return Preview(self, job.document, planned, blocking, spec_hash(job.document), name, gpu, max_cost)

    def run(self, gpu: Any = None, max_cost: Any = None, idempotency_key: str | None = None) -> Run:
        """Apply the TrainingJob (building a packaged Environment first when needed) and return its run.

        The idempotency key names the TrainingJob: a second `.run` with the same key returns the same run."""
        name = idempotency_key or run_name(self.name_hint)
        document = self.document(name, gpu=gpu, max_cost=max_cost)
        project = self.options.project()
        file = self._job_file(name)
        desired = self._desired(document, file)
        _, refused = preview(project, desired)
        if refused:  # before a build: a job that would be refused costs nothing, not minutes of building
            raise SpecError(refused, hint="nothing was applied; fix the recipe's arguments and run again")
        if self.packaged is not None:
            packaged = self.packaged
            ensure_built(
                project, packaged.spec_file, packaged.name, packaged.version, self.options, namespace=packaged.project
            )
        key = ResourceKey("TrainingJob", self.project, name)

        def same_run_only(planned: Plan) -> None:
            for action in planned.actions:
                if action.key == key and action.type not in ("create", "noop"):
                    raise ConfigError(
                        f"idempotency_key {name!r} already names TrainingJob/{name} with other settings",
                        hint="a key stands for one run: use a new key for a changed run",
                    )

        apply_desired(
            project,
            desired,
            self.options,
            operation=f"recipe run {name}",
            check=same_run_only if idempotency_key else None,
        )
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(_yaml(document), encoding="utf-8")  # what was applied, for `nodus apply` or a diff
        return Run(name, self.project, self.options)


@dataclass(frozen=True)
class Preview:
    """What `.run()` would do: the TrainingJob document, the plan, the blocking reasons and an ETag."""

    job: RecipeJob
    document: dict[str, Any]
    plan: Plan
    blocking: list[str]
    """Why admission would refuse the TrainingJob (empty: it would be admitted)."""
    etag: str
    """The hash of the document: the same settings always give the same ETag."""
    name: str
    gpu: Any = None
    max_cost: Any = None
    estimate: dict[str, Any] | None = None
    """Cost and duration to completion: not estimated yet (None)."""

    def __str__(self) -> str:
        lines = [render_table(self.plan, stored_only=stored_only_notes(self.plan)).rstrip("\n")]
        lines += [f"blocked: {reason}" for reason in self.blocking]
        return "\n".join(lines)

    def run(self, gpu: Any = None, max_cost: Any = None, idempotency_key: str | None = None) -> Run:
        """Run what was previewed (under the previewed name unless a key is given)."""
        return self.job.run(
            gpu=self.gpu if gpu is None else gpu,
            max_cost=self.max_cost if max_cost is None else max_cost,
            idempotency_key=idempotency_key or self.name,
        )


def environment_splits(options: Options, reference: str, project: str) -> dict[str, int]:
    """The split sizes of an Environment the store knows (`status.splits`), else none."""
    found = environment_ref({"metadata": {"project": project}, "spec": {"environment": {"name": reference}}})
    if found is None:
        return {}
    store = options.project().open_state()
    try:
        record = store.get(found[0])
    finally:
        store.close()
    if record is None or record.spec.get("spec", {}).get("version") != found[1]:
        return {}
    splits = record.status.get("splits") or {}
    return {str(k): int(v) for k, v in splits.items() if isinstance(v, int)}


def _yaml(document: dict[str, Any]) -> str:
    note = "# Written by nodus.recipes (the Python SDK) when it applied this TrainingJob.\n"
    return note + yaml.safe_dump(document, sort_keys=False, allow_unicode=True)
