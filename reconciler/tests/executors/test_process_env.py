"""The base environment of a process nodus starts (`executors/process_env.py`), and the environments each starter
builds from it without starting anything: the local service host's gateway, a Ray node of `nodus cluster up`, a gang
member's command on Ray (both kinds of gang). The processes themselves are read in /proc by
tests/test_process_environment.py (one apply) and test_local.py (a job with a Secret)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from nodus.errors import ConfigError
from nodus.reconciler.executors.process_env import (
    NODE_SESSION_SETTINGS,
    RAY_SETTINGS,
    STATE_STORE_SETTINGS,
    base_environment,
    pass_list,
    secret_variables,
)
from nodus.reconciler.executors.ray import cluster, session_variables
from nodus.reconciler.executors.ray.gang_member import GangMember, member_env
from nodus.reconciler.executors.ray.gang_sessions import SessionGang
from nodus.reconciler.executors.ray.launchers import CommandGang
from nodus.reconciler.executors.workload import Resources, SecretRef, Workload, WorkloadKey

TOKENS = {
    "HF_TOKEN": "canary-hf",
    "AWS_SECRET_ACCESS_KEY": "canary-aws",
    "GITHUB_TOKEN": "canary-gh",
    "NODUS_API_KEY": "canary-key",
    "NODUS_STATE": "postgresql://team:pw@db/nodus",
    "HTTPS_PROXY": "http://user:pw@proxy:3128",
    "PIP_INDEX_URL": "https://token@index/simple",
    "UV_INDEX_PRIVATE_PASSWORD": "canary-uv",
    "PGPASSWORD": "canary-pg",
    "RAY_AUTH_TOKEN": "canary-ray",
}
KEPT = {
    "PATH": "/usr/bin:/bin",
    "HOME": "/home/u",
    "TMPDIR": "/scratch",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "XDG_RUNTIME_DIR": "/run/user/1000",
    "CONTAINERS_CONF": "/etc/containers/nodus.conf",
    "HF_HOME": "/cache/hf",
    "HF_HUB_OFFLINE": "1",
    "CUDA_VISIBLE_DEVICES": "1,3",
    "OMP_NUM_THREADS": "2",
    "NODUS_HOME": "/state",
}


def test_the_base_environment_keeps_what_processes_need_and_no_credential() -> None:
    assert base_environment({**TOKENS, **KEPT}) == KEPT


def test_nodus_pass_env_names_and_prefixes_are_passed_and_a_bad_entry_is_named() -> None:
    environ = {**TOKENS, "NCCL_SOCKET_IFNAME": "eth1", "NCCL_IB_DISABLE": "1", "HTTPS_PROXY": "http://proxy:3128"}
    environ["NODUS_PASS_ENV"] = "HTTPS_PROXY, NCCL_*"
    passed = base_environment(environ)
    assert passed == {
        "NODUS_PASS_ENV": "HTTPS_PROXY, NCCL_*",
        "HTTPS_PROXY": "http://proxy:3128",
        "NCCL_SOCKET_IFNAME": "eth1",
        "NCCL_IB_DISABLE": "1",
    }
    assert pass_list({"NODUS_PASS_ENV": " A\tB,,C_* "}) == ["A", "B", "C_*"]
    with pytest.raises(ConfigError, match=r"NODUS_PASS_ENV: 'HF-TOKEN' is not a variable name or a PREFIX\* pattern"):
        base_environment({"NODUS_PASS_ENV": "PATH,HF-TOKEN"})
    with pytest.raises(ConfigError, match=r"NODUS_PASS_ENV: '\*' is not a variable name"):
        base_environment({"NODUS_PASS_ENV": "*"})


def test_what_one_start_asks_for_by_name_is_passed_too() -> None:
    assert base_environment(TOKENS, extra=["HF_TOKEN"]) == {"HF_TOKEN": "canary-hf"}
    assert base_environment(TOKENS, extra=STATE_STORE_SETTINGS) == {"PGPASSWORD": "canary-pg"}
    assert base_environment(TOKENS, extra=RAY_SETTINGS) == {"RAY_AUTH_TOKEN": "canary-ray"}


def test_the_variables_a_secret_is_read_from_are_its_env_keys_with_the_prefix() -> None:
    refs = [
        {"env": "HF_TOKEN", "secret": "hub", "key": "HF_TOKEN", "source": {"keys": ["HF_TOKEN"], "envPrefix": "PROD_"}},
        {"env": "WANDB_API_KEY", "secret": "wb", "key": "WANDB_API_KEY", "source": {"keys": ["WANDB_API_KEY"]}},
        {"env": "X", "secret": "f", "key": "X", "source": {"keys": ["X"], "provider": "File", "path": "/etc/x.env"}},
    ]
    assert secret_variables(refs) == ["PROD_HF_TOKEN", "WANDB_API_KEY"]
    bad = {"env": "X", "secret": "broken", "key": "X", "field": "spec.model.secret", "source": {"keys": []}}
    with pytest.raises(ConfigError, match=r"^spec.model.secret: Secret broken: not a Secret's spec: "):
        secret_variables([bad])


def test_the_gateway_alone_takes_the_state_stores_connection_settings(tmp_path: Path) -> None:
    from nodus.reconciler.controllers.endpoint import gateway_service, report_of
    from nodus.reconciler.inference.gateway_address import Address
    from nodus.reconciler.project import Project

    (tmp_path / "nodus.lock").write_text("lockfileVersion: 1\nenvironments: {}\n")
    project = Project.find(tmp_path)
    service = gateway_service(project, Address("127.0.0.1", 8400))
    assert service.pass_env == STATE_STORE_SETTINGS == ("PG*",)
    # A model server's report (a refresh, which opens the store) takes them too; its server does not.
    report = report_of(project, "InferenceEndpoint", "chat")
    assert report.pass_env == STATE_STORE_SETTINGS
    # Where this process found the state (NODUS_HOME, NODUS_STATE) is said, not left to the report's environment.
    assert report.command[report.command.index("--state-dir") + 1] == str(project.files.root)


def test_a_ray_node_of_cluster_up_gets_the_base_environment_rays_settings_and_no_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in {**TOKENS, "RAY_DEDUP_LOGS": "0", "NODUS_REGISTRY_PASSWORD": "the-nodes-own"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.9:6379")
    env = cluster._node_env(tmp_path / "token")
    assert not {name for name in TOKENS if name in env}, env
    assert "RAY_ADDRESS" not in env and env["RAY_DEDUP_LOGS"] == "0"
    assert env["NODUS_REGISTRY_PASSWORD"] == "the-nodes-own"  # a node session pulls the run's inputs with it
    assert (env["RAY_AUTH_MODE"], env["RAY_AUTH_TOKEN_PATH"]) == ("token", str(tmp_path / "token"))
    assert env["PATH"].split(os.pathsep)[0] == str(Path(sys.executable).parent)


def workload(kind: str = "Job", launcher: str = "Plain", **fields: object) -> Workload:
    return Workload(
        key=WorkloadKey(project="default", name="pair", kind=kind),  # type: ignore[arg-type]
        command=("python", "-c", "print('hi')"),
        resources=Resources(nodes=2, launcher=launcher),
        **fields,  # type: ignore[arg-type]
    )


def test_a_gang_members_command_gets_the_base_environment_what_its_kind_names_and_the_coordinators() -> None:
    node = {**TOKENS, **KEPT, "RAY_AUTH_TOKEN_PATH": "/etc/ray/token", "NODUS_REGISTRY_USERNAME": "robot"}
    given = {"RANK": "1", "HF_HOME": "/from/the/spec"}
    env = member_env(node, given, CommandGang(workload()).node_variables)
    assert env == {**KEPT, "PATH": env["PATH"], **given}
    assert env["PATH"] == os.pathsep.join([str(Path(sys.executable).parent), KEPT["PATH"]])
    ray = member_env(node, given, CommandGang(workload(launcher="Ray")).node_variables)
    assert ray["RAY_AUTH_TOKEN_PATH"] == "/etc/ray/token" and "HF_TOKEN" not in ray  # its inner nodes' auth

    secret = SecretRef(env="HF_TOKEN", secret="hub", key="HF_TOKEN", source={"keys": ["HF_TOKEN"]}, field="f")
    sessions = SessionGang(workload("TrainingJob", secrets=(secret,)), {}, Path("/jobs"), session_variables.LAUNCH, "r")
    assert sessions.node_variables == (*NODE_SESSION_SETTINGS, "HF_TOKEN")
    session = member_env(node, given, sessions.node_variables)
    # A member's node session reads its Secret (its supervisor hands the trainer only what the run names).
    assert session["HF_TOKEN"] == "canary-hf" and session["NODUS_REGISTRY_USERNAME"] == "robot"
    assert "AWS_SECRET_ACCESS_KEY" not in session and "RAY_AUTH_TOKEN_PATH" not in session


def test_a_member_started_here_sees_none_of_this_processs_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in TOKENS.items():
        monkeypatch.setenv(name, value)
    member = GangMember()
    script = 'echo "${HF_TOKEN:-none} ${AWS_SECRET_ACCESS_KEY:-none} ${GIVEN:-none}"'
    assert member.run(["sh", "-c", script], {"GIVEN": "given"}, None) == 0
    assert member.output(0).decode().strip() == "none none given"
    monkeypatch.setenv("NODUS_PASS_ENV", "NOT-A-NAME")
    refused = GangMember()
    assert refused.run(["sh", "-c", "true"], {}, None) == 127
    assert refused.output(0).decode().startswith("sh: NODUS_PASS_ENV: 'NOT-A-NAME' is not a variable name")
