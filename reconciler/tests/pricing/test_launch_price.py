"""The price in force when a run launches is stored with it and never re-priced: `status.price` is kept for the
generation that launched, a replacement is priced again, and the executor's job spec gets the same price."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from nodus.reconciler.controllers.trainingjob import KEPT, price_in_force
from nodus.reconciler.project import Project
from nodus.reconciler.state.records import ResourceKey, ResourceRecord

KEY = ResourceKey("TrainingJob", "default", "run")
DOCUMENT = {"apiVersion": "nodus.dev/v1beta1", "kind": "TrainingJob", "metadata": {"name": "run"}, "spec": {}}


def record(status: dict[str, object], generation: int = 1) -> ResourceRecord:
    return ResourceRecord(KEY, DOCUMENT, "h", generation=generation, status=status)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Project:
    (tmp_path / "nodus.lock").write_text("lockfileVersion: 1\nenvironments: {}\n")
    monkeypatch.delenv("NODUS_PRICES", raising=False)
    monkeypatch.setenv("NODUS_LOCAL_PRICE_PER_HOUR", "3.60")
    return Project.find(tmp_path)


def test_a_first_launch_takes_the_price_in_force(project: Project) -> None:
    price = price_in_force(record({}), project)
    assert price.per_hour_usd == Decimal("3.60")
    assert price.to_status() == {"version": "2026-11-29", "perHourUSD": "3.60", "source": "$NODUS_LOCAL_PRICE_PER_HOUR"}


def test_a_launched_generation_keeps_its_price_when_the_table_changes(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    launched = {"launchGeneration": 1, "price": {"version": "2026-01-01", "perHourUSD": "1.00", "source": "old"}}
    monkeypatch.setenv("NODUS_LOCAL_PRICE_PER_HOUR", "9.99")
    price = price_in_force(record(launched), project)
    assert price.per_hour_usd == Decimal("1.00") and price.version == "2026-01-01"
    # apply writes a replacement's status afresh (no price): the new generation is priced again.
    replaced = price_in_force(record({"phase": "Pending", "reason": "Replaced", "launchGeneration": 2}, 2), project)
    assert replaced.per_hour_usd == Decimal("9.99")


def test_the_project_table_prices_a_launch_without_the_variable(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NODUS_LOCAL_PRICE_PER_HOUR")
    assert price_in_force(record({}), project).per_hour_usd == Decimal("0.00")  # the catalog: your own machine
    (project.root / "prices.yaml").write_text('version: "team"\ncpu: {local: "0.80"}\n')
    price = price_in_force(record({}), project)
    assert price.per_hour_usd == Decimal("0.80") and price.source == f"cpu.local of {project.root / 'prices.yaml'}"


def test_refresh_keeps_the_stored_price() -> None:
    assert "price" in KEPT


def test_a_run_launched_before_prices_were_recorded_keeps_its_job_specs_price(project: Project) -> None:
    from nodus.reconciler.controllers.trainingjob import executor
    from nodus.reconciler.executors.local.job import JobSpec, write_json

    jobs = executor(project)
    files = jobs.files("default", "run")
    files.dir.mkdir(parents=True)
    write_json(files.spec, JobSpec("run", "default", ("true",), price_per_hour_usd="0.75").to_json())
    price = price_in_force(record({"launchGeneration": 1}), project, jobs)
    assert price.per_hour_usd == Decimal("0.75") and price.source == "the job spec it was launched with"
    # A replacement (generation 2) is not that run: it is priced from the table.
    assert price_in_force(record({"launchGeneration": 2}, 2), project, jobs).per_hour_usd == Decimal("3.60")
