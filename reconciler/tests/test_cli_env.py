"""`nodus env init | test | describe` on a scaffolded package and on broken ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from nodus.cli.main import cli


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_scaffold_passes_its_own_test_and_describes_itself(tmp_path: Path) -> None:
    folder = tmp_path / "spell"
    code, out, _ = run("env", "init", "spell", "--dir", str(folder))
    assert code == 0 and "6 files written" in out
    code, out, _ = run("env", "test", str(folder), "-o", "json")
    report = json.loads(out)
    assert code == 0 and report["ok"] is True, report
    names = [c["name"] for c in report["checks"]]
    assert "train and test share no prompt" in names
    assert "grading is deterministic across two fresh processes" in names
    assert sum(n.split(" ")[1].isdigit() for n in names if n.startswith("fixture ")) == 3
    code, out, _ = run("env", "describe", str(folder), "-o", "json")
    described = json.loads(out)
    assert code == 0
    assert described["splits"] == {"train": 32, "test": 8}
    assert described["graders"]["adapter"] == "module"
    assert described["sampleTask"]["prompt"].startswith("Spell the word backwards")
    assert described["license"] == "Apache-2.0"


def test_init_is_idempotent_and_never_overwrites(tmp_path: Path) -> None:
    folder = tmp_path / "spell"
    assert run("env", "init", "spell", "--dir", str(folder))[0] == 0
    code, out, _ = run("env", "init", "spell", "--dir", str(folder))
    assert code == 0 and "nothing changed" in out
    (folder / "README.md").write_text("mine\n")
    code, _, err = run("env", "init", "spell", "--dir", str(folder))
    assert code == 1
    assert "README.md exists and differs from the scaffold; nothing was written" in err
    assert (folder / "README.md").read_text() == "mine\n"


def test_a_broken_reward_fails_the_test(tmp_path: Path) -> None:
    folder = tmp_path / "spell"
    run("env", "init", "spell", "--dir", str(folder))
    module = folder / "env" / "spell_env.py"
    module.write_text(module.read_text().replace("return 1.0 if found[-1].lower() == answer else 0.0", "return 'yes'"))
    code, out, _ = run("env", "test", str(folder))
    assert code == 1
    assert "✗ train gold answers of 20 tasks are Correct" in out
    assert "failed" in out.strip().splitlines()[-1]


def test_errors_name_the_file(tmp_path: Path) -> None:
    code, _, err = run("env", "test", str(tmp_path))
    assert code == 1 and "no environment.yaml here" in err
    (tmp_path / "environment.yaml").write_text(
        "apiVersion: nodus.dev/v1\nkind: Environment\nmetadata: {name: e}\n"
        "spec: {version: 1.0.0, package: {pip: {name: e, version: 1.0.0}}}\n"
    )
    code, _, err = run("env", "test", str(tmp_path))
    assert code == 1 and "only a local path package can be tested in place" in err


def test_a_rewritten_task_fails_the_scaffolds_fixtures_and_says_to_edit_fixtures_jsonl(tmp_path: Path) -> None:
    folder = tmp_path / "spell"
    assert run("env", "init", "spell", "--dir", str(folder))[0] == 0
    module = folder / "env" / "spell_env.py"
    # The user's own task (the word in capitals); the scaffold's fixture cases still expect it spelt backwards.
    module.write_text(module.read_text().replace('"answer": w[::-1]', '"answer": w.upper()'))
    code, out, _ = run("env", "test", str(folder), "-o", "json")
    assert code == 1
    failed = [check for check in json.loads(out)["checks"] if not check["ok"]]
    fixture = next(check for check in failed if check["name"] == "fixture 1 (full-reward)")
    assert fixture["detail"].startswith(f"{folder / 'fixtures.jsonl'}:1: case full-reward: expected Correct")
    assert "edit this line of fixtures.jsonl" in fixture["detail"] and "test[0]" in fixture["detail"]
    code, out, _ = run("env", "test", str(folder))
    assert code == 1 and "fixtures.jsonl:1: case full-reward" in out


def test_gsm8k_offline_says_how_to_use_the_shipped_sample(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = Path(__file__).resolve().parents[2] / "catalog" / "gsm8k"
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty cache: the hub dataset is not in it
    monkeypatch.delenv("HF_DATASETS_CACHE", raising=False)
    monkeypatch.delenv("NODUS_GSM8K_DATA_FILES", raising=False)
    code, out, _ = run("env", "test", str(folder), "-o", "json")
    assert code == 1
    loads = json.loads(out)["checks"][0]
    assert loads["name"] == "the environment loads" and not loads["ok"]
    sample = json.dumps({split: str(folder / "data" / f"{split}.jsonl") for split in ("train", "test")})
    assert f"to use the sample this package ships, set NODUS_GSM8K_DATA_FILES='{sample}'" in loads["detail"]
    monkeypatch.setenv("NODUS_GSM8K_DATA_FILES", sample)  # as the hint says
    code, out, _ = run("env", "test", str(folder), "-o", "json")
    assert code == 0 and json.loads(out)["ok"] is True


def test_the_package_lives_in_its_own_folder_so_run_artefacts_do_not_change_it(tmp_path: Path) -> None:
    """What runs leave in the folder `env init` made (state, logs, `nodus cp` copies, a saved dry run) is not in
    the package: its digest and file set stay the same, and a saved dry run is not applied."""
    from nodus.builder.package_files import package_files
    from nodus.builder.plan import source_digest

    folder = tmp_path / "spell"
    assert run("env", "init", "spell", "--dir", str(folder))[0] == 0
    spec = (folder / "environment.yaml").read_text()
    assert "path: env" in spec
    package = folder / "env"
    files, digest = package_files(package), source_digest(package)
    assert files == ["pyproject.toml", "spell_env.py"]
    (folder / "nodus.lock").write_text("lockfileVersion: 1\n")
    (folder / ".nodus").mkdir()
    (folder / "train.log").write_text("step 1\n")
    (folder / "results.json").write_text("{}")
    (folder / "outputs").mkdir()
    (folder / "outputs" / "curves.png").write_bytes(b"png")
    assert package_files(package) == files and source_digest(package) == digest
    assert (folder / ".gitignore").read_text().count(".nodus/") == 1  # git keeps the state out of the repository
    code, out, _ = run("env", "test", str(folder))
    assert code == 0, out
