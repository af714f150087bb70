"""`python -m nodus.reconciler.refresh` (what a service's supervisor runs when its readiness changes): a project that
is gone, or has no state yet, is nothing to tell (exit 0, nothing made), and a store it cannot open is one line on
stderr (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodus.reconciler.refresh import main


def test_a_gone_project_is_nothing_to_tell(tmp_path: Path) -> None:
    gone = tmp_path / "deleted-project"
    assert main(["--path", str(gone), "--state-dir", str(gone / ".nodus"), "InferenceEndpoint", "chat"]) == 0
    assert not gone.exists()


def test_a_store_it_cannot_open_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "nodus.lock").write_text("lockfileVersion: 1\nenvironments: {}\n")
    assert main(["--path", str(tmp_path), "InferenceEndpoint", "chat"]) == 0  # no state yet: nothing to tell
    assert not (tmp_path / ".nodus" / "state.db").exists()
    (tmp_path / ".nodus").mkdir()
    (tmp_path / ".nodus" / "state.db").write_bytes(b"not a database at all")
    assert main(["--path", str(tmp_path), "InferenceEndpoint", "chat"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("nodus refresh: ") and len(err.strip().splitlines()) == 1 and "Traceback" not in err
