"""What a run's processes agree on (nodus.runtimes.distributed): alone, a process's own checkpoints; in a real
two-process gloo group on loopback (as a gang's ranks are), only a checkpoint every process holds, and a baseline
kept only where both kept one."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from nodus.runtimes.distributed import agreed_checkpoint, checkpoints, everyone

pytestmark = pytest.mark.slow

WORKER = """
import json, sys
from pathlib import Path
import torch.distributed as dist
from nodus.runtimes.distributed import agreed_checkpoint, everyone
dist.init_process_group("gloo")
folder, flag = Path(sys.argv[1]), sys.argv[2] == "1"
found = agreed_checkpoint(folder, lambda line: print("log:", line, file=sys.stderr))
print(json.dumps({"checkpoint": found.name if found else None, "everyone": everyone(flag)}))
dist.destroy_process_group()
"""


def checkpoint(folder: Path, step: int, *, complete: bool = True) -> None:
    (folder / f"checkpoint-{step}").mkdir(parents=True)
    if complete:
        (folder / f"checkpoint-{step}" / "trainer_state.json").write_text("{}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def two_ranks(folders: list[Path], flags: list[bool]) -> list[dict[str, object]]:
    """Both ranks' answers, each run as its own process of a gloo group of two on loopback."""
    port = str(free_port())
    processes = []
    for rank, (folder, flag) in enumerate(zip(folders, flags, strict=True)):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}
        processes.append(
            subprocess.Popen(
                [sys.executable, "-c", WORKER, str(folder), "1" if flag else "0"],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    answers = []
    for process in processes:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
        answers.append(json.loads(out.strip().splitlines()[-1]))
    return answers


def test_alone_a_process_resumes_from_its_newest_complete_checkpoint(tmp_path: Path) -> None:
    checkpoint(tmp_path, 10)
    checkpoint(tmp_path, 20)
    checkpoint(tmp_path, 30, complete=False)  # interrupted while saving
    assert sorted(checkpoints(tmp_path)) == [10, 20]
    assert agreed_checkpoint(tmp_path) == tmp_path / "checkpoint-20"
    assert everyone(True) and not everyone(False)


def test_two_ranks_resume_from_the_newest_step_both_hold(tmp_path: Path) -> None:
    survivor, other = tmp_path / "rank-0", tmp_path / "rank-1"
    for step in (10, 20):
        checkpoint(survivor, step)
    checkpoint(other, 10)
    assert [a["checkpoint"] for a in two_ranks([survivor, other], [True, True])] == ["checkpoint-10"] * 2


def test_a_replaced_rank_with_nothing_makes_both_start_over(tmp_path: Path) -> None:
    survivor, replaced = tmp_path / "rank-0", tmp_path / "rank-1"
    checkpoint(survivor, 20)
    replaced.mkdir()
    answers = two_ranks([survivor, replaced], [True, False])
    assert [a["checkpoint"] for a in answers] == [None, None]
    assert [a["everyone"] for a in answers] == [False, False]  # the survivor's baseline is measured again too
