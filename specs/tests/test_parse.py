"""parse_resources: valid documents become models; bad ones become one located line each."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodus.errors import SpecError
from nodus.specs import AgentRun, Environment, TrainingJob, parse_resources, parse_text

FULL = Path(__file__).parent / "fixtures" / "full"


def errors_of(text: str) -> list[str]:
    return [str(p) for p in parse_text(text, "x.yaml").errors]


def test_full_fixtures_are_valid() -> None:
    result = parse_resources([FULL])
    assert result.errors == []
    assert {p.resource.KIND for p in result.resources} == {
        "Environment",
        "Agent",
        "AgentRun",
        "AgentGroup",
        "InferenceEndpoint",
        "Volume",
        "Budget",
        "Secret",
        "TrainingJob",
        "TrainingRuntime",
        "Job",
    }


def test_fields_use_the_seeds_camel_case_and_python_snake_case() -> None:
    result = parse_resources([FULL / "training.yaml"])
    job = next(p.resource for p in result.resources if isinstance(p.resource, TrainingJob))
    assert job.spec.environment is not None
    assert job.spec.environment.train_tasks == 50
    assert str(job.spec.max_cost_usd) == "5.00"
    dumped = job.to_yaml_dict()
    assert dumped["spec"]["environment"]["heldOutTasks"] == 64
    assert dumped["spec"]["maxCostUSD"] == "5.00"
    assert dumped["spec"]["expectedDuration"] == "1h30m"


def test_snake_case_is_not_accepted_in_yaml() -> None:
    text = (FULL / "training.yaml").read_text().replace("maxCostUSD:", "max_cost_usd:", 1)
    assert any("spec.max_cost_usd: unknown field (did you mean maxCostUSD?)" in e for e in errors_of(text))


def test_run_in_group_takes_its_name_from_group_and_task_key() -> None:
    result = parse_resources([FULL / "agents.yaml"])
    run = next(p.resource for p in result.resources if isinstance(p.resource, AgentRun))
    assert run.metadata.name == "batch-b"


@pytest.mark.parametrize(
    ("snippet", "expected"),
    [
        ("metadata: {name: Bad_Name}", "x.yaml:3:18: Environment/Bad_Name: metadata.name: must be a DNS label"),
        ("metadata: {name: e}\nspec: {version: 1.0, package: {path: .}}", "spec.version: must be a semantic version"),
        (
            "metadata: {name: e}\nspec: {version: 1.0.0, package: {path: ., pip: {name: a, version: 1.0.0}}}",
            "spec.package: set exactly one of pip, image or path (got pip, path)",
        ),
        (
            "metadata: {name: e}\nspec: {version: 1.0.0, package: {pip: {name: a, version: '>=1'}}}",
            "spec.package.pip.version: must be one exact version such as 1.0.0, not a range (got '>=1')",
        ),
        (
            "metadata: {name: e}\nspec: {version: 1.0.0, package: {path: .}, rewardType: binary}",
            "spec.rewardType: must be one of Binary, Continuous (got 'binary'); did you mean Binary?",
        ),
        (
            "metadata: {name: e}\nspec: {version: 1.0.0, package: {path: .}, grading: {maxParalel: 2}}",
            "spec.grading.maxParalel: unknown field (did you mean maxParallel?)",
        ),
    ],
)
def test_environment_errors(snippet: str, expected: str) -> None:
    text = "apiVersion: nodus.dev/v1\nkind: Environment\n" + snippet + "\n"
    found = errors_of(text)
    assert any(expected in e for e in found), found


TJ = """apiVersion: nodus.dev/v1beta1
kind: TrainingJob
metadata: {name: t}
spec:
  runtime: nodus/grpo-lora
"""


@pytest.mark.parametrize(
    ("spec_lines", "expected"),
    [
        ("  model: {uri: hf://Qwen/Qwen3-0.6B}", "spec.model.uri: must pin the revision to a 40-character commit"),
        ("  model: {uri: hf://Qwen/Qwen3-0.6B@main}", "the revision must be a 40-character lowercase hex commit"),
        ("  environment: {name: graph-coloring}", "spec.environment.name: must be [project/]name@version"),
        ("  environment: {name: Nodus/gc@1.0.0}", "with DNS-label names"),
        ("  maxCostUSD: 5.5", 'spec.maxCostUSD: must be a decimal string such as "5.00" (quote it: floats round)'),
        ('  maxCostUSD: "-1"', "spec.maxCostUSD: must be a non-negative decimal amount"),
        ("  env: {MASTER_ADDR: x}", "spec.env: MASTER_ADDR is set by nodus for every rank"),
        ("  env: {NODE_RANK: '0'}", "NODE_RANK is set by nodus"),
        ("  env: {PET_NNODES: '2'}", "PET_NNODES is set by nodus"),
        ("  resources: {nodes: 9}", "spec.resources.nodes: must be less than or equal to 8 (got 9)"),
        ("  resources: {gpu: {type: [H100]}}", "spec.resources.gpu.type[0]: must be a GPU type id"),
        ("  expectedDuration: soon", "spec.expectedDuration: must be a duration such as 90s, 15m, 1h30m or 2d"),
        ("  mode: Evaluate", "spec: mode Evaluate needs an environment or evaluation.tasks"),
        ("  parameters: [1, 2]", "spec.parameters: must be a mapping of fields (got a list)"),
    ],
)
def test_training_job_errors(spec_lines: str, expected: str) -> None:
    found = errors_of(TJ + spec_lines + "\n")
    assert any(expected in e for e in found), found


@pytest.mark.parametrize(
    ("distributed", "expected"),
    [
        ("{nodes: 2, totalGPUs: 16}", "spec.distributed: set exactly one of nodes or totalGPUs"),
        ("{network: Global}", "spec.distributed: set exactly one of nodes or totalGPUs"),
        ("{nodes: 1}", "spec.distributed.nodes: must be greater than or equal to 2 (got 1)"),
        ("{nodes: 9}", "spec.distributed.nodes: must be less than or equal to 8 (got 9)"),
        ("{nodes: 2, gpusPerNode: 3}", "spec.distributed.gpusPerNode: must be one of 1, 2, 4, 8 (got 3)"),
        ("{nodes: 2, startupTimeout: 2m}", "spec.distributed.startupTimeout: must be between 5m and 60m (got 2m)"),
        ("{nodes: 2, startupTimeout: 61m}", "must be between 5m and 60m (got 1h1m)"),
        ("{nodes: 2, network: global}", "did you mean Global?"),
    ],
)
def test_job_gang_rules(distributed: str, expected: str) -> None:
    text = f"apiVersion: nodus.dev/v1beta1\nkind: Job\nmetadata: {{name: j}}\nspec:\n  command: [x]\n  distributed: {distributed}\n"
    found = errors_of(text)
    assert any(expected in e for e in found), found


def test_job_command_string_is_split_like_a_shell() -> None:
    text = (
        "apiVersion: nodus.dev/v1beta1\nkind: Job\nmetadata: {name: j}\nspec: {command: \"torchrun 'my script.py'\"}\n"
    )
    result = parse_text(text)
    assert result.errors == []
    assert result.resources[0].resource.spec.command == ["torchrun", "my script.py"]  # type: ignore[attr-defined]


AG = "apiVersion: nodus.dev/v1\nkind: AgentGroup\nmetadata: {name: g}\nspec:\n  agent: a\n"


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        ("  limits: {maxActive: 0}", "spec.limits.maxActive: must be greater than or equal to 1 (got 0)"),
        ("  limits: {maxActive: 1001}", "spec.limits.maxActive: must be less than or equal to 1000 (got 1001)"),
        ("  limits: {maxCostUSD: '1'}\n  maxCostUSD: '2'", "set the group cost cap once"),
        (
            "  evaluation: {environment: nodus/a@1.0.0, tasks: 60, repetitions: 2}",
            "an evaluation batch is at most 100 cases including repetitions (got 120)",
        ),
        ("  evaluation: {environment: nodus/a@1.0.0, tasks: 2, timeout: 30s}", "must be between 1m and 24h (got 30s)"),
        ("  evaluation: {environment: nodus/a@1.0.0, tasks: 2, timeout: 25h}", "must be between 1m and 24h"),
        ("  evaluation: {environment: nodus/a, tasks: 2}", "the version is required"),
    ],
)
def test_agent_group_rules(lines: str, expected: str) -> None:
    found = errors_of(AG + lines + "\n")
    assert any(expected in e for e in found), found


@pytest.mark.parametrize(
    ("run", "expected"),
    [
        (
            "metadata: {name: wrong}\nspec: {agent: a, group: g, taskKey: k, input: hi}",
            "a run in group g is named g-k; leave metadata.name out or set exactly that",
        ),
        ("metadata: {name: r}\nspec: {agent: a, taskKey: k, input: hi}", "group and taskKey go together"),
        ("metadata: {name: r}\nspec: {agent: a, dependsOn: [x], input: hi}", "dependsOn names task keys of a group"),
        ("spec: {agent: a, input: hi}", "metadata: required field is missing"),
        ("spec: {agent: a, group: g, taskKey: Bad, input: hi}", "spec.taskKey: must be a DNS label"),
    ],
)
def test_agent_run_rules(run: str, expected: str) -> None:
    found = errors_of("apiVersion: nodus.dev/v1\nkind: AgentRun\n" + run + "\n")
    assert any(expected in e for e in found), found


def test_agent_run_input_limit() -> None:
    big = "x" * (256 * 1024 + 1)
    found = errors_of(
        f"apiVersion: nodus.dev/v1\nkind: AgentRun\nmetadata: {{name: r}}\nspec: {{agent: a, input: {big}}}\n"
    )
    assert any("input is larger than 256 KiB" in e for e in found)


def test_run_agent_must_match_its_group() -> None:
    text = AG + "---\napiVersion: nodus.dev/v1\nkind: AgentRun\nspec: {agent: b, group: g, taskKey: k, input: hi}\n"
    found = errors_of(text)
    assert any("AgentRun/g-k: spec.agent: must be 'a', the agent of group g (got 'b')" in e for e in found), found


def test_secret_values_are_refused() -> None:
    text = "apiVersion: nodus.dev/v1\nkind: Secret\nmetadata: {name: s}\nspec: {keys: [A], data: {A: c2VjcmV0}}\n"
    assert any("secret values never go in git" in e for e in errors_of(text))


def test_kind_and_api_version_problems() -> None:
    text = (
        "apiVersion: nodus.dev/v1\nkind: Trainingjob\nmetadata: {name: a}\n---\n"
        "apiVersion: nodus.dev/v1\nkind: TrainingJob\nmetadata: {name: b}\n---\n"
        "apiVersion: nodus.dv/v1\nkind: Agent\nmetadata: {name: c}\n---\n"
        "apiVersion: nodus.dev/v1\nkind: Gizmo\nmetadata: {name: d}\n"
    )
    found = errors_of(text)
    assert "x.yaml:2:7: Trainingjob/a: kind: unknown kind 'Trainingjob' (did you mean TrainingJob?)" in found
    assert (
        "x.yaml:5:13: TrainingJob/b: apiVersion: TrainingJob is served at nodus.dev/v1beta1 (got nodus.dev/v1)" in found
    )
    assert "x.yaml:9:13: Agent/c: apiVersion: 'nodus.dv/v1' is not a nodus API (did you mean nodus.dev/v1?)" in found
    assert any(e.startswith("x.yaml:14:7: Gizmo/d: kind: unknown kind 'Gizmo'; one of Environment,") for e in found)


def test_duplicate_keys_are_reported() -> None:
    text = "apiVersion: nodus.dev/v1\nkind: Secret\nmetadata: {name: s}\nspec:\n  keys: [A]\n  keys: [B]\n"
    assert "x.yaml:6:3: Secret/s: spec.keys: duplicate key 'keys' (YAML would keep the last one)" in errors_of(text)


def test_broken_yaml_is_one_located_error() -> None:
    found = errors_of("apiVersion: nodus.dev/v1\nkind: [Environment\n")
    assert len(found) == 1
    assert found[0].startswith("x.yaml:3:1: invalid YAML:")


def test_alias_bombs_are_refused() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 8)]
    found = errors_of("\n".join(lines) + "\n")
    assert len(found) == 1 and "more than 100000 values once aliases are expanded" in found[0]


def test_status_is_ignored_with_a_warning() -> None:
    text = (FULL / "platform.yaml").read_text().split("---")[0] + "status: {phase: Running}\n"
    result = parse_text(text, "x.yaml")
    assert result.errors == []
    assert [w.message for w in result.warnings] == ["status is never read from git; it is ignored"]


def test_unpinned_image_is_a_warning_not_an_error() -> None:
    text = "apiVersion: nodus.dev/v1\nkind: Environment\nmetadata: {name: e}\nspec: {version: 1.0.0, package: {image: 'r.example.com/a/b:latest'}}\n"
    result = parse_text(text, "x.yaml")
    assert result.errors == []
    assert result.warnings[0].field == "spec.package.image"
    assert isinstance(result.resources[0].resource, Environment)


def test_same_kind_and_name_twice_names_both_files(tmp_path: Path) -> None:
    body = "apiVersion: nodus.dev/v1\nkind: Secret\nmetadata: {name: s}\nspec: {keys: [A]}\n"
    (tmp_path / "a.yaml").write_text(body)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.yml").write_text("# comment\n" + body)
    result = parse_resources([tmp_path])
    assert [str(e) for e in result.errors] == [
        f"{tmp_path / 'sub' / 'b.yml'}:2:1: Secret/s: defined twice: here and at {tmp_path / 'a.yaml'}:1:1"
    ]
    assert len(result.resources) == 1


def test_folders_are_read_recursively_and_other_yaml_is_skipped(tmp_path: Path) -> None:
    (tmp_path / "deep" / "er").mkdir(parents=True)
    (tmp_path / "deep" / "er" / "s.yaml").write_text(
        "apiVersion: nodus.dev/v1\nkind: Secret\nmetadata: {name: s}\nspec: {keys: [A]}\n"
    )
    (tmp_path / "compose.yaml").write_text("services: {web: {image: nginx}}\n")
    (tmp_path / ".github").mkdir()
    (tmp_path / ".github" / "ci.yml").write_text("on: push\n")
    (tmp_path / "notes.txt").write_text("not yaml")
    result = parse_resources([tmp_path])
    assert result.errors == []
    assert [p.resource.ref for p in result.resources] == ["Secret/s"]
    assert result.skipped == 1
    # A file named explicitly must hold nodus resources only.
    explicit = parse_resources([tmp_path / "compose.yaml"])
    assert any("apiVersion: required field is missing" in str(e) for e in explicit.errors)


def test_missing_path_and_non_utf8(tmp_path: Path) -> None:
    (tmp_path / "bin.yaml").write_bytes(b"\xff\xfe\x00")
    result = parse_resources([tmp_path / "nope.yaml", tmp_path / "bin.yaml"])
    assert [e.message for e in result.errors] == ["no such file or folder", "not UTF-8 text"]


def test_raise_for_errors_gives_one_spec_error() -> None:
    result = parse_text("apiVersion: nodus.dev/v1\nkind: Secret\nmetadata: {name: s}\nspec: {}\n", "x.yaml")
    with pytest.raises(SpecError) as info:
        result.raise_for_errors()
    assert info.value.problems == ["x.yaml:4:7: Secret/s: spec.keys: required field is missing"]


def test_money_has_one_spelling_per_amount() -> None:
    from decimal import Decimal

    from nodus.specs.types import format_usd

    spelled = {text: format_usd(Decimal(text)) for text in ("20", "20.0", "20.00", "5.5", "0.0015", "0.0050", "0")}
    assert spelled == {
        "20": "20.00",
        "20.0": "20.00",
        "20.00": "20.00",
        "5.5": "5.50",
        "0.0015": "0.0015",
        "0.0050": "0.005",
        "0": "0.00",
    }


def test_parameters_must_be_finite_numbers(tmp_path: Path) -> None:
    text = (
        "apiVersion: nodus.dev/v1beta1\nkind: TrainingJob\nmetadata: {name: tj}\n"
        "spec: {runtime: nodus/grpo-lora, parameters: {lora: {dropout: .nan}}}\n"
    )
    result = parse_text(text, "job.yaml")
    assert len(result.errors) == 1
    problem = result.errors[0]
    assert problem.field == "spec.parameters" and problem.message == "lora: dropout: must be a finite number (got nan)"


@pytest.mark.parametrize("key", ["A", "str", "EndpointModel"])
def test_a_users_key_that_looks_like_a_union_branch_is_an_unknown_field(key: str) -> None:
    """Found by tests/test_validate_fuzz.py: an extra top-level `A:` was taken for a union branch's name and dropped
    from the location, which then had nothing left to name."""
    found = errors_of(TJ + f"{key}: ''\n")
    assert any(f"{key}: unknown field" in e for e in found), found
