"""`nodus cp` and `nodus logs` on a job folder made by hand (the local executor's layout): files and folders
(`-r`), missing parent folders, a destination ending in `/`, every output in the hint, earlier generations by
`--generation`, and one line (never a traceback) for every failure, with nothing left behind.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner

from nodus.cli.main import cli
from nodus.reconciler.executors.local.job import JobFiles, JobSpec, manifest_of, write_json

NAME = "quickstart"
MANY = [f"checkpoints/step-{n:02d}.bin" for n in range(12)]
"""More outputs than the hint used to list (it stopped at 8)."""


def write_generation(files: JobFiles, generation: int, steps: int, extra: Sequence[str] = ()) -> None:
    spec = JobSpec(name=NAME, project="default", command=("true",), generation=generation)
    write_json(files.spec, spec.to_json())
    write_json(files.status, {"phase": "Succeeded", "generation": generation})
    (files.outputs / "adapter" / "tokenizer").mkdir(parents=True)
    (files.outputs / "adapter" / "adapter_model.safetensors").write_bytes(bytes([generation]) * 64)
    (files.outputs / "adapter" / "tokenizer" / "vocab.json").write_text('{"a": 1}')
    (files.outputs / "results.json").write_text(json.dumps({"steps": steps}))
    for name in extra:
        (files.outputs / name).parent.mkdir(parents=True, exist_ok=True)
        (files.outputs / name).write_bytes(name.encode())
    write_json(files.outputs_manifest, manifest_of(files.outputs))
    files.logs.mkdir(parents=True)
    files.trainer_log.write_text(f"trained generation {generation} for {steps} steps\n")


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project whose TrainingJob was replaced once: generation 1 set aside, generation 2 at the top."""
    root = tmp_path / "project"
    root.mkdir()
    (root / "nodus.lock").write_text("")
    files = JobFiles.of(root / ".nodus" / "jobs", "default", NAME)
    write_generation(files.earlier(1), 1, steps=2)
    write_generation(files, 2, steps=5, extra=MANY)
    monkeypatch.chdir(tmp_path)
    return root


def nodus(project: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, [*args, "--path", str(project)])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


def test_a_file_goes_into_missing_folders_and_into_a_folder_named_with_a_slash(project: Path, tmp_path: Path) -> None:
    deep = tmp_path / "out" / "run" / "results.json"
    code, output = nodus(project, "cp", f"tj/{NAME}:outputs/results.json", str(deep))
    assert code == 0 and "verified" in output, output
    assert json.loads(deep.read_text()) == {"steps": 5}

    into = tmp_path / "fresh"
    code, output = nodus(project, "cp", f"tj/{NAME}:outputs/results.json", f"{into}/")
    assert code == 0, output
    assert into.is_dir() and json.loads((into / "results.json").read_text()) == {"steps": 5}

    # An existing folder without the slash is a folder to copy into too; an existing file is replaced (cp).
    code, output = nodus(project, "cp", f"tj/{NAME}:outputs/adapter/adapter_model.safetensors", str(into))
    assert code == 0 and (into / "adapter_model.safetensors").read_bytes() == bytes([2]) * 64
    (into / "results.json").write_text("old")
    assert nodus(project, "cp", f"tj/{NAME}:outputs/results.json", str(into / "results.json"))[0] == 0
    assert json.loads((into / "results.json").read_text()) == {"steps": 5}
    assert not [p for p in into.iterdir() if p.name.endswith(".partial")]


def test_a_folder_needs_r_and_is_copied_as_cp_r_does(project: Path, tmp_path: Path) -> None:
    code, output = nodus(project, "cp", f"tj/{NAME}:outputs/adapter/", str(tmp_path / "adapter"))
    assert code == 1 and "outputs/adapter of TrainingJob/quickstart is a folder (2 files): pass -r" in output
    assert "Traceback" not in output and not (tmp_path / "adapter").exists()

    code, output = nodus(project, "cp", "-r", f"tj/{NAME}:outputs/adapter", str(tmp_path / "mine"))
    assert code == 0 and "2 files" in output, output
    assert (tmp_path / "mine" / "adapter_model.safetensors").read_bytes() == bytes([2]) * 64
    assert (tmp_path / "mine" / "tokenizer" / "vocab.json").read_text() == '{"a": 1}'

    # Into an existing folder (or one named with a slash): the folder goes inside it under its own name.
    code, output = nodus(project, "cp", "-r", f"tj/{NAME}:outputs/adapter", str(tmp_path / "mine"))
    assert code == 0 and (tmp_path / "mine" / "adapter" / "tokenizer" / "vocab.json").is_file()
    code, output = nodus(project, "cp", "-r", f"tj/{NAME}:outputs", f"{tmp_path / 'all'}/")
    assert code == 0 and (tmp_path / "all" / "outputs" / "checkpoints" / "step-11.bin").is_file(), output

    (tmp_path / "a-file").write_text("")
    code, output = nodus(project, "cp", "-r", f"tj/{NAME}:outputs/adapter", str(tmp_path / "a-file"))
    assert code == 1 and "a-file is a file: the folder outputs/adapter of TrainingJob/quickstart" in output


def test_a_missing_output_lists_every_output(project: Path, tmp_path: Path) -> None:
    code, output = nodus(project, "cp", f"tj/{NAME}:outputs/result.json", str(tmp_path))
    assert code == 1 and "TrainingJob/quickstart has no output 'outputs/result.json'" in output
    hint = next(line for line in output.splitlines() if "outputs:" in line)
    for name in ["results.json", "adapter/adapter_model.safetensors", "adapter/tokenizer/vocab.json", *MANY]:
        assert name in hint, name


def test_an_earlier_generation_is_read_by_number(project: Path, tmp_path: Path) -> None:
    code, output = nodus(
        project, "cp", f"tj/{NAME}:outputs/results.json", str(tmp_path / "g1.json"), "--generation", "1"
    )
    assert code == 0, output
    assert json.loads((tmp_path / "g1.json").read_text()) == {"steps": 2}
    code, output = nodus(project, "cp", "-r", f"tj/{NAME}:outputs/adapter", str(tmp_path / "g1"), "--generation", "1")
    assert code == 0 and (tmp_path / "g1" / "adapter_model.safetensors").read_bytes() == bytes([1]) * 64
    code, output = nodus(
        project, "cp", f"tj/{NAME}:outputs/results.json", str(tmp_path / "g2.json"), "--generation", "2"
    )
    assert code == 0 and json.loads((tmp_path / "g2.json").read_text()) == {"steps": 5}
    code, output = nodus(project, "cp", f"tj/{NAME}:outputs/results.json", str(tmp_path), "--generation", "3")
    assert code == 1 and "job default/quickstart has no generation 3 (generations: 1, 2)" in output

    code, output = nodus(project, "logs", f"tj/{NAME}", "--generation", "1")
    assert code == 0 and output == "trained generation 1 for 2 steps\n"
    assert nodus(project, "logs", f"tj/{NAME}")[1] == "trained generation 2 for 5 steps\n"


def test_a_run_still_going_points_at_the_earlier_generations(project: Path, tmp_path: Path) -> None:
    files = JobFiles.of(project / ".nodus" / "jobs", "default", NAME)
    files.outputs_manifest.unlink()
    write_json(files.status, {"phase": "Running", "generation": 2})
    code, output = nodus(project, "cp", f"tj/{NAME}:outputs/results.json", str(tmp_path))
    assert code == 1 and "TrainingJob/quickstart has no outputs: it has not finished" in output
    assert "earlier generations: 1 (nodus cp tj/quickstart:outputs/PATH DEST --generation N)" in output


def test_failures_are_one_line_and_leave_nothing_behind(project: Path, tmp_path: Path) -> None:
    files = JobFiles.of(project / ".nodus" / "jobs", "default", NAME)
    # A file changed after it was collected: nothing of the folder is copied, not even the folders.
    (files.outputs / "adapter" / "tokenizer" / "vocab.json").write_text("tampered")
    code, output = nodus(project, "cp", "-r", f"tj/{NAME}:outputs/adapter", str(tmp_path / "new" / "adapter"))
    assert code == 1 and "outputs/adapter/tokenizer/vocab.json of TrainingJob/quickstart no longer matches" in output
    assert not (tmp_path / "new").exists()

    # Under a file, where no folder can be: one line naming the path.
    (tmp_path / "plain").write_text("")
    code, output = nodus(project, "cp", f"tj/{NAME}:outputs/results.json", str(tmp_path / "plain" / "x.json"))
    assert code == 1 and f"{tmp_path / 'plain'} is not a folder" in output and "Traceback" not in output

    # A link inside the destination is never written through.
    (files.outputs / "adapter" / "tokenizer" / "vocab.json").write_text('{"a": 1}')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "dest" / "outputs").mkdir(parents=True)
    os.symlink(elsewhere, tmp_path / "dest" / "outputs" / "checkpoints")
    code, output = nodus(project, "cp", "-r", f"tj/{NAME}:outputs", str(tmp_path / "dest"))
    assert code == 1 and "is a symbolic link" in output
    assert list(elsewhere.iterdir()) == []

    code, output = nodus(project, "cp", f"tj/{NAME}:results.json", str(tmp_path))
    assert code == 1 and "is not KIND/NAME:outputs/PATH" in output


def test_a_copy_never_writes_through_or_reads_a_link(project: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("mine")
    into = tmp_path / "down"
    into.mkdir()
    (into / ".results.json.partial").symlink_to(victim)  # where a copy used to be written first
    code, output = nodus(project, "cp", f"tj/{NAME}:outputs/results.json", str(into))
    assert code == 0, output
    assert victim.read_text() == "mine"
    assert not (into / "results.json").is_symlink() and json.loads((into / "results.json").read_text()) == {"steps": 5}

    # A folder of the outputs swapped for a link after they were recorded: never read, even with the same bytes.
    files = JobFiles.of(project / ".nodus" / "jobs", "default", NAME)
    twin = tmp_path / "twin"
    (files.outputs / "adapter").rename(twin)
    (files.outputs / "adapter").symlink_to(twin, target_is_directory=True)
    code, output = nodus(project, "cp", "-r", f"tj/{NAME}:outputs/adapter", str(tmp_path / "mine"))
    assert code == 1 and "outputs/adapter of TrainingJob/quickstart is a symbolic link" in output, output
    assert not (tmp_path / "mine").exists()
