"""One pass of the controller, in process, on a repository of Secrets and Volumes (no builds, no jobs: fast).

What a pass applies and when, and the bookkeeping `nodus get` reads: a sync record per resource (the revision,
the desired hash, the outcome) and the summary that makes an interrupted or failed sync run again.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from nodus.reconciler.gitops import sync_status
from nodus.reconciler.gitops.source import GitSource
from nodus.reconciler.gitops.sync import (
    FAILED,
    IN_SYNC,
    LOCKED,
    SYNCED,
    PassReport,
    Target,
    checkout_project,
    sync_pass,
)
from nodus.reconciler.project import Project
from nodus.reconciler.state.records import ResourceKey, StateStore

SECRET = "apiVersion: nodus.dev/v1\nkind: Secret\nmetadata: {{name: {name}}}\nspec: {{keys: [{keys}]}}\n"
VOLUME = "apiVersion: nodus.dev/v1\nkind: Volume\nmetadata: {{name: {name}}}\nspec: {{}}\n"
TYPO = """apiVersion: nodus.dev/v1beta1
kind: TrainingJob
metadata: {name: typo}
spec:
  runtime: no-such-runtime
  model: {uri: "hf://nodus/tiny-qwen3@cbf57b6b8182c6aacc73392c929d3cfdfec8c246"}
"""
CREDS = ResourceKey("Secret", "default", "creds")
DATA = ResourceKey("Volume", "default", "data")


@pytest.fixture
def store(home: Project) -> Any:
    opened = home.open_state()
    yield opened
    opened.close()


class Controller:
    """A target on the test's repository and what the passes told."""

    def __init__(self, repo: Any, home: Project, store: StateStore, **options: Any) -> None:
        self.repo, self.home, self.store = repo, home, store
        self.target = Target(GitSource(str(repo.folder), "main", home.files.root / "controller"), **options)
        self.told: list[tuple[str, str]] = []

    def sync(self) -> PassReport:
        self.told.clear()
        return sync_pass(self.target, self.home, self.store, lambda event, text: self.told.append((event, text)))

    def states(self) -> dict[str, tuple[str, str, str]]:
        """`Kind/name` -> (sync, health, revision) as `nodus get -o wide` shows them."""
        return {
            str(r.key): (sync_status.sync_state(r), sync_status.health_of(r), r.sync.revision if r.sync else "-")
            for r in self.store.list()
        }


@pytest.fixture
def controller(git_repo: Any, home: Project, store: StateStore) -> Controller:
    return Controller(git_repo, home, store)


def test_a_pass_applies_a_new_revision_then_finds_it_in_sync(controller: Controller) -> None:
    first = controller.repo.commit(
        "creds and data", {"a.yaml": SECRET.format(name="creds", keys="A"), "v.yaml": VOLUME.format(name="data")}
    )
    report = controller.sync()
    assert report.outcome == SYNCED and report.changed == 2 and report.revision and report.revision.sha == first
    assert report.sync == {"Synced": 2, "OutOfSync": 0} and report.health == {
        **report.health,
        "Healthy": 2,
        "Unknown": 0,
    }
    # The Secret is Ready once stored (its values stay where it says).
    assert [event for event, _ in controller.told] == ["applying", "resource", "resource"]
    assert f'synced {first[:7]} "creds and data": 2 changed, 0 launched; 2 Synced, 2 Healthy' in report.line()
    assert controller.states() == {
        "Secret/creds": ("Synced", "Healthy", first),
        "Volume/data": ("Synced", "Healthy", first),
    }
    summary = sync_status.last_summary(controller.store)
    assert summary is not None and (summary.revision, summary.outcome, summary.changed) == (first, "Succeeded", 2)
    serial = controller.store.serial()
    again = controller.sync()
    assert again.outcome == IN_SYNC and controller.told == [] and controller.store.serial() == serial
    assert again.line() == f"in sync at {first[:7]}; 2 Synced, 2 Healthy"

    second = controller.repo.commit("one more key", {"a.yaml": SECRET.format(name="creds", keys="A, B")})
    report = controller.sync()
    assert report.outcome == SYNCED and report.changed == 1
    assert controller.states()["Secret/creds"] == ("Synced", "Healthy", second)
    assert controller.states()["Volume/data"] == ("Synced", "Healthy", second)  # unchanged, synced at the new revision
    record = controller.store.get(CREDS)
    assert record is not None and record.generation == 2 and record.spec["spec"]["keys"] == ["A", "B"]


def test_a_change_by_hand_is_out_of_sync_until_the_next_pass_reverts_it(controller: Controller) -> None:
    controller.repo.commit("creds", {"a.yaml": SECRET.format(name="creds", keys="A")})
    controller.sync()
    record = controller.store.get(CREDS)
    assert record is not None
    controller.store.put(CREDS, {**record.spec, "spec": {"keys": ["BY_HAND"], "provider": "Env", "envPrefix": ""}})
    assert controller.states()["Secret/creds"][0] == "OutOfSync"
    report = controller.sync()
    assert report.outcome == SYNCED and report.reason == "the plan has changes"
    assert controller.states()["Secret/creds"][0] == "Synced"


def test_a_revision_that_does_not_parse_fails_and_keeps_the_last_sync_records(controller: Controller) -> None:
    first = controller.repo.commit("creds", {"a.yaml": SECRET.format(name="creds", keys="A")})
    controller.sync()
    broken = controller.repo.commit("broken", {"a.yaml": SECRET.format(name="creds", keys="not a name")})
    report = controller.sync()
    assert report.outcome == FAILED and not report.ok and report.revision and report.revision.sha == broken
    assert report.message.startswith("a.yaml:") and "spec.keys" in report.message  # relative to the repository
    assert controller.states()["Secret/creds"] == ("Synced", "Healthy", first)
    summary = sync_status.last_summary(controller.store)
    assert summary is not None and (summary.revision, summary.outcome) == (broken, "Failed")
    assert controller.sync().outcome == FAILED  # tried again every interval, in case it was the outside world
    fixed = controller.repo.commit("fixed", {"a.yaml": SECRET.format(name="creds", keys="B")})
    assert controller.sync().outcome == SYNCED
    assert controller.states()["Secret/creds"] == ("Synced", "Healthy", fixed)


def test_an_apply_refused_by_admission_records_which_resource_failed(controller: Controller) -> None:
    controller.repo.commit("creds", {"a.yaml": SECRET.format(name="creds", keys="A")})
    controller.sync()
    bad = controller.repo.commit("a job with a typo", {"tj.yaml": TYPO, "v.yaml": VOLUME.format(name="data")})
    report = controller.sync()
    assert report.outcome == FAILED and "TrainingJob/typo" in report.message and "no-such-runtime" in report.message
    assert report.sync == {"Synced": 1, "OutOfSync": 2} and report.health["Missing"] == 2
    by_key = {record.key: record for record in controller.store.sync_records()}
    typo = by_key[ResourceKey("TrainingJob", "default", "typo")]
    assert (typo.revision, typo.outcome) == (bad, "Failed") and "no-such-runtime" in typo.message
    assert by_key[DATA].outcome == "Failed" and by_key[CREDS].outcome == "Applied"
    assert controller.store.get(DATA) is None  # admission runs before anything is written


def test_an_interrupted_sync_is_applied_again(controller: Controller) -> None:
    first = controller.repo.commit("creds", {"a.yaml": SECRET.format(name="creds", keys="A")})
    controller.sync()
    summary = sync_status.last_summary(controller.store)
    assert summary is not None
    # What a controller killed mid-apply leaves: the summary says Running (every spec may already be written).
    sync_status.save_summary(controller.store, sync_status.SyncSummary(**{**summary.__dict__, "outcome": "Running"}))
    report = controller.sync()
    assert report.outcome == SYNCED and report.reason == "the last sync was interrupted" and report.changed == 0
    record = controller.store.get(CREDS)
    assert record is not None and record.generation == 1 and record.sync and record.sync.revision == first


def test_a_held_lease_skips_the_pass_and_records_nothing(controller: Controller) -> None:
    controller.repo.commit("creds", {"a.yaml": SECRET.format(name="creds", keys="A")})
    lease = controller.store.acquire_lease("apply", "someone@elsewhere pid 1", "apply by hand", 300)
    report = controller.sync()
    assert report.outcome == LOCKED and report.ok and "someone@elsewhere" in report.line()
    assert controller.store.list() == [] and sync_status.last_summary(controller.store) is None
    controller.store.release_lease(lease)
    assert controller.sync().outcome == SYNCED


def test_resources_no_longer_in_git_are_out_of_sync_until_pruned(
    git_repo: Any, home: Project, store: StateStore
) -> None:
    kept = Controller(git_repo, home, store)
    git_repo.commit("two", {"a.yaml": SECRET.format(name="creds", keys="A"), "v.yaml": VOLUME.format(name="data")})
    kept.sync()
    gone = git_repo.commit("drop the volume", {"v.yaml": None})
    assert kept.sync().outcome == SYNCED  # a new revision with nothing to change
    assert kept.states()["Volume/data"] == ("OutOfSync", "Healthy", gone)
    [row] = [row for row in store.sync_records() if row.key == DATA]
    assert (row.outcome, row.desired_hash) == ("NotInGit", "") and "--prune" in row.message
    pruning = Controller(git_repo, home, store, prune=True)
    report = pruning.sync()
    assert report.outcome == SYNCED and report.changed == 1 and store.get(DATA) is None
    assert [row.key for row in store.sync_records()] == [CREDS]


def test_path_names_the_specs_folder_inside_the_repository(git_repo: Any, home: Project, store: StateStore) -> None:
    git_repo.commit(
        "specs in a folder",
        {"specs/a.yaml": SECRET.format(name="creds", keys="A"), "other.yaml": VOLUME.format(name="data")},
    )
    assert Controller(git_repo, home, store, path="specs").sync().outcome == SYNCED
    assert [record.key for record in store.list()] == [CREDS]
    outside = Controller(git_repo, home, store, path="../..").sync()
    assert outside.outcome == FAILED and "outside the repository" in outside.message
    missing = Controller(git_repo, home, store, path="nope").sync()
    assert missing.outcome == FAILED and "--path nope: not in" in missing.message


def test_the_checkouts_nodus_lock_is_the_projects(tmp_path: Path, home: Project) -> None:
    checkout = tmp_path / "checkout"
    (checkout / "envs" / "a").mkdir(parents=True)
    (tmp_path / "nodus.lock").write_text("")  # above the repository: never the project's
    assert checkout_project(checkout, checkout / "envs" / "a", home).lock_path == checkout / "nodus.lock"
    (checkout / "envs" / "nodus.lock").write_text("")
    project = checkout_project(checkout, checkout / "envs" / "a", home)
    assert project.lock_path == checkout / "envs" / "nodus.lock" and project.files.root == home.files.root


def test_a_failed_fetch_is_a_failed_pass_not_an_exception(controller: Controller, tmp_path: Path) -> None:
    controller.repo.commit("creds", {"a.yaml": SECRET.format(name="creds", keys="A")})
    controller.sync()
    controller.repo.folder.rename(tmp_path / "elsewhere")
    started = time.monotonic()
    report = controller.sync()
    assert report.outcome == FAILED and report.revision is None and "git fetch" in report.message
    assert time.monotonic() - started < 30


ENVIRONMENT = """apiVersion: nodus.dev/v1
kind: Environment
metadata: {name: words}
spec:
  version: 1.0.0
  package: {path: env, loader: words}
"""


def test_build_builds_an_environment_left_unbuilt_at_the_same_revision(
    controller: Controller, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A revision synced without --build (or whose nodus.lock entry was reset) leaves its Environment Pending
    (ImageNotBuilt); `nodus controller --build` on that same commit builds it, rather than finding it in sync."""
    from nodus.builder import build as builder

    built: list[Path] = []

    def fake_build(paths: list[Path], **options: object) -> list[builder.BuildResult]:
        built.extend(paths)  # no podman here: the build is said to fail, which is enough to see it was run
        return [builder.BuildResult("words", "1.0.0", str(paths[0]), "failed", error="no builder in this test")]

    monkeypatch.setattr(builder, "build_paths", fake_build)
    first = controller.repo.commit(
        "an Environment", {"environment.yaml": ENVIRONMENT, "env/words.py": "def tasks(split): return []\n"}
    )
    assert controller.sync().outcome == SYNCED
    record = controller.store.get(ResourceKey("Environment", "default", "words"))
    assert record is not None and record.status["reason"] == "ImageNotBuilt"
    assert controller.sync().outcome == IN_SYNC and not built  # without --build nothing would build it

    builds = Controller(controller.repo, controller.home, controller.store, build=True)
    report = builds.sync()
    assert report.revision is not None and report.revision.sha == first
    assert report.reason == "Environment/words is not built (ImageNotBuilt) and --build builds it", report.line()
    assert len(built) == 1
