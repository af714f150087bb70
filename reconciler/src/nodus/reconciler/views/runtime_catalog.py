"""The managed runtimes as `nodus get trainingruntimes -n nodus` and `nodus describe trainingruntime/NAME -n nodus`
show them: one row per runtime (NAME, TASKS, MODES, LAUNCHER, PHASE) and, for one, its summary, parameters with
their defaults, presets and measured step times (`-o yaml` prints the whole document).

Who calls it: `nodus.reconciler.views.catalogs` (the catalog of kind TrainingRuntime), with the runtimes read by
`nodus.reconciler.planning.managed.read_catalog`.

Which rows: every managed runtime, named by a job of this project or not (the seeds list them in a fresh
project); the store's record when it holds one, else what applying it would find: a runtime has nothing to
build, so its controller makes it Ready the moment it is stored.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nodus.reconciler.planning.desired import Desired
from nodus.reconciler.planning.managed import SOURCE_PREFIX, catalog_folders
from nodus.reconciler.state.records import ResourceKey, ResourceRecord, spec_hash
from nodus.reconciler.views.columns import Column, _get, _name, _phase_and_reason
from nodus.specs.status_names import Phase

COLUMNS: list[Column] = [
    ("NAME", _name),
    ("TASKS", lambda r: ", ".join(_get(r.spec, "spec", "tasks") or []) or "-"),
    ("MODES", lambda r: ", ".join(_get(r.spec, "spec", "modes") or []) or "-"),
    ("LAUNCHER", lambda r: str(_get(r.spec, "spec", "launcher") or "-")),
    ("PHASE", _phase_and_reason),
]
"""`sft   SFT, Pretrain   Train   Plain   Ready`."""


def catalog_records(catalog: Mapping[ResourceKey, Desired], stored: list[ResourceRecord]) -> list[ResourceRecord]:
    """One row per managed runtime (the store's record when it holds one), then what else the store holds in
    project nodus, by name."""
    by_key = {record.key: record for record in stored}
    rows = [
        by_key.get(key)
        or ResourceRecord(
            key=key,
            spec=entry.document,
            spec_hash=spec_hash(entry.document),
            generation=0,
            status={"phase": Phase.READY},
        )
        for key, entry in catalog.items()
    ]
    rows += [record for key, record in by_key.items() if key not in catalog]
    return sorted(rows, key=lambda record: record.key.name)


def describe_lines(entry: Desired, record: ResourceRecord) -> list[str]:
    """The runtime part of `describe`: what it does, its tasks, parameters, presets and step times."""
    del record  # a runtime's status holds nothing beyond its phase, which `describe` prints after these lines
    spec = entry.document["spec"]
    model = (spec.get("defaultModel") or {}).get("uri")
    return [
        f"Tasks:       {', '.join(spec.get('tasks') or []) or '-'}",
        f"Modes:       {', '.join(spec.get('modes') or []) or '-'}",
        f"Launcher:    {spec.get('launcher', '-')}",
        f"Command:     {' '.join(str(part) for part in spec.get('command') or []) or '-'}",
        f"Managed:     {'yes' if spec.get('managed') else 'no'}",
        f"Source:      {entry.source}",
        f"Model:       {model or '-'} (when a job names none)",
        "Summary:",
        *_summary(entry.source),
        "Parameters:",
        *_parameters(spec),
        "Presets:",
        *_presets(spec.get("presets") or []),
        "Step times:",
        *_measured(spec.get("measured") or {}),
    ]


def _summary(source: str) -> list[str]:
    """The comment the runtime's file opens with (what it trains, on what data, with what defaults)."""
    name = source.removeprefix(SOURCE_PREFIX)
    for folder in catalog_folders():
        path: Path = folder / name
        if path.is_file():
            head = list(itertools.takewhile(lambda row: row.startswith("#"), path.read_text("utf-8").splitlines()))
            return [f"  {row.removeprefix('#').strip()}" for row in head] or ["  -"]
    return ["  -"]


def _parameters(spec: Mapping[str, Any]) -> list[str]:
    properties = ((spec.get("parameterSchema") or {}).get("properties")) or {}
    defaults = spec.get("defaults") or {}
    if not properties:
        return ["  none"]
    width = max(len(name) for name in properties)
    lines = []
    for name, schema in properties.items():
        kind = schema.get("type") or ("one of " + ", ".join(map(str, schema["enum"])) if "enum" in schema else "-")
        default = f", default {defaults[name]}" if name in defaults else ""
        about = f"  {schema['description']}" if schema.get("description") else ""
        lines.append(f"  {name:<{width}}  {kind}{default}{about}")
    return lines


def _presets(presets: list[Any]) -> list[str]:
    if not presets:
        return ["  none (a job sets spec.resources)"]
    lines = []
    for preset in presets:
        match = ", ".join(f"{key} {value}" for key, value in (preset.get("match") or {}).items())
        resources = _resources(preset.get("resources") or {})
        lines.append(f"  {preset.get('name', '-')}: {match or 'any job'} -> {resources}")
    return lines


def _resources(resources: Mapping[str, Any]) -> str:
    gpu = resources.get("gpu")
    if isinstance(gpu, dict):
        return f"{gpu.get('count', 1)} x GPU of {', '.join(gpu.get('type') or [])}"
    return ", ".join(f"{key} {value}" for key, value in resources.items()) or "-"


def _measured(measured: Mapping[str, Any]) -> list[str]:
    steps = measured.get("stepSeconds") or {}
    if not steps:
        return ["  not measured (a job's estimate needs spec.expectedDuration)"]
    lines = [f"  {device}: {seconds} s a step" for device, seconds in steps.items()]
    if measured.get("measuredOn"):
        lines.append(f"  measured on {measured['measuredOn']}")
    return lines
