"""A TrainingJob's gang without Ray (executors/ray/gang_sessions.py): what each member runs (a node session of a
one-node copy of the workload, with the rank's variables, priced at nothing), and how the members' output becomes
the run's log: rank 0's markers pass as the run's, the other ranks' are dropped, every trainer line is prefixed with
its rank, and the final status is rank 0's summary under the gang's fields."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nodus.errors import ConfigError
from nodus.reconciler.executors.ray import gang, session_variables, status_stream
from nodus.reconciler.executors.ray.channel import INPUTS_VARIABLE, REGISTRY_VARIABLE
from nodus.reconciler.executors.ray.gang_sessions import (
    SessionGang,
    member_jobs_root,
    member_workload,
    runs_sessions,
)
from nodus.reconciler.executors.workload import Resources, Workload, WorkloadKey

RUN = "nodus_0a1b2c3d_default_sft-g1-a1"
IPS = ["10.0.0.1", "10.0.0.2"]


def training(launcher: str = "Plain", kind: str = "TrainingJob") -> Workload:
    return Workload(
        key=WorkloadKey(project="default", name="sft", kind=kind),  # type: ignore[arg-type]
        command=("python", "-m", "nodus.runtimes.sft"),
        env={"HF_HOME": "/cache"},
        resources=Resources(nodes=2, launcher=launcher),
        pricePerHourUSD="2.00",
        maxCostUSD="5.00",
    )


def session_gang(tmp_path: Path, launcher: str = "Plain") -> SessionGang:
    environ = {REGISTRY_VARIABLE: "127.0.0.1:5000/nodus", INPUTS_VARIABLE: "sha256:abc", "UNRELATED": "x"}
    return SessionGang(training(launcher), environ, tmp_path / "node-jobs", session_variables.LAUNCH, RUN)


def test_only_trainingjobs_run_sessions_and_only_plain_or_torchrun(tmp_path: Path) -> None:
    assert runs_sessions(training()) and not runs_sessions(training(kind="Job"))
    session_gang(tmp_path).check()
    with pytest.raises(ConfigError, match="launcher Ray: a TrainingJob of several nodes starts Plain, Torchrun"):
        session_gang(tmp_path, "Ray").check()


def test_a_member_runs_a_node_session_of_one_node_with_its_rank_priced_at_nothing(tmp_path: Path) -> None:
    sessions = session_gang(tmp_path)
    env = gang.rank_env(sessions.workload, 1, IPS)
    command, variables = sessions.member(1, "f2fafa59839f0011", env, epoch=1)
    assert command[1:] == ["-m", "nodus.reconciler.executors.ray.node_main"]
    member = Workload.from_json(variables[session_variables.WORKLOAD_VARIABLE])
    assert member.resources is not None and (member.resources.nodes, member.resources.launcher) == (1, "Plain")
    assert (member.price_per_hour_usd, member.max_cost_usd) == ("0", None)  # the coordinator bills the gang
    assert member.env["WORLD_SIZE"] == "2" and member.env["RANK"] == "1" and member.env["HF_HOME"] == "/cache"
    assert variables[session_variables.JOBS_VARIABLE] == str(
        tmp_path / "node-jobs" / ".gang-ranks" / "rank-1-f2fafa59839f"
    )
    assert (
        variables[gang.SUBMISSION_VARIABLE] == "" and variables[session_variables.MEMBER_VARIABLE] == "1"
    )  # rank 0 publishes
    assert variables[REGISTRY_VARIABLE] == "127.0.0.1:5000/nodus" and variables[INPUTS_VARIABLE] == "sha256:abc"
    assert "UNRELATED" not in variables
    _, first = sessions.member(0, "846367e93495", gang.rank_env(sessions.workload, 0, IPS), epoch=1)
    assert (
        first[session_variables.JOBS_VARIABLE]
        == str(tmp_path / "node-jobs")
        == str(member_jobs_root(tmp_path / "node-jobs", 0, "846367e93495"))
    )
    assert first[gang.SUBMISSION_VARIABLE] == RUN


def test_a_resumed_run_resumes_its_members_only_in_its_first_epoch(tmp_path: Path) -> None:
    sessions = SessionGang(training(), {}, tmp_path, session_variables.RESUME, RUN)
    env = gang.rank_env(sessions.workload, 0, IPS)
    assert sessions.member(0, "n", env, epoch=1)[1][session_variables.RUN_VARIABLE] == session_variables.RESUME
    assert sessions.member(0, "n", env, epoch=2)[1][session_variables.RUN_VARIABLE] == session_variables.LAUNCH


def test_a_torchrun_runtime_runs_under_torchrun_with_the_gangs_rendezvous() -> None:
    workload = training("Torchrun")
    member = member_workload(workload, gang.rank_env(workload, 0, IPS))
    assert member.command == ("python", "-m", "torch.distributed.run", "-m", "nodus.runtimes.sft")
    assert member.env["PET_NNODES"] == "2" and member.env["PET_MASTER_ADDR"] == "10.0.0.1"


def marker(kind: str, record: dict[str, object]) -> str:
    return status_stream.marker(kind, record).rstrip("\n")


def test_rank_0s_markers_are_the_runs_and_the_others_are_dropped(tmp_path: Path) -> None:
    sessions = session_gang(tmp_path)
    running = {"phase": "Running", "message": "Training, step 3", "costUSD": "0.00", "progress": {"step": 3}}
    text, changed = sessions.lines(
        0,
        [
            "loss 1.2",
            "\\::nodus-status::{}",  # a trainer line that looks like a marker, escaped by its session
            marker("status", running),
            marker("event", {"stage": "Training", "step": 3}),
            marker("outputs", {"files": {}}),
        ],
    )
    assert changed
    assert text.splitlines() == [
        "[rank 0] loss 1.2",
        "[rank 0] ::nodus-status::{}",
        marker("event", {"stage": "Training", "step": 3}),
        marker("outputs", {"files": {}}),
    ]
    parsed = status_stream.parse(text)
    assert parsed.status is None and parsed.events == [{"stage": "Training", "step": 3}]
    other, changed = sessions.lines(1, ["loss 1.3", marker("status", {"phase": "Failed"}), marker("event", {})])
    assert other == "[rank 1] loss 1.3\n" and not changed
    # The run's status: rank 0's stage and message while the gang runs, the gang's shape and cost over its own.
    report = {"phase": "Running", "message": "epoch 1: 2 ranks running", "topology": {"nodes": 2}, "costUSD": "0.10"}
    merged = sessions.merged(report)
    assert (merged["message"], merged["progress"], merged["costUSD"]) == ("Training, step 3", {"step": 3}, "0.10")
    assembling = sessions.merged({**report, "reason": "GangAssembling", "message": "assembling 2 nodes"})
    assert (assembling["reason"], assembling["message"]) == ("GangAssembling", "assembling 2 nodes")


def test_rank_0_ending_first_leaves_the_run_running_until_the_gang_ends(tmp_path: Path) -> None:
    # The controller takes an ended phase for the run's last status: the gang's attempts would stay Running.
    sessions = session_gang(tmp_path)
    done = {"phase": "Succeeded", "reason": "TrainerSucceeded", "summary": {"x": 1}}
    sessions.lines(0, [marker("status", done)])
    merged = sessions.merged({"phase": "Running", "message": "epoch 1: 2 ranks running", "costUSD": "0.10"})
    assert (merged["phase"], merged["message"]) == ("Running", "rank 0 ended Succeeded; the gang is ending")
    assert "reason" not in merged and merged["costUSD"] == "0.10"


def test_the_final_status_is_rank_0s_under_the_gangs_fields(tmp_path: Path) -> None:
    sessions = session_gang(tmp_path)
    done = {"phase": "Succeeded", "reason": "TrainerSucceeded", "summary": {"x": 1}, "costUSD": "0.00"}
    sessions.lines(0, [marker("final", done)])
    report = {"phase": "Succeeded", "reason": "TrainerSucceeded", "message": "all 2 ranks exited 0", "costUSD": "0.20"}
    final = sessions.final(report)
    assert (final["summary"], final["costUSD"], final["phase"]) == ({"x": 1}, "0.20", "Succeeded")
    # A rank whose session failed names its own cause; rank 0 exiting 0 without a final report is no success.
    sessions.lines(1, [marker("final", {"phase": "Failed", "reason": "OutOfMemory", "message": "killed"})])
    assert sessions.ended(1, 1) == ("rank 1: killed", "OutOfMemory")
    silent = session_gang(tmp_path)
    assert silent.ended(0, 2)[0] == "rank 0's session ended with status 2 and no final report"
    failed = silent.final(report)
    assert failed["phase"] == "Failed" and "without a final report" in failed["message"]
    assert json.dumps(failed)  # a marker's record
