"""The catalog's Environments as `nodus get environments -n nodus` and `nodus describe environment/NAME -n nodus`
show them: the seeds' table (NAME, VERSION, CATEGORY, MODES, PHASE) and the catalog's summary, licence, split
sizes, a sample task, the graders and the examples.

Who calls it: `nodus.cli.resources` (get and describe), with the catalog read by
`nodus.reconciler.planning.managed_environments.read_catalog`.

Which rows: the whole catalog, as the seeds list all its entries, whether or not a job of this project named one
yet; a catalog entry is a resource of project `nodus` the moment a job names it, so the catalog is the list of
what can be named. An entry the store holds (applied, built) shows the store's record; one the store does not
hold shows what applying it would find, read from nodus.lock and the local image store without writing or
loading anything: `Ready` when its image is built and stored, else `Pending (ImageNotBuilt)` (the first apply of
a job that names it builds it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from nodus.builder.lockfile import Lock
from nodus.builder.oci import tags_of
from nodus.builder.store import Store
from nodus.errors import NodusError
from nodus.reconciler.planning.managed_environments import CatalogEnvironment, examples_of
from nodus.reconciler.state.records import JSONObject, ResourceKey, ResourceRecord, spec_hash
from nodus.reconciler.views.columns import Column, _get, _name, _phase_and_reason, _text
from nodus.specs.status_names import Phase, Reason

COLUMNS: list[Column] = [
    ("NAME", _name),
    ("VERSION", lambda r: _text(_get(r.spec, "spec", "version"))),
    ("CATEGORY", lambda r: _text(_get(r.spec, "spec", "category"))),
    ("MODES", lambda r: ", ".join(_get(r.spec, "spec", "modes") or []) or "-"),
    ("PHASE", _phase_and_reason),
]
"""The seeds' catalog table: `graph-coloring   1.0.0   Reasoning   Train, Evaluate   Ready`."""


def unstored_status(document: JSONObject, *, lock: Lock, images: Path) -> JSONObject:
    """What the Environment controller would find for a catalog entry the store does not hold, read only."""
    name, version = document["metadata"]["name"], document["spec"]["version"]
    entry = lock.get(name, version, document["metadata"].get("project"))
    if entry is None or not tags_of(images, entry.image):
        message = f"not built yet: the first apply of a job naming nodus/{name}@{version} builds it"
        return {"phase": Phase.PENDING, "reason": Reason.IMAGE_NOT_BUILT, "message": message}
    return {
        "phase": Phase.READY,
        "image": entry.image,
        "splits": dict(entry.splits),
        "manifests": dict(entry.manifests),
    }


def catalog_records(
    catalog: Mapping[ResourceKey, CatalogEnvironment], stored: list[ResourceRecord], *, lock: Lock, images: Path
) -> list[ResourceRecord]:
    """One row per catalog entry (the store's record when it holds one), then what else the store holds in the
    project, by name."""
    by_key = {record.key: record for record in stored}
    rows = [
        by_key.get(key)
        or ResourceRecord(
            key=key,
            spec=entry.desired.document,
            spec_hash=spec_hash(entry.desired.document),
            generation=0,
            status=unstored_status(entry.desired.document, lock=lock, images=images),
        )
        for key, entry in catalog.items()
    ]
    rows += [record for key, record in by_key.items() if key not in catalog]
    return sorted(rows, key=lambda record: record.key.name)


def describe_lines(entry: CatalogEnvironment, record: ResourceRecord, store: Store) -> list[str]:
    """The catalog part of `describe`: summary, licence, splits, a sample task, the graders, the examples."""
    spec = entry.desired.document["spec"]
    status = record.status or {}
    return [
        f"Version:     {spec['version']}",
        f"Category:    {spec.get('category', '-')}",
        f"Modes:       {', '.join(spec.get('modes') or []) or '-'}",
        f"License:     {spec.get('license') or '-'}",
        f"Source:      {entry.desired.source}",
        "Summary:",
        *_wrapped(str(spec.get("description") or "-")),
        "Splits:",
        *_splits(status),
        "Sample task:",
        *_sample(status, store),
        "Graders:",
        *_graders(spec, entry),
        "Examples:",
        *_examples(entry),
    ]


def _wrapped(text: str, width: int = 100) -> list[str]:
    import textwrap

    return [f"  {row}" for row in textwrap.wrap(" ".join(text.split()), width)] or ["  -"]


def _splits(status: Mapping[str, Any]) -> list[str]:
    splits = status.get("splits") or {}
    if not splits:
        return ["  not built yet: the image's build freezes the splits and counts them"]
    return [
        f"  {split:<6} {count} tasks" for split, count in sorted(splits.items(), key=lambda item: item[0] != "train")
    ]


def _sample(status: Mapping[str, Any], store: Store) -> list[str]:
    """The first task of the frozen test manifest (seed 0), as a trainer receives it: no answer in it."""
    manifests = status.get("manifests") or {}
    digest = manifests.get("test/0") or next((d for k, d in sorted(manifests.items()) if k.startswith("test/")), None)
    if not digest:
        return ["  not built yet: a sample is read from the frozen task manifest once the image is built"]
    try:
        first = store.manifest(str(digest)).decode("utf-8").splitlines()[0]
        task = json.loads(first)
    except (NodusError, IndexError, ValueError, UnicodeDecodeError) as exc:
        return [f"  the test manifest {digest} cannot be read: {exc}"]
    lines = [f"  taskId:    {task.get('taskId', '-')}", f"  metadata:  {json.dumps(task.get('metadata') or {})}"]
    lines += ["  prompt:", *(f"    {row}" for row in str(task.get("prompt", "")).splitlines())]
    return lines


def _graders(spec: Mapping[str, Any], entry: CatalogEnvironment) -> list[str]:
    grading = spec.get("grading") or {}
    lines = [
        f"  {grading.get('grader', 'Program')}: the package's reward, {spec.get('rewardType', '-')} "
        f"(at most {grading.get('maxParallel', '-')} at once, timeout {grading.get('timeout', '-')})"
    ]
    fixtures = entry.folder / "fixtures.jsonl"
    if fixtures.is_file():
        cases = [row for row in fixtures.read_text(encoding="utf-8").splitlines() if row.strip()]
        lines.append(f"  fixture cases checked at build time: {len(cases)} ({fixtures.name})")
    return lines


def _examples(entry: CatalogEnvironment) -> list[str]:
    paths = examples_of(entry)
    if not paths:
        return ["  none"]
    lines: list[str] = []
    for path in paths:
        try:
            example = read_example(path)
        except ValueError as exc:
            lines.append(f"  {path.name}: {exc}")
            continue
        lines.append(f"  {path.stem}: {example.get('title', '-')}")
        lines += [f"    {row}" for row in measured_lines(example.get("measured"))]
    lines.append(f'  (nodus.recipes.TrainingJob.from_example("nodus/{entry.desired.key.name}@...", "EXAMPLE"))')
    return lines


def read_example(path: Path) -> JSONObject:
    """An example file: `title`, `measured` and `trainingJob` (the template). ValueError naming the file."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"{path}: cannot be read: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("trainingJob"), dict):
        raise ValueError(f"{path}: an example is a mapping with title, measured and trainingJob (a TrainingJob)")
    return data


def measured_lines(measured: Any) -> list[str]:
    """The measured results of an example, labelled with the model and date they were measured with."""
    if not measured:
        return ["measured: not measured yet (no run of this template has been recorded)"]
    head = f"measured {measured.get('date', '?')} with {measured.get('model', '?')}"
    where = f" on {measured['host']}" if measured.get("host") else ""
    results = measured.get("results") or {}
    shown = ", ".join(f"{name} {value}" for name, value in results.items())
    return [head + where + (f": {shown}" if shown else "")]
