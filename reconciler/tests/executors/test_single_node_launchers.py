"""Single-node launchers (`executors/local/single_node_launchers.py`): the command lines they make, and real jobs of
the local executor started under `torchrun --standalone` and `accelerate launch`, whose process sees the variables
its launcher sets (a distributed trainer's rank and world)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from nodus.errors import ConfigError
from nodus.reconciler.executors.local import LocalExecutor
from nodus.reconciler.executors.local.single_node_launchers import launched
from nodus.reconciler.executors.workload import Resources, Workload, WorkloadKey

PY = "/venv/bin/python"
PRINT = "import os; print(sorted(k for k in os.environ if k in SEEN))"
SEEN = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_RUN_ID", "ACCELERATE_MIXED_PRECISION", "ACCELERATE_USE_CPU")
EXPECTED = {
    # torchrun's elastic agent: the variables torch.distributed's env:// initialisation reads
    "Torchrun": ["LOCAL_RANK", "RANK", "TORCHELASTIC_RUN_ID", "WORLD_SIZE"],
    # accelerate launch of one process: its own settings, which Accelerator() reads
    "Accelerate": ["ACCELERATE_MIXED_PRECISION", "ACCELERATE_USE_CPU"],
}


def test_the_command_lines() -> None:
    module = (PY, "-m", "nodus.runtimes.sft", "--x")
    assert launched(module, "Plain", 0, PY, "tj") == module
    assert launched(module, "Torchrun", 0, PY, "tj") == (
        PY, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1", "--nproc-per-node", "1",
        "-m", "nodus.runtimes.sft", "--x",
    )  # fmt: skip
    assert launched((PY, "train.py"), "Torchrun", 4, PY, "tj")[-3:] == ("--nproc-per-node", "4", "train.py")
    assert launched(module, "Accelerate", 2, PY, "tj") == (
        PY, "-m", "accelerate.commands.launch", "--num_machines", "1", "--num_processes", "2",
        "-m", "nodus.runtimes.sft", "--x",
    )  # fmt: skip
    assert launched(("bash", "run.sh"), "Accelerate", 0, PY, "tj")[-4:] == ("--cpu", "--no_python", "bash", "run.sh")
    assert launched(("torchrun", "train.py"), "Torchrun", 1, PY, "tj") == ("torchrun", "train.py")  # as written
    with pytest.raises(ConfigError, match="tj: launcher 'Deepspeed' does not start single-node jobs here"):
        launched(module, "Deepspeed", 1, PY, "tj")


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["Torchrun", "Accelerate"])
def test_a_job_runs_under_its_launcher(tmp_path: Path, launcher: str) -> None:
    executor = LocalExecutor(tmp_path / "jobs", python=sys.executable)
    workload = Workload(
        key=WorkloadKey(project="default", name="launched", kind="Job"),
        command=(sys.executable, "-c", f"SEEN = {SEEN!r}; {PRINT}"),
        resources=Resources(launcher=launcher),
    )
    executor.launch(workload)
    status = executor.wait("default", "launched", timeout_s=120)
    log = executor.files("default", "launched").trainer_log.read_text()
    assert status["phase"] == "Succeeded", log
    assert str(EXPECTED[launcher]) in log, log
