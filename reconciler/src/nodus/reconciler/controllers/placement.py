"""Admission against where and at what price a TrainingJob (or a Job) would launch: the one check the dry run,
`nodus plan` and `nodus apply` share, so they agree on every blocking reason.

Who calls it: the TrainingJob and Job controllers' `admit` (`placement_refusals`, each with how its kind is
priced), which `nodus.reconciler.apply.refusals` asks for every job a plan creates or replaces (`nodus run` too),
with the `Placement` that `placement_of` made once for the plan (apply, plan, the dry run and the SDK each make
one). It is pure but for reading the host's GPUs once.

What it refuses, before anything is written or launched:
- `Unschedulable`: `spec.resources.gpu` asks for GPU types the project's host does not have, or not as many; the
  local executor runs on this machine only, so such a job would otherwise run on the CPU at $0 (an executor that
  places on a cluster decides at launch instead, Pending until a node fits);
- `CapBelowFirstHold`: `spec.maxCostUSD` is below the run's first hold (its first hour, or the whole estimate when
  shorter, at the price it would launch with: `nodus.reconciler.pricing.estimate`), so it could not start.
An in-place update (a cap raised, a run suspended) starts no run, so neither applies to it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import UTC, datetime

from nodus.reconciler.controllers.base import AdmissionContext, Placement, Refusal
from nodus.reconciler.controllers.trainingjob import resources_of
from nodus.reconciler.executors import HostGpus, host_gpus
from nodus.reconciler.pricing.estimate import Estimate
from nodus.reconciler.pricing.facts import Context, estimate_job, estimate_job_run
from nodus.reconciler.pricing.prices import PriceTable, load_prices
from nodus.reconciler.project import Project
from nodus.reconciler.references import runtime_key
from nodus.reconciler.state.records import DEFAULT_PROJECT, JSONObject, ResourceKey
from nodus.specs.status_names import Reason
from nodus.specs.types import format_usd

LAUNCHING_ACTIONS = frozenset({"create", "replace"})
"""The actions that start a run (a new generation): the only ones checked against the host and the first hold."""


def placement_of(project: Project, prices: PriceTable | None = None, now: datetime | None = None) -> Placement:
    """The placement of `project`'s jobs: its executor's host GPUs (read once, and only if a job asks for GPUs),
    the price table in force (`prices`, else the project's) and the time."""
    name = project.settings().executor_name

    @functools.cache
    def gpus() -> HostGpus | None:
        return host_gpus(name, project.jobs)

    table = prices if prices is not None else load_prices(project_root=project.root)
    return Placement(gpus, table, project, now or datetime.now(UTC).replace(microsecond=0))


Estimator = Callable[[JSONObject, Context, AdmissionContext, ResourceKey], Estimate]
"""How a kind's run is priced: (its document, the pricing context, the admission context, its key) -> Estimate."""


def trainingjob_estimate(job: JSONObject, pricing: Context, context: AdmissionContext, key: ResourceKey) -> Estimate:
    """A TrainingJob's estimate, its runtime and Environment from the plan's documents before the store's."""
    return estimate_job(job, pricing, context.planned.pending, key=key)


def plain_job_estimate(job: JSONObject, pricing: Context, context: AdmissionContext, key: ResourceKey) -> Estimate:
    """A plain Job's estimate: its own resources at the table's rates (`nodus run`, a Job of the files)."""
    return estimate_job_run(job, pricing, key=key)


def placement_refusals(
    job: JSONObject, context: AdmissionContext, estimate: Estimator = trainingjob_estimate
) -> list[Refusal]:
    """Why the run `job` would start could not start where and at what price it would launch (see the module);
    `estimate`: how its kind is priced (a TrainingJob's, by default, or a plain Job's)."""
    placement = context.placement
    if placement is None or context.action not in LAUNCHING_ACTIONS:
        return []
    found: list[Refusal] = []
    spec = job.get("spec") or {}
    runtime = context.planned.document(runtime_key(job)) if spec.get("runtime") else None
    resources = resources_of(spec, ((runtime or {}).get("spec") or {}).get("launcher"))
    host = placement.host_gpus() if resources is not None and resources.gpu is not None else None
    why = host.unschedulable(resources) if host is not None else None
    if why is not None:
        hint = (
            "run it on a cluster that has them (executor: {ray: {address: ...}} in nodus.yaml), or leave out "
            "spec.resources.gpu to run on this host's CPU"
        )
        found.append(Refusal(Reason.UNSCHEDULABLE, f"spec.resources.gpu.type: {why}: {hint}"))
    metadata = job.get("metadata") or {}
    kind = str(job.get("kind") or "TrainingJob")
    key = ResourceKey(kind, str(metadata.get("project") or DEFAULT_PROJECT), str(metadata.get("name") or ""))
    records = tuple(context.planned.records())
    pricing = Context(now=placement.now, prices=placement.prices, project=placement.project, records=records)
    message = cap_below_first_hold(estimate(job, pricing, context, key))
    if message is not None:
        found.append(Refusal(Reason.CAP_BELOW_FIRST_HOLD, message))
    return found


def cap_below_first_hold(estimate: Estimate) -> str | None:
    """`spec.maxCostUSD: 0.10 is below the first hold $20.00: ...` when the cap cannot start the run, else None
    (the dry run says the same of a plain Job)."""
    if not estimate.cap_below_first_hold:
        return None
    assert estimate.cap_usd is not None
    assert estimate.hold_needed_usd is not None
    return (
        f"spec.maxCostUSD: {format_usd(estimate.cap_usd)} is below the first hold "
        f"${format_usd(estimate.hold_needed_usd)}: raise it to start the run"
    )
