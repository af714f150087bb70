"""The estimator: what a TrainingJob (or a plain Job) will cost to completion, what is held before it starts, and
when it starts.

Who calls it: `nodus apply --dry-run` and `nodus run --dry-run` (`status.estimate`), `nodus plan` (each
TrainingJob action's cost, through `nodus.reconciler.pricing.costs`) and the tests. It is pure: the job's and its
runtime's documents, the merged parameters, the `Facts` about this host and a `PriceTable` in; an `Estimate` out.
Nothing is read or written.

What it decides, as the seeds' "What the dry run decides" says:
- resources: `spec.resources` when set, else the runtime's first preset whose `match` fits the model's size, the
  method (LoRA when the parameters have a `lora` block, QLoRA when it also says `quantization: 4bit`, else Full)
  and the quantisation; a runtime without presets runs CPU-only on the local executor;
- duration: steps x the measured seconds per step on the slowest allowed GPU type that has a figure (`cpu` for a
  CPU-only run), plus held-out tasks (twice with baseline and final) x seconds per task, plus the model's caching
  when it is not imported yet, plus the trainer's start-up; `spec.expectedDuration` replaces all of it. A CPU
  run takes its three figures from finished runs of the same shape on this host when there are any
  (`nodus.reconciler.pricing.host_timing`): CPUs differ too much for one published figure;
- cost: duration x $/hour x GPUs per node x nodes, at the rate of the GPU type whose time was used (the run
  priced as if it lands on the slowest allowed type: one coherent case, not the slowest time at the dearest rate);
  the dearest priced allowed type when that one has no price or no measured time chose a type (expectedDuration);
  a CPU run at this host's price;
- first hold: what is reserved before the run starts: the first hour, or the whole estimate when shorter, never
  above `maxCostUSD` (a cap below it is reported, and blocks a dry run);
- multi-node: every node is priced, and the assembly bound (the most a failed assembly can cost) is shown apart:
  the members' rates plus two replacement machines, times the startup timeout plus `TEARDOWN_SECONDS`, times
  the tries (`maxAssemblyRetries` + 1);
- a plain Job (`estimate_plain_job`): its resources are its own, its gang's shape `nodus.specs.topology`'s (every
  member priced), and its duration its `spec.timeout` (the most one attempt runs, so the cost is a ceiling): a
  command has no measured time, so without a timeout there is no `costUSD`, only the first hold;
- start time: now when the local host runs nothing else, else after the running jobs' estimated remaining time
  (a simplification: the local executor would run them side by side, sharing the CPUs);
- anything without a price or a measured time is listed in `unpriced` with the reason, never counted as $0:
  without the time of the run's main work (training steps; held-out scoring for mode Evaluate) or a price there
  is no `costUSD` at all; a secondary part without a time (held-out scoring around training) is left out of it
  and listed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, Literal

from nodus.reconciler.pricing.host_timing import HostTiming, host_timing, model_identity, shape_of
from nodus.reconciler.pricing.model_size import ModelSize, format_count, parse_count
from nodus.reconciler.pricing.prices import PriceTable
from nodus.reconciler.references import merge
from nodus.specs import topology
from nodus.specs.types import format_usd, parse_duration

JSONObject = dict[str, Any]
Method = Literal["Full", "LoRA", "QLoRA"]
CPU = "cpu"
DEFAULT_HELD_OUT = 64
"""Held-out tasks when `spec.environment.heldOutTasks` is left out (the TrainingJob's documented default)."""
TEARDOWN_SECONDS = 300.0
"""What the assembly bound adds to the startup timeout for releasing the members of a failed assembly: 5 minutes,
the time a provider may take to confirm a machine deleted (billing runs until then)."""
REPLACEMENT_MACHINES = 2
"""Extra machines the assembly bound covers: "the sum of the members' rates plus up to two replacement machines"."""
CENTS = Decimal("0.0001")


@dataclass(frozen=True)
class RunningJob:
    """A job already running on the local host, and how long it has left (None: not known)."""

    name: str
    remaining_seconds: float | None


@dataclass(frozen=True)
class Facts:
    """What the estimator knows beyond the documents (gathered by `nodus.reconciler.pricing.facts`)."""

    now: datetime
    model_size: ModelSize | None = None
    model_cached: bool = True
    """The job's model is imported already (or it names none): no caching time."""
    held_out_available: int | None = None
    """The Environment's test split size, when its build recorded it: fewer tasks than asked are served."""
    running: tuple[RunningJob, ...] = ()
    host_timings: tuple[JSONObject, ...] = ()
    """`status.timing` of finished runs of the job's runtime on this host (any shape; the estimator matches)."""


@dataclass(frozen=True)
class Unpriced:
    """Something the estimate could not price, and why (it is not counted, never as $0)."""

    item: str
    reason: str

    def to_dict(self) -> JSONObject:
        return {"item": self.item, "reason": self.reason}

    def __str__(self) -> str:
        return f"{self.item}: {self.reason}"


@dataclass(frozen=True)
class Estimate:
    """A TrainingJob's estimate; `to_dict()` is `status.estimate`."""

    cost_usd: Decimal | None
    """To completion; None when the duration or the price is unknown (see `unpriced`)."""
    first_hold_usd: Decimal | None
    start_time: datetime | None
    duration_seconds: float | None
    per_hour_usd: Decimal | None
    """The whole run's rate: $/hour x GPUs per node x nodes."""
    resources: JSONObject | None
    preset: str | None
    method: Method | None
    """None for a plain Job (no trainer, no method)."""
    quantization: str | None
    basis: tuple[str, ...]
    unpriced: tuple[Unpriced, ...]
    prices: JSONObject
    cap_usd: Decimal | None = None
    hold_needed_usd: Decimal | None = None
    """The first hold before the cap is applied: a cap below it cannot start the run."""
    assembly_bound_usd: Decimal | None = None
    nodes: int = 1
    model_parameters: int | None = None

    @property
    def cap_below_first_hold(self) -> bool:
        return self.cap_usd is not None and self.hold_needed_usd is not None and self.cap_usd < self.hold_needed_usd

    def to_dict(self) -> JSONObject:
        out: JSONObject = {
            "costUSD": _usd(self.cost_usd),
            "firstHoldUSD": _usd(self.first_hold_usd),
            "startTime": None if self.start_time is None else self.start_time.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "durationSeconds": None if self.duration_seconds is None else round(self.duration_seconds, 1),
            "perHourUSD": _usd(self.per_hour_usd),
            "resources": self.resources,
            "preset": self.preset,
        }
        if self.method is not None:
            out["method"] = self.method
            out["quantization"] = self.quantization
        if self.model_parameters is not None:
            out["modelParameters"] = format_count(self.model_parameters)
        if self.nodes > 1:
            out["gangHoldUSD"] = _usd(self.first_hold_usd)
            out["assemblyBoundUSD"] = _usd(self.assembly_bound_usd)
        out["basis"] = list(self.basis)
        out["unpriced"] = [item.to_dict() for item in self.unpriced]
        out["prices"] = dict(self.prices)
        return out


def method_of(parameters: Mapping[str, Any]) -> tuple[Method, str]:
    """(method, quantization) read from merged parameters: a `lora` block is LoRA, with `quantization: 4bit`
    (in the block or beside it) QLoRA; no block is Full. Quantization is `None`, `8bit` or `4bit`."""
    lora = parameters.get("lora")
    quantization = parameters.get("quantization")
    if isinstance(lora, Mapping) and lora.get("quantization") is not None:
        quantization = lora.get("quantization")
    quantization = str(quantization) if quantization not in (None, False, "") else "None"
    if not isinstance(lora, Mapping):
        return "Full", quantization
    return ("QLoRA" if quantization == "4bit" else "LoRA"), quantization


def estimate_trainingjob(
    job: JSONObject,
    runtime: JSONObject | None,
    facts: Facts,
    prices: PriceTable,
    parameters: JSONObject | None = None,
) -> Estimate:
    """The estimate of `job` (a normalised TrainingJob document) on `runtime` (its TrainingRuntime document, None
    when it does not exist). `parameters`: the merged parameters admission computed (merged here when None)."""
    return _Estimator(job, runtime, facts, prices, parameters).run()


@dataclass
class _Estimator:
    job: JSONObject
    runtime: JSONObject | None
    facts: Facts
    prices: PriceTable
    parameters: JSONObject | None
    basis: list[str] = field(default_factory=list)
    unpriced: list[Unpriced] = field(default_factory=list)
    timed_on: str | None = None
    """The GPU type (or `cpu`) whose measured time the duration used."""
    priced_on: str | None = None
    """The GPU type whose $/hour the cost used."""

    @property
    def spec(self) -> JSONObject:
        return dict(self.job.get("spec") or {})

    @property
    def runtime_spec(self) -> JSONObject:
        return dict((self.runtime or {}).get("spec") or {})

    @property
    def runtime_name(self) -> str:
        return str(self.spec.get("runtime", "?"))

    def run(self) -> Estimate:
        parameters = self.parameters
        if parameters is None:
            parameters = merge(self.runtime_spec.get("defaults") or {}, self.spec.get("parameters") or {})
        method, quantization = self._method(parameters)
        resources, preset = self._resources(method or "Full", quantization or "None")
        nodes = int((resources or {}).get("nodes") or 1)
        duration = self._duration(resources, parameters)
        per_hour = self._rate(resources, nodes) if resources is not None else None
        cost = None
        if duration is not None and per_hour is not None:
            cost = _round(per_hour * Decimal(str(duration)) / 3600)
            rate = format_usd(_round(per_hour))
            self.basis.append(f"cost: {_seconds(duration)} x ${rate}/hour = ${format_usd(cost)}")
        cap = self.spec.get("maxCostUSD")
        cap_usd = Decimal(str(cap)) if cap is not None else None
        needed = None
        if per_hour is not None:
            needed = _round(per_hour) if cost is None else min(_round(per_hour), cost)
        hold = needed if needed is None or cap_usd is None else min(needed, cap_usd)
        self._hold_basis(needed, cost, cap_usd)
        bound = None
        if resources is not None and nodes > 1 and per_hour is not None:
            bound = self._assembly_bound(resources, nodes)
        return Estimate(
            cost_usd=cost,
            first_hold_usd=hold,
            start_time=self._start(),
            duration_seconds=duration,
            per_hour_usd=None if per_hour is None else _round(per_hour),
            resources=resources,
            preset=preset,
            method=method,
            quantization=quantization,
            basis=tuple(self.basis),
            unpriced=tuple(self.unpriced),
            prices=self.prices.ref(),
            cap_usd=cap_usd,
            hold_needed_usd=needed,
            assembly_bound_usd=bound,
            nodes=nodes,
            model_parameters=self.facts.model_size.parameters if self.facts.model_size else None,
        )

    def _method(self, parameters: JSONObject) -> tuple[Method | None, str | None]:
        """The training method the presets are matched on (and the runtime's absence said)."""
        if self.runtime is None:
            self.unpriced.append(Unpriced("runtime", f"TrainingRuntime {self.runtime_name} does not exist"))
        return method_of(parameters)

    # --- resources -----------------------------------------------------------------------------------------

    def _resources(self, method: Method, quantization: str) -> tuple[JSONObject | None, str | None]:
        if self.spec.get("resources"):
            self.basis.append("resources: spec.resources")
            return dict(self.spec["resources"]), None
        presets = list(self.runtime_spec.get("presets") or [])
        if not presets:
            if self.runtime is not None:
                self.basis.append(f"resources: runtime {self.runtime_name} has no presets: CPU only, on this host")
                return {"nodes": 1}, None
            return None, None
        size = self.facts.model_size
        described = f"{method}" + (f", {quantization}" if quantization != "None" else "")
        for preset in presets:
            match = preset.get("match") or {}
            fits, undecided = _fits(match, size.parameters if size else None, method, quantization)
            if fits and not undecided:
                whose = (
                    f"a model of {format_count(size.parameters)} parameters ({size.source})" if size else "any model"
                )
                self.basis.append(f"resources: preset {preset['name']} of {self.runtime_name}: {whose}, {described}")
                return dict(preset.get("resources") or {}), str(preset["name"])
            if fits and undecided:
                break  # the first preset that might fit needs the size: a later one must not be taken instead
        if size is None:
            reason = (
                "the model's size is unknown (no nodus.dev/parameters annotation, no model files on this host, no "
                "size in its name), so no preset can be chosen: annotate the job or set spec.resources"
            )
        else:
            reason = (
                f"no preset of {self.runtime_name} fits a {format_count(size.parameters)}-parameter {described} run: "
                "set spec.resources"
            )
        self.unpriced.append(Unpriced("resources", reason))
        return None, None

    # --- price per hour ------------------------------------------------------------------------------------

    def _rate(self, resources: JSONObject, nodes: int) -> Decimal | None:
        gpu = resources.get("gpu")
        node_word = f"{nodes} node{'s' if nodes > 1 else ''}"
        if not gpu:
            rate = self.prices.local_rate()
            if rate is None:
                self.unpriced.append(Unpriced("price", f"the price table ({self._table()}) has no cpu.local price"))
                return None
            where = "cpu.local" if not self.prices.local_source.startswith("$") else self.prices.local_source
            self.basis.append(f"price: ${format_usd(rate)}/hour for this host ({where}), {node_word}")
            return rate * nodes
        types = [str(name) for name in gpu.get("type") or []]
        count = int(gpu.get("count") or 1)
        priced = {name: rate for name in types if (rate := self.prices.gpu_rate(name)) is not None}
        kind = self.prices.host_kind
        if not priced:
            reason = f"no {kind} $/hour for {', '.join(types)} in the price table ({self._table()})"
            self.unpriced.append(Unpriced("price", reason))
            return None
        if self.timed_on in priced:
            chosen, why = self.timed_on, "the type whose time is used" if len(types) > 1 else ""
        else:
            chosen = max(priced, key=lambda name: (priced[name], name))
            why = "the dearest priced allowed type" if len(types) > 1 else ""
            if self.timed_on is not None:
                why = f"{self.timed_on} has no price: {why or 'the only priced type'}"
        self.priced_on = chosen
        line = f"price: ${format_usd(priced[chosen])}/GPU-hour ({chosen}, {kind}) x {count} GPU x {node_word}"
        if why:
            line += f"; {why}"
        missing = [name for name in types if name not in priced]
        if missing:
            line += f"; no price for {', '.join(missing)}"
        self.basis.append(line)
        return priced[chosen] * count * nodes

    def _table(self) -> str:
        return f"version {self.prices.version}" + (f", {self.prices.file}" if self.prices.file else ", none found")

    # --- duration ------------------------------------------------------------------------------------------

    def _duration(self, resources: JSONObject | None, parameters: JSONObject) -> float | None:
        expected = self.spec.get("expectedDuration")
        if expected is not None:
            seconds = parse_duration(expected).total_seconds()
            self.basis.append(f"duration: spec.expectedDuration {expected}, used instead of the measured times")
            return seconds
        if resources is None:
            return None
        measured = dict(self.runtime_spec.get("measured") or {})
        keys = [str(name) for name in (resources.get("gpu") or {}).get("type") or []] or [CPU]
        host = self._host_timing(keys, parameters)
        total = 0.0
        training = self._training(measured, keys, parameters, host)
        if training is None:
            return None
        total += training
        evaluation = self._evaluation(measured, keys, host)
        if evaluation is None and self.spec.get("mode", "Train") == "Evaluate":
            return None  # scoring is the whole run: without its time there is no duration to price
        total += evaluation or 0.0
        model = self.spec.get("model") or self.runtime_spec.get("defaultModel") or {}
        caching = float(measured.get("modelCachingSeconds") or 0)
        if model.get("uri") and not self.facts.model_cached:
            if caching:
                self.basis.append(f"model caching: {_seconds(caching)} ({model['uri']} is not imported yet)")
            else:
                self.basis.append(f"model caching: not measured for {self.runtime_name} ({model['uri']} is new)")
            total += caching
        if host is not None:
            # Everything of a run that is neither a step nor a scored task: loading, graders, export.
            self.basis.append(f"start-up and export: {_seconds(host.fixed_seconds)} ({host.describe()})")
            return total + host.fixed_seconds
        startup = float(measured.get("startupSeconds") or 0)
        if startup:
            self.basis.append(f"trainer start-up: {_seconds(startup)}")
            total += startup
        return total

    def _host_timing(self, keys: list[str], parameters: JSONObject) -> HostTiming | None:
        """This host's own figures for a CPU run of this shape (GPU runs keep the runtime's figures)."""
        if keys != [CPU] or not self.facts.host_timings:
            return None
        shape = shape_of(model_identity(self.spec.get("model")), parameters)
        return host_timing(self.facts.host_timings, shape)

    def _training(
        self, measured: JSONObject, keys: list[str], parameters: JSONObject, host: HostTiming | None
    ) -> float | None:
        if self.spec.get("mode", "Train") == "Evaluate":
            return 0.0
        steps = parameters.get("steps")
        if not isinstance(steps, int) or isinstance(steps, bool):
            self.unpriced.append(Unpriced("training", f"runtime {self.runtime_name} has no steps parameter to count"))
            return None
        figure = _figure(measured.get("stepSeconds"), keys, host, host.step_seconds if host else None)
        if figure is None:
            reason = f"{steps} steps: runtime {self.runtime_name} has no measured seconds per step"
            self.unpriced.append(Unpriced("training", f"{reason} for {', '.join(keys)}; set spec.expectedDuration"))
            return None
        key, source, seconds = figure
        self.timed_on = key
        line = f"training: {steps} steps x {seconds:g} s ({source}) = {_seconds(steps * seconds)}"
        if len(keys) > 1:
            line += "; the slowest allowed type with a measured time"
        self.basis.append(line)
        return steps * seconds

    def _evaluation(self, measured: JSONObject, keys: list[str], host: HostTiming | None) -> float | None:
        """Seconds of held-out scoring; None (and an unpriced item) when the runtime has no time per task."""
        tasks, what = self._evaluation_tasks()
        if tasks == 0:
            if what:
                self.basis.append(f"evaluation: {what}")
            return 0.0
        per_task = host.evaluation_task_seconds if host else None
        figure = _figure(measured.get("evaluationTaskSeconds"), keys, host, per_task)
        if figure is None:
            reason = f"{tasks} tasks ({what}): runtime {self.runtime_name} has no measured seconds per task"
            self.unpriced.append(Unpriced("evaluation", f"{reason} for {', '.join(keys)}"))
            return None
        key, source, seconds = figure
        self.timed_on = self.timed_on or key
        line = f"evaluation: {tasks} tasks ({what}) x {seconds:g} s ({source}) = {_seconds(tasks * seconds)}"
        self.basis.append(line)
        return tasks * seconds

    def _evaluation_tasks(self) -> tuple[int, str]:
        """(tasks graded, what they are): the held-out tasks once per evaluation pass."""
        environment = self.spec.get("environment")
        if not environment:
            return 0, "" if not (self.spec.get("evaluation") or {}).get("tasks") else "benchmark tasks not counted"
        held_out = int(environment.get("heldOutTasks") or DEFAULT_HELD_OUT)
        available = self.facts.held_out_available
        if available is not None and available < held_out:
            held_out = available
        evaluation = {"baseline": True, "final": True, **(self.spec.get("evaluation") or {})}
        if self.spec.get("mode", "Train") == "Evaluate":
            return held_out, f"{held_out} held-out, scored once"
        passes = [name for name in ("baseline", "final") if evaluation.get(name)]
        if not passes:
            return 0, "none (baseline and final are off)"
        return held_out * len(passes), f"{held_out} held-out, {' and '.join(passes)}"

    # --- hold, gang, start -----------------------------------------------------------------------------------

    def _hold_basis(self, needed: Decimal | None, cost: Decimal | None, cap: Decimal | None) -> None:
        if needed is None:
            return
        what = "the whole estimate (under an hour)" if cost is not None and needed == cost else "the first hour"
        line = f"first hold: {what}, ${format_usd(needed)}"
        if cap is not None and cap < needed:
            line += f"; maxCostUSD {format_usd(cap)} is below it: the run cannot start"
        elif cap is not None and cost is not None and cap < cost:
            line += f"; maxCostUSD {format_usd(cap)} is below the estimate: the run will be suspended at the cap"
        self.basis.append(line)

    def _assembly_bound(self, resources: JSONObject, nodes: int) -> Decimal | None:
        gpu = resources.get("gpu") or {}
        count = int(gpu.get("count") or 1) if gpu else 1
        machine = self._machine_rate(resources)
        if machine is None:
            return None
        placement = self.spec.get("distributed") or {}
        timeout = parse_duration(placement.get("startupTimeout") or "15m").total_seconds()
        tries = int(placement.get("maxAssemblyRetries", 2)) + 1
        machines = nodes + REPLACEMENT_MACHINES
        bound = _round(machine * count * machines * Decimal(str(timeout + TEARDOWN_SECONDS)) / 3600 * tries)
        self.basis.append(
            f"assembly bound: {machines} machines ({nodes} members + {REPLACEMENT_MACHINES} replacements) x "
            f"({_seconds(timeout)} startup timeout + {_seconds(TEARDOWN_SECONDS)} teardown) x {tries} tries = "
            f"${format_usd(bound)}, the most a failed assembly can cost (not in the estimate)"
        )
        return bound

    def _machine_rate(self, resources: JSONObject) -> Decimal | None:
        """$/hour for one GPU of the type `_rate` priced (or this host, for a CPU run)."""
        if not resources.get("gpu"):
            return self.prices.local_rate()
        return self.prices.gpu_rate(self.priced_on) if self.priced_on else None

    def _start(self) -> datetime | None:
        running = self.facts.running
        if not running:
            self.basis.append("start: now (the local host runs no other job)")
            return self.facts.now
        names = ", ".join(job.name for job in running)
        remaining = [job.remaining_seconds for job in running]
        if any(seconds is None for seconds in remaining):
            self.basis.append(f"start: after the running jobs {names}, whose end is not estimated")
            return None
        wait = sum(seconds for seconds in remaining if seconds is not None)
        self.basis.append(f"start: after the running jobs {names} (about {_seconds(wait)} left)")
        return self.facts.now + timedelta(seconds=wait)


def estimate_plain_job(job: JSONObject, facts: Facts, prices: PriceTable) -> Estimate:
    """The estimate of `job`, a normalised Job document (no runtime, no parameters): see the module's docstring."""
    return _JobEstimator(job, None, facts, prices, {}).run()


@dataclass
class _JobEstimator(_Estimator):
    """A Job: the TrainingJob estimator's rate, hold, assembly bound and start, with the Job's own resources and
    gang shape, and its timeout as the duration."""

    def _method(self, parameters: JSONObject) -> tuple[Method | None, str | None]:
        return None, None

    def _resources(self, method: Method, quantization: str) -> tuple[JSONObject | None, str | None]:
        shape = topology.of_spec(self.spec)
        gpu = (self.spec.get("resources") or {}).get("gpu")
        resources: JSONObject = {}
        if gpu:
            resources["gpu"] = {"type": list(gpu.get("type") or []), "count": shape.gpus_per_node}
        resources["nodes"] = shape.nodes
        if gpu:
            asked = self.spec.get("distributed") or {}
            how = f" (totalGPUs {asked['totalGPUs']})" if asked.get("totalGPUs") is not None else ""
            self.basis.append(f"resources: spec.resources and spec.distributed: {shape.describe()}{how}")
        else:
            self.basis.append(f"resources: CPU only, on this host ({shape.nodes} node{'s' if shape.nodes > 1 else ''})")
        return resources, None

    def _duration(self, resources: JSONObject | None, parameters: JSONObject) -> float | None:
        timeout = self.spec.get("timeout")
        if timeout is None:
            reason = "a Job's command has no measured time: set spec.timeout (nodus run --timeout) to bound the cost"
            self.unpriced.append(Unpriced("duration", reason))
            return None
        seconds = parse_duration(timeout).total_seconds()
        self.basis.append(f"duration: spec.timeout {timeout}, the most one attempt runs (the cost is a ceiling)")
        return seconds


def _fits(match: Mapping[str, Any], parameters: int | None, method: str, quantization: str) -> tuple[bool, bool]:
    """(fits, undecided): whether a preset's match fits the run; undecided when it depends on an unknown size."""
    if match.get("method") is not None and match["method"] != method:
        return False, False
    if match.get("quantization") is not None and match["quantization"] != quantization:
        return False, False
    limit = match.get("maxModelParameters")
    if limit is None:
        return True, False
    if parameters is None:
        return True, True
    largest = parse_count(str(limit))
    return (largest is not None and parameters <= largest), False


def _figure(
    figures: Mapping[str, Any] | None, keys: list[str], host: HostTiming | None, host_seconds: float | None
) -> tuple[str, str, float] | None:
    """(type timed on, where the figure comes from, seconds): this host's own figure when it has one (a CPU run,
    `host` given only then), else the runtime's figure of the slowest allowed type."""
    if host is not None and host_seconds is not None:
        return CPU, host.describe(), host_seconds
    found = _slowest(figures or {}, keys)
    return None if found is None else (found[0], found[0], found[1])


def _slowest(figures: Mapping[str, Any], keys: list[str]) -> tuple[str, float] | None:
    """The highest measured seconds among `keys` that have a figure, as (key, seconds)."""
    known = [(key, float(figures[key])) for key in keys if key in figures]
    return max(known, key=lambda item: item[1]) if known else None


def _round(value: Decimal) -> Decimal:
    return value.quantize(CENTS, rounding=ROUND_HALF_UP)


def _usd(value: Decimal | None) -> str | None:
    return None if value is None else format_usd(value)


def _seconds(seconds: float) -> str:
    """`19.2 s`, `4m 12s`, `2h 05m`: short, for basis lines."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes}m {rest:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m"
