"""The `nodus` CLI: validate (text, table, json, stdin, exit codes), schema, version, error rendering."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from nodus.cli.main import cli

REPO = Path(__file__).resolve().parents[2]
FULL = REPO / "specs" / "tests" / "fixtures" / "full"
BAD = """apiVersion: nodus.dev/v1beta1
kind: TrainingJob
metadata: {name: t}
spec:
  runtime: nodus/grpo-lora
  parameters: {learning_rate: 0.1}
  enviroment: {name: nodus/gsm8k@1.0.0}
"""


def run(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args), input=stdin)
    return result.exit_code, result.stdout, result.stderr


def test_validate_valid_folder_prints_a_summary() -> None:
    code, out, _ = run("validate", str(FULL))
    assert code == 0
    lines = out.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("✓ 28 valid resources (")
    assert "in 5 files" in lines[0]


def test_validate_errors_are_one_line_each_and_exit_1(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text(BAD)
    code, out, _ = run("validate", str(tmp_path / "bad.yaml"))
    assert code == 1
    lines = out.strip().splitlines()
    assert (
        lines[0]
        == f"{tmp_path / 'bad.yaml'}:7:3: TrainingJob/t: spec.enviroment: unknown field (did you mean environment?)"
    )
    assert lines[-1].startswith("✗ 1 error; 0 valid resources")


def test_validate_json_output() -> None:
    code, out, _ = run("validate", "-o", "json", "-", stdin=BAD)
    assert code == 1
    report = json.loads(out)
    assert report["valid"] is False
    assert report["errors"] == [
        {
            "file": "-",
            "line": 7,
            "column": 3,
            "resource": "TrainingJob/t",
            "field": "spec.enviroment",
            "message": "unknown field (did you mean environment?)",
            "severity": "error",
        }
    ]
    code, out, _ = run("validate", "-o", "json", str(FULL / "platform.yaml"))
    report = json.loads(out)
    assert code == 0 and report["valid"] is True
    assert [r["kind"] for r in report["resources"]] == ["InferenceEndpoint", "Volume", "Budget", "Secret"]


def test_validate_table_lists_resources() -> None:
    code, out, _ = run("validate", "-o", "table", str(FULL / "platform.yaml"))
    assert code == 0
    assert "KIND" in out and "InferenceEndpoint" in out and "support-bot" in out


def test_strict_turns_warnings_into_failure() -> None:
    text = "apiVersion: nodus.dev/v1\nkind: Environment\nmetadata: {name: e}\nspec: {version: 1.0.0, package: {image: 'r.example.com/a:latest'}}\n"
    code, out, _ = run("validate", "-", stdin=text)
    assert code == 0 and "warning: -:4:41: Environment/e: spec.package.image: not pinned by a sha256 digest" in out
    code, _, _ = run("validate", "--strict", "-", stdin=text)
    assert code == 1


def test_validate_nothing_found_is_an_error(tmp_path: Path) -> None:
    code, out, _ = run("validate", str(tmp_path))
    assert code == 1
    assert f"{tmp_path}:1:1: no nodus resources found" in out


def test_schema_prints_json_schema_and_lists_kinds() -> None:
    code, out, _ = run("schema", "tj")
    assert code == 0
    schema = json.loads(out)
    assert schema["title"] == "TrainingJob"
    assert "heldOutTasks" in json.dumps(schema)
    code, out, _ = run("schema")
    assert code == 0 and "TrainingRuntime" in out and "nodus.dev/v1beta1" in out


def test_unknown_kind_is_one_line_with_hint() -> None:
    code, _, err = run("schema", "TrainingJobs2")
    assert code == 1
    lines = err.strip().splitlines()
    assert lines[0] == "error: unknown kind 'TrainingJobs2' (did you mean TrainingJob?)"
    assert lines[1].startswith("hint: kinds: Environment,")


def test_version() -> None:
    code, out, _ = run("version", "-o", "json")
    assert code == 0
    assert json.loads(out)["distributions"]["nodus-specs"] == "0.1.0"
