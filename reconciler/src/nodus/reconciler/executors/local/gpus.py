"""The GPUs of this machine, for the local executor's capabilities (`LocalExecutor.capabilities.host_gpus`).

Who calls it: `LocalExecutor.capabilities`, which admission asks (through `nodus.reconciler.executors.choose`
`host_gpus`) before a plan is applied: a TrainingJob whose `spec.resources.gpu` this machine cannot meet is refused
(`Unschedulable`), never run on the CPU at $0.

What it reads: `$NODUS_LOCAL_GPUS` when set (a comma-separated list of the price table's type names, one per device,
`none` for none: what a user declares when nvidia-smi names a card nodus does not know), else
`nvidia-smi --query-gpu=name,memory.total`, each card named as the price table names it (`NVIDIA H100 80GB HBM3`
is `h100-sxm-80g`); a card it does not know keeps a name of its own (`nvidia-quadro-rtx-8000-48g`), which no
request names by accident. Read once per process: the cards of a machine do not change while nodus runs.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
from typing import Final

from nodus.builder.host_programs import which

from ..protocol import HostGpus

VARIABLE: Final = "NODUS_LOCAL_GPUS"
NVIDIA_SMI_TIMEOUT_S: Final = 10.0
KNOWN: Final = (
    # (pattern on the lower-cased name, the smallest memory in GiB it needs or 0, the price table's type)
    (r"\bb200\b", 0, "b200-180g"),
    (r"\bh200\b", 0, "h200-141g"),
    (r"\bh100\b.*\b(pcie|nvl)\b", 0, "h100-pcie-80g"),
    (r"\bh100\b", 0, "h100-sxm-80g"),
    (r"\ba100\b", 60, "a100-80g"),
    (r"\ba100\b", 0, "a100-40g"),
    (r"\bl40s\b", 0, "l40s-48g"),
    (r"\ba10\b", 0, "a10-24g"),
    (r"\brtx 4090\b", 0, "rtx4090-24g"),
    (r"\bl4\b", 0, "l4-24g"),
)


@functools.cache
def host_gpus() -> HostGpus:
    """This machine's GPUs, as `$NODUS_LOCAL_GPUS` declares them or nvidia-smi lists them."""
    declared = os.environ.get(VARIABLE)
    if declared is not None:
        names = [] if declared.strip().lower() in ("", "none") else [part.strip() for part in declared.split(",")]
        return HostGpus(tuple(name for name in names if name), f"${VARIABLE}")
    program = which("nvidia-smi")
    if program is None:
        return HostGpus((), "nvidia-smi not found")
    try:
        done = subprocess.run(
            [program, "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=NVIDIA_SMI_TIMEOUT_S,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"},
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return HostGpus((), f"nvidia-smi failed: {exc}")
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        return HostGpus((), f"nvidia-smi exited {done.returncode}" + (f": {said[0]}" if said else ""))
    return HostGpus(parse_nvidia_smi(done.stdout), "nvidia-smi")


def parse_nvidia_smi(text: str) -> tuple[str, ...]:
    """One type name per line of `nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits`."""
    found = []
    for line in text.splitlines():
        name, _, memory = line.rpartition(",")
        if not name.strip():
            continue
        found.append(type_name(name.strip(), _mebibytes(memory)))
    return tuple(found)


def type_name(name: str, mebibytes: int) -> str:
    """The price table's name of a card (`NVIDIA A100-SXM4-80GB`, 81920 MiB: `a100-80g`), else one of its own."""
    lowered = name.lower().replace("-", " ")
    gibibytes = round(mebibytes / 1024)
    for pattern, least, kind in KNOWN:
        if re.search(pattern, lowered) and gibibytes >= least:
            return kind
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return f"{slug}-{gibibytes}g" if gibibytes else slug


def _mebibytes(text: str) -> int:
    try:
        return int(float(text.strip()))
    except ValueError:
        return 0
