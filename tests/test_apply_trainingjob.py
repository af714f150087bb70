"""End to end through the CLI: nodus-build an Environment, `nodus plan`, `nodus apply --wait` a TrainingJob that
runs the attempt-API test runtime, `nodus get`, and a plan with nothing left to do.

Needs podman and the base image (the build), so it is marked like the builder's tests; the trainer is
`reconciler/tests/executors/runtimes/echo_trainer.py`, graded by the catalog's arithmetic environment.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from nodus.builder.cli import main as nodus_build
from nodus.cli.main import cli

pytestmark = [pytest.mark.podman, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]

JOB = """apiVersion: nodus.dev/v1beta1
kind: TrainingJob
metadata: {{name: echo-run}}
spec:
  runtime: echo
  environment: {{name: nodus/arithmetic@2.0.0, trainTasks: 20, heldOutTasks: 8, seed: 42}}
  evaluation: {{minComparisonTasks: 8}}  # 8 held out: plan refuses a comparison that could never be made
  parameters: {parameters}
{extra}"""


@pytest.fixture
def project(tmp_path: Path, base_reference: str, echo_runtime: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project with the arithmetic Environment (built), the echo runtime and one TrainingJob."""
    root = tmp_path / "project"
    shutil.copytree(REPO / "catalog" / "arithmetic", root / "arithmetic", ignore=shutil.ignore_patterns("tests"))
    (root / "runtime.yaml").write_text(echo_runtime)
    (root / "job.yaml").write_text(JOB.format(parameters="{steps: 4}", extra=""))
    flags = ["--network", "none", "--base", base_reference, "--lock", str(root / "nodus.lock")]
    with pytest.raises(SystemExit) as exited:
        nodus_build([str(root / "arithmetic"), *flags, "--state-dir", str(root / ".nodus"), "--json"])
    assert exited.value.code == 0
    monkeypatch.chdir(root)
    monkeypatch.setenv("NODUS_RECORD_WIRE", "1")
    monkeypatch.setenv("NODUS_ACCOUNTING_INTERVAL", "0.5")
    monkeypatch.setenv("NODUS_LOCAL_PRICE_PER_HOUR", "3.60")
    return root


def nodus(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def test_plan_apply_wait_get_then_nothing_to_do(project: Path) -> None:
    code, output = nodus("plan", str(project))
    assert code == 2, output
    assert "+ Environment/nodus/arithmetic" in output and "+ TrainingJob/echo-run" in output
    assert "Plan: 3 to add" in output

    code, output = nodus("apply", str(project), "--yes", "--wait", "--timeout", "3m")
    assert code == 0, output
    assert "TrainingJob/echo-run: launched" in output
    assert "TrainingJob/echo-run: Succeeded" in output

    code, output = nodus("get", "tj", "echo-run", "-o", "jsonpath={.status.phase} {.status.stage}")
    assert code == 0 and output.split() == ["Succeeded"], output  # a job that ended has no stage
    code, output = nodus("get", "env", "arithmetic", "-o", "json")
    status = json.loads(output)["status"]
    assert status["phase"] == "Ready" and status["splits"] == {"train": 5000, "test": 500}

    # The trainer never received an answer: every byte that crossed the attempt socket was recorded.
    wire = project / ".nodus" / "jobs" / "default" / "echo-run" / "logs" / "attempt-wire.jsonl"
    crossed = [json.loads(line) for line in wire.read_text().splitlines()]
    tasks = [entry for entry in crossed if entry.get("path", "").endswith("/tasks")]
    assert tasks, crossed[:2]
    for entry in tasks:
        response = entry["response"]
        files = (json.loads(response) if isinstance(response, str) else response)["files"]
        for text in files.values():
            assert all(set(json.loads(line)) == {"taskId", "prompt", "metadata"} for line in text.splitlines())

    # The tasks are the manifest the build froze (train at seed 42), fixed for every later run.
    from nodus.builder.lockfile import Lock
    from nodus.builder.store import Store

    entry = Lock.load(project / "nodus.lock").get("arithmetic", "2.0.0", "nodus")  # the catalog's copy: project nodus
    assert entry is not None
    manifest = project / ".nodus" / "manifests" / "by-environment" / "nodus-arithmetic@2.0.0" / "train-42.jsonl"
    assert manifest.read_bytes() == Store(project / ".nodus").manifest(entry.manifests["train/42"])
    served = json.loads(tasks[0]["response"]) if isinstance(tasks[0]["response"], str) else tasks[0]["response"]
    first = [json.loads(line)["taskId"] for line in served["files"]["train.jsonl"].splitlines()]
    assert first == [json.loads(line)["taskId"] for line in manifest.read_text().splitlines()[:20]]

    code, output = nodus("describe", "tj/echo-run")
    assert code == 0 and "type: Admitted" in output and "TrainerSucceeded" in output, output
    assert "stage Training" in output  # an event per stage

    # Applied: the same files plan to nothing, and a second apply launches nothing.
    code, output = nodus("plan", str(project))
    assert code == 0 and "No changes" in output, output
    code, output = nodus("apply", str(project), "--yes")
    assert code == 0 and "0 launched" in output


def test_a_parameter_typo_is_refused_before_anything_is_written(project: Path) -> None:
    (project / "job.yaml").write_text(JOB.format(parameters="{learning_rate: 0.1}", extra=""))
    code, output = nodus("apply", str(project), "--yes")
    assert code == 1
    assert "TrainingJob/echo-run: InvalidParameters: spec.parameters.learning_rate" in output
    assert "nothing was applied" in output
    code, output = nodus("get", "env")
    assert "No Environment resources found." in output


def test_cp_verifies_the_recorded_sha256(project: Path, tmp_path: Path) -> None:
    assert nodus("apply", str(project), "--yes", "--wait", "--timeout", "3m")[0] == 0
    code, output = nodus("cp", "tj/echo-run:outputs/results.json", str(tmp_path))
    assert code == 0 and "verified" in output, output
    assert json.loads((tmp_path / "results.json").read_text())
    produced = project / ".nodus" / "jobs" / "default" / "echo-run" / "outputs" / "results.json"
    produced.write_text(produced.read_text() + " ")
    (tmp_path / "results.json").unlink()
    code, output = nodus("cp", "tj/echo-run:outputs/results.json", str(tmp_path))
    assert code == 1 and "no longer matches the sha256 recorded" in output
    assert not (tmp_path / "results.json").exists()
    code, output = nodus("logs", "tj/echo-run")
    assert code == 0 and output.strip()


def test_a_replace_keeps_the_first_generations_outputs_and_cp_reads_both(project: Path, tmp_path: Path) -> None:
    (project / "job.yaml").write_text(JOB.format(parameters="{steps: 2}", extra=""))
    assert nodus("apply", str(project), "--yes", "--wait", "--timeout", "3m")[0] == 0
    code, output = nodus("plan", str(project))
    assert code == 0 and "No changes" in output, output
    # Changing steps replaces the job; the plan says where generation 1's outputs stay.
    (project / "job.yaml").write_text(JOB.format(parameters="{steps: 3}", extra=""))
    code, output = nodus("plan", str(project))
    assert code == 2 and "-/+ TrainingJob/echo-run" in output and "spec.parameters.steps" in output, output
    assert "# keeps generation 1's outputs: nodus cp tj/echo-run:outputs/... --generation 1" in output
    code, output = nodus("apply", str(project), "--yes", "--wait", "--timeout", "3m")
    assert code == 0 and "TrainingJob/echo-run: Succeeded" in output, output

    assert nodus("cp", "tj/echo-run:outputs/results.json", str(tmp_path / "now.json"))[0] == 0
    code, output = nodus("cp", "tj/echo-run:outputs/results.json", str(tmp_path / "g1.json"), "--generation", "1")
    assert code == 0 and "verified" in output, output
    assert json.loads((tmp_path / "now.json").read_text())["steps"] == 3
    assert json.loads((tmp_path / "g1.json").read_text())["steps"] == 2
    code, output = nodus("cp", "-r", "tj/echo-run:outputs/adapter", str(tmp_path / "g1-adapter"), "--generation", "1")
    assert code == 0 and (tmp_path / "g1-adapter" / "weights.bin").is_file(), output
    code, output = nodus("logs", "tj/echo-run", "--generation", "1")
    assert code == 0 and "2 steps" in output and "3 steps" not in output


def test_applies_and_looks_record_each_stage_event_once(project: Path) -> None:
    """Every apply used to add the stage events of a finished job again (6, then 7, then 8 `stage Baseline`)."""
    from nodus.reconciler.project import Project
    from nodus.reconciler.state.records import ResourceKey

    (project / "job.yaml").write_text(JOB.format(parameters="{steps: 2}", extra=""))
    assert nodus("apply", str(project), "--yes", "--wait", "--timeout", "3m")[0] == 0
    for _ in range(3):
        assert nodus("apply", str(project), "--yes")[0] == 0
        assert nodus("get", "tj")[0] == 0
        assert nodus("describe", "tj/echo-run")[0] == 0
    store = Project.find(project).open_state()
    try:
        events = store.events(ResourceKey("TrainingJob", "default", "echo-run"), limit=1000)
    finally:
        store.close()
    stages = [event.message for event in events if event.reason == "Stage"]
    assert stages == ["stage Baseline", "stage Training", "stage Evaluating", "stage Exporting"], stages
    assert all(event.count == 1 for event in events), [(e.reason, e.count) for e in events]


def test_a_cap_suspends_and_raising_it_resumes_from_the_checkpoint(project: Path) -> None:
    # $3.60 an hour is $0.0005 per 0.5 s interval; 80 steps of 0.1 s cost about $0.008 and more.
    # expectedDuration: the runtime has no measured step time, so the first hold would be a whole hour ($3.60),
    # which a $0.005 cap is refused below (CapBelowFirstHold); 5 s at $3.60 an hour is a $0.005 hold.
    (project / "job.yaml").write_text(
        JOB.format(parameters="{steps: 80, sleepS: 0.1}", extra='  maxCostUSD: "0.005"\n  expectedDuration: 5s\n')
    )
    assert nodus("apply", str(project), "--yes")[0] == 0
    code, output = nodus("wait", "tj/echo-run", "--for=jsonpath={.status.phase}=Suspended", "--timeout", "2m")
    assert code == 0, output
    code, output = nodus("get", "tj", "echo-run", "-o", "json")
    status = json.loads(output)["status"]
    assert status["reason"] == "MaxCostReached"
    assert float(status["cost"]["totalUSD"]) <= 0.005 + 0.0005  # never more than one interval over the cap
    steps = project / ".nodus" / "jobs" / "default" / "echo-run" / "state" / "steps.jsonl"
    done = len(steps.read_text().splitlines())
    assert 0 < done < 80

    # A lower cap is refused; a higher one resumes the same run from its checkpoint.
    code, output = nodus("patch", "tj/echo-run", "-p", '{"spec": {"maxCostUSD": "0.004"}}')
    assert code == 1 and "can only be raised" in output
    code, output = nodus("patch", "tj/echo-run", "-p", '{"spec": {"maxCostUSD": "1.00"}}')
    assert code == 0, output
    code, output = nodus("wait", "tj/echo-run", "--for=jsonpath={.status.phase}=Succeeded", "--timeout", "2m")
    assert code == 0, output
    ran = [json.loads(line)["step"] for line in steps.read_text().splitlines()]
    assert sorted(set(ran)) == list(range(80))
    assert len(ran) <= 81  # resumed, not restarted (at most the interrupted step runs twice)


def test_a_second_apply_fails_fast_naming_the_lease_holder(project: Path) -> None:
    from nodus.reconciler.project import Project

    store = Project.find(project).open_state()
    lease = store.acquire_lease("apply", "alice@ci pid 42", "apply examples/", 300)
    try:
        code, output = nodus("apply", str(project), "--yes")
        assert code == 1
        assert "locked by alice@ci pid 42 (apply examples/)" in output and f"nodus unlock {lease.id}" in output
        code, output = nodus("unlock", lease.id)
        assert code == 0 and "unlocked" in output
        assert nodus("apply", str(project), "--yes")[0] == 0
    finally:
        store.close()


def test_apply_killed_at_random_points_converges_to_one_launch(project: Path) -> None:
    """20 trials: `nodus apply` killed (SIGKILL) after a random delay, then run again until it completes.

    The second apply takes over the lease the killed one left (its holder's pid is gone) without help."""
    import os
    import random
    import signal
    import subprocess

    from nodus.reconciler.project import Project
    from nodus.reconciler.state.records import ResourceKey

    nodus_bin = str(Path(sys.executable).parent / "nodus")
    environ = {**os.environ}
    rng = random.Random(20261129)
    key = ResourceKey("TrainingJob", "default", "echo-run")
    job_dir = project / ".nodus" / "jobs" / "default" / "echo-run"
    for trial in range(20):
        killed = subprocess.Popen(
            [nodus_bin, "apply", str(project), "--yes"], env=environ, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        time.sleep(rng.uniform(0.0, 2.5))
        killed.send_signal(signal.SIGKILL)
        killed.wait()
        again = subprocess.run(
            [nodus_bin, "apply", str(project), "--yes", "--wait", "--timeout", "2m"],
            env=environ,
            capture_output=True,
            text=True,
            check=False,
        )
        assert again.returncode == 0, f"trial {trial}: {again.stdout}{again.stderr}"
        store = Project.find(project).open_state()
        try:
            record = store.get(key)
            assert record is not None and record.status["phase"] == "Succeeded", f"trial {trial}: {record}"
            assert len(store.launches(key)) == 1, f"trial {trial}: {store.launches(key)}"
        finally:
            store.close()
        steps = [json.loads(line) for line in (job_dir / "state" / "steps.jsonl").read_text().splitlines()]
        assert len({(s.get("attempt"), s.get("pid")) for s in steps}) == 1, f"trial {trial}: two trainers ran: {steps}"
        # Start the next trial from nothing: no state, no job folder (every process of this job has ended).
        for path in [*(project / ".nodus").glob("state.db*"), job_dir]:
            if path.is_dir():
                import shutil as rmtree_module

                rmtree_module.rmtree(path)
            else:
                path.unlink()


def test_a_replaced_trainingjob_stops_the_old_run_and_starts_the_new_one(project: Path) -> None:
    (project / "job.yaml").write_text(JOB.format(parameters="{steps: 200, sleepS: 0.1}", extra=""))
    assert nodus("apply", str(project), "--yes")[0] == 0
    assert nodus("wait", "tj/echo-run", "--for=jsonpath={.status.phase}=Running", "--timeout", "1m")[0] == 0
    # The seed is not updatable in place: the plan replaces the job, naming the field that forced it.
    (project / "job.yaml").write_text(JOB.format(parameters="{steps: 3}", extra="").replace("seed: 42", "seed: 7"))
    code, output = nodus("plan", str(project))
    assert code == 2 and "-/+ TrainingJob/echo-run" in output and "spec.environment.seed" in output, output
    code, output = nodus("apply", str(project), "--yes", "--wait", "--timeout", "2m")
    assert code == 0, output
    code, output = nodus("get", "tj", "echo-run", "-o", "jsonpath={.status.phase} {.status.launchGeneration}")
    assert output.split() == ["Succeeded", "2"], output
    from nodus.reconciler.project import Project
    from nodus.reconciler.state.records import ResourceKey

    store = Project.find(project).open_state()
    try:
        keys = sorted(launch.launch_key for launch in store.launches(ResourceKey("TrainingJob", "default", "echo-run")))
    finally:
        store.close()
    assert [k.rsplit("/", 2)[1] for k in keys] == ["gen1", "gen2"]


def test_a_saved_plan_is_applied_exactly_or_refused_as_stale(project: Path, tmp_path: Path) -> None:
    saved = tmp_path / "plan.json"
    code, output = nodus("plan", str(project), "--out", str(saved))
    assert code == 2 and saved.is_file()
    # Something the plan relied on moves: the runtime is applied on its own first.
    runtime_only = tmp_path / "runtime-only"
    runtime_only.mkdir()
    (runtime_only / "runtime.yaml").write_text((project / "runtime.yaml").read_text())
    assert nodus("apply", str(runtime_only), "--yes")[0] == 0
    code, output = nodus("apply", str(saved))
    assert (
        code == 1
        and "the saved plan is stale" in output
        and "TrainingRuntime/echo was created since the plan" in output
    )
    # A fresh plan applies exactly, with no prompt.
    code, output = nodus("plan", str(project), "--out", str(saved))
    assert code == 2
    code, output = nodus("apply", str(saved))
    assert code == 0 and "launched" in output, output


def test_a_job_runs_its_command_and_its_log_is_kept(project: Path) -> None:
    (project / "hello.yaml").write_text(
        "apiVersion: nodus.dev/v1beta1\nkind: Job\nmetadata: {name: hello}\nspec:\n"
        f"  command: [{sys.executable}, -c, \"print('hello from a job')\"]\n"
    )
    code, output = nodus("apply", str(project / "hello.yaml"), "--yes", "--wait", "--timeout", "1m")
    assert code == 0 and "Job/hello: Succeeded" in output, output
    code, output = nodus("logs", "job/hello")
    assert code == 0 and "hello from a job" in output
    code, output = nodus("get", "job", "hello", "-o", "json")
    status = json.loads(output)["status"]
    # The host's price (the project fixture sets it), stored with the run as a TrainingJob's is, and charged.
    assert status["price"]["perHourUSD"] == "3.60" and status["price"]["source"] == "$NODUS_LOCAL_PRICE_PER_HOUR"
    assert float(status["cost"]["totalUSD"]) > 0, status


def test_the_model_is_imported_once_and_handed_to_the_trainer(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    revision = "c1899de289a04d12100db370d81485cdf75e47ca"
    extra = f"  model: {{uri: 'hf://tiny/model@{revision}'}}\n"
    (project / "job.yaml").write_text(JOB.format(parameters="{steps: 2}", extra=extra))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    code, output = nodus("apply", str(project), "--yes")
    assert code == 0
    code, output = nodus("get", "tj", "echo-run", "-o", "jsonpath={.status.reason} {.status.stage}")
    assert output.split() == ["ModelNotCached", "CachingModel"], output
    snapshot = tmp_path / "hub" / "models--tiny--model" / "snapshots" / revision
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text('{"model_type": "qwen3"}')
    code, output = nodus("apply", str(project), "--yes", "--wait", "--timeout", "2m")
    assert code == 0 and "TrainingJob/echo-run: Succeeded" in output, output
    spec = json.loads((project / ".nodus" / "jobs" / "default" / "echo-run" / "spec.json").read_text())
    model = Path(spec["env"]["NODUS_INPUT_MODEL"])
    assert model == project / ".nodus" / "models" / f"tiny--model@{revision}"
    assert json.loads((model / "config.json").read_text()) == {"model_type": "qwen3"}


def test_state_suspended_pauses_and_running_resumes_and_get_watch_follows(project: Path) -> None:
    import os
    import signal
    import subprocess

    (project / "job.yaml").write_text(JOB.format(parameters="{steps: 60, sleepS: 0.1}", extra=""))
    assert nodus("apply", str(project), "--yes")[0] == 0
    watcher = subprocess.Popen(
        [str(Path(sys.executable).parent / "nodus"), "get", "tj", "echo-run", "-w"],
        cwd=project,
        env=os.environ.copy(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        # Ctrl-C as a terminal sends it: a run started in the background (CI under `&`, xdist's workers) ignores
        # SIGINT, and a child inherits that; the watcher must see the default, as in a shell.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert nodus("wait", "tj/echo-run", "--for=jsonpath={.status.stage}=Training", "--timeout", "1m")[0] == 0
        code, output = nodus("patch", "tj/echo-run", "-p", '{"spec": {"state": "Suspended"}}')
        assert code == 0, output
        code, output = nodus("wait", "tj/echo-run", "--for=jsonpath={.status.phase}=Suspended", "--timeout", "1m")
        assert code == 0, output
        code, output = nodus("patch", "tj/echo-run", "-p", '{"spec": {"state": "Running"}}')
        assert code == 0, output
        code, output = nodus("wait", "tj/echo-run", "--for=jsonpath={.status.phase}=Succeeded", "--timeout", "2m")
        assert code == 0, output
        time.sleep(3)  # one more watch interval, so the watcher sees the end
    finally:
        watcher.send_signal(signal.SIGINT)
        try:
            seen, _ = watcher.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            watcher.kill()  # never left behind: the assertion below says why it would not stop
            seen = watcher.communicate()[0] + "\n(the watcher did not stop on SIGINT)"
    steps = project / ".nodus" / "jobs" / "default" / "echo-run" / "state" / "steps.jsonl"
    ran = [json.loads(line)["step"] for line in steps.read_text().splitlines()]
    assert sorted(set(ran)) == list(range(60)) and len(ran) <= 61  # resumed from the checkpoint
    # The watch printed the table again as the status changed (it polls every 2 s, as kubectl's watch shows
    # states, so a short Suspended may fall between two looks; the start and the end never do).
    assert seen.count("echo-run") >= 2 and "Running" in seen and "Succeeded" in seen, seen


def test_export_to_commits_the_outputs_as_a_new_volume_revision(project: Path) -> None:
    (project / "results.yaml").write_text(
        "apiVersion: nodus.dev/v1\nkind: Volume\nmetadata: {name: results}\nspec: {}\n"
    )
    (project / "job.yaml").write_text(JOB.format(parameters="{steps: 3}", extra="  exportTo: {volume: results}\n"))
    code, output = nodus("apply", str(project), "--yes", "--wait", "--timeout", "2m")
    assert code == 0 and "TrainingJob/echo-run: Succeeded" in output, output
    status = json.loads(nodus("get", "tj", "echo-run", "-o", "json")[1])["status"]
    assert status["export"]["phase"] == "Exported" and status["export"]["revision"] == 1, status.get("export")
    exported = next(c for c in status["conditions"] if c["type"] == "Exported")
    assert exported == {"type": "Exported", "status": "True", "message": "Volume results revision 1"}
    volume = json.loads(nodus("get", "volume", "results", "-o", "json")[1])["status"]
    assert volume["revision"] == 1 and volume["exportedFrom"] == "TrainingJob/echo-run"
    outputs = project / ".nodus" / "jobs" / "default" / "echo-run" / "outputs"
    folder = Path(volume["path"])
    for name in ("results.json", "adapter/weights.bin"):
        assert (folder / name).read_bytes() == (outputs / name).read_bytes()
    code, output = nodus("describe", "tj/echo-run")
    assert "Exported:      Volume results revision 1 (" in output, output
    # Looking again exports nothing more: one revision per run.
    assert nodus("get", "tj")[0] == 0 and nodus("apply", str(project), "--yes")[0] == 0
    assert json.loads(nodus("get", "volume", "results", "-o", "json")[1])["status"]["revision"] == 1


def test_export_to_a_read_only_volume_is_refused_at_plan_time(project: Path) -> None:
    volume = "apiVersion: nodus.dev/v1\nkind: Volume\nmetadata: {name: shared}\nspec: {accessMode: ReadOnlyMany}\n"
    (project / "shared.yaml").write_text(volume)
    (project / "job.yaml").write_text(JOB.format(parameters="{steps: 3}", extra="  exportTo: {volume: shared}\n"))
    code, output = nodus("plan", str(project))
    said = "job.yaml: TrainingJob/echo-run: spec.exportTo.volume: Volume shared is ReadOnlyMany"
    assert code == 1 and said in output, output
