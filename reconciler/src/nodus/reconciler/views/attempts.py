"""Attempts: each rank's runs of a job, as `nodus get attempts [-l nodus.dev/job=NAME,nodus.dev/rank=1]` lists them.

Who calls it: `nodus get attempts` (`nodus.cli.resources`), over the TrainingJobs and Jobs of the state store (a
pure read); the controllers write what it reads (`status.attempts`, `controllers.attempts`), from what the executor
reports:
- a gang's coordinator records one attempt per rank per epoch (`status.gang.attempts`, `gang_coordinator.py`), so a
  restart shows the lost rank's Failed attempt (NodeLost), the survivors' Cancelled ones and the next epoch's;
- a single-node job on Ray has one attempt per run (a restart after a lost session, a resume), rank 0, on the node
  Ray placed its session (`RayExecutor`);
- on the local executor, one per session of its supervisor (`status.sessions` of the job folder), rank 0, `local`.

An attempt carries the seeds' labels: `nodus.dev/job`, `nodus.dev/kind`, `nodus.dev/rank`, and `nodus.dev/epoch` for
a gang's, so a selector picks one rank's attempts across restarts, each with its placement, its boot or restore time
(`readySeconds`, where the executor measured it) and its cost.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from nodus.errors import ConfigError
from nodus.reconciler.state.records import ResourceRecord
from nodus.reconciler.views.columns import age
from nodus.specs.status_names import Phase

LABEL_PREFIX: Final = "nodus.dev/"
TITLES: Final = ("NAME", "JOB", "RANK", "EPOCH", "NODE", "PHASE", "START", "READY", "COST", "AGE")
WIDE_TITLES: Final = (*TITLES, "REASON", "IP", "RESTORE-FROM")


@dataclass(frozen=True)
class Attempt:
    """One attempt of one rank of a job, with the labels a selector matches."""

    job: ResourceRecord
    row: Mapping[str, Any]

    @property
    def rank(self) -> int:
        return int(self.row.get("rank") or 0)

    @property
    def name(self) -> str:
        run = int(self.row.get("run") or 0)
        again = f"r{run}-" if run else ""
        if self.row.get("epoch") is not None:
            return f"{self.job.key.name}-{again}e{self.row['epoch']}-{self.rank}"
        return f"{self.job.key.name}-a{self.row.get('attempt') or 1}" + (f"-r{run}" if run else "")

    @property
    def labels(self) -> dict[str, str]:
        labels = {
            f"{LABEL_PREFIX}job": self.job.key.name,
            f"{LABEL_PREFIX}kind": self.job.key.kind,
            f"{LABEL_PREFIX}project": self.job.key.project,
            f"{LABEL_PREFIX}rank": str(self.rank),
        }
        if self.row.get("epoch") is not None:
            labels[f"{LABEL_PREFIX}epoch"] = str(self.row["epoch"])
        return labels

    def phase(self) -> str:
        phase = self.row.get("phase")
        if phase:
            return str(phase)
        return Phase.RUNNING if self.row.get("endedAt") is None else "Ended"

    def document(self) -> dict[str, Any]:
        """The attempt as `-o json` and `-o yaml` print it."""
        return {
            "kind": "Attempt",
            "metadata": {"name": self.name, "project": self.job.key.project, "labels": self.labels},
            "status": dict(self.row),
        }

    def cells(self, now: float, *, wide: bool) -> list[str]:
        row = self.row
        ready = row.get("readySeconds")
        started = row.get("startedAt") or row.get("requestedAt")
        cells = [
            self.name,
            f"{self.job.key.kind}/{self.job.key.name}",
            str(self.rank),
            _text(row.get("epoch")),
            _text(str(row["node"])[:12] if row.get("node") else None),
            self.phase(),
            _text(row.get("start")),
            "-" if ready is None else f"{float(ready):.1f}s",
            "-" if row.get("costUSD") is None else f"${row['costUSD']}",
            "-" if not isinstance(started, int | float) else _age(now - float(started)),
        ]
        if wide:
            cells += [_text(row.get("reason")), _text(row.get("ip")), _text(row.get("restoreFrom"))]
        return cells


def attempts(records: Sequence[ResourceRecord]) -> list[Attempt]:
    """Every attempt the records' status lists, job by job, oldest first."""
    return [
        Attempt(record, row)
        for record in records
        for row in (record.status or {}).get("attempts") or []
        if isinstance(row, Mapping)
    ]


Selector = list[tuple[str, str, str]]


def parse_selector(text: str | None) -> Selector:
    """`-l key=value,key!=value` (kubectl's equality selectors; `==` is `=`); a bad term is one line naming it."""
    terms: Selector = []
    for term in (part.strip() for part in (text or "").split(",")):
        if not term:
            continue
        op = next((op for op in ("!=", "==", "=") if op in term), None)
        key, _, value = term.partition(op or "=")
        if op is None or not key.strip():
            raise ConfigError(f"-l {text!r}: {term!r} is not key=value or key!=value", hint="-l nodus.dev/rank=1")
        terms.append((key.strip(), "!=" if op == "!=" else "=", value.strip()))
    return terms


def matches(labels: Mapping[str, str], selector: Selector) -> bool:
    """Whether `labels` satisfy every term (a `!=` term also matches a missing label, as in kubectl)."""
    return all((labels.get(key) == value) == (op == "=") for key, op, value in selector)


def table(found: Sequence[Attempt], *, wide: bool, now: float | None = None) -> tuple[list[str], list[list[str]]]:
    when = time.time() if now is None else now
    return list(WIDE_TITLES if wide else TITLES), [attempt.cells(when, wide=wide) for attempt in found]


def _text(value: Any) -> str:
    return "-" if value in (None, "", [], {}) else str(value)


def _age(seconds: float) -> str:
    return age(max(0.0, seconds))
