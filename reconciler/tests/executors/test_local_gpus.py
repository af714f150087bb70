"""The local executor's GPUs: nvidia-smi's names as the price table names them, a declared list, and what a GPU
request asks of them (`HostGpus.unschedulable`). No GPU or nvidia-smi needed: the output is given."""

from __future__ import annotations

import pytest

from nodus.reconciler.executors.local import gpus
from nodus.reconciler.executors.protocol import HostGpus
from nodus.reconciler.executors.workload import GpuResources, Resources


def test_nvidia_smi_names_become_the_price_tables() -> None:
    text = (
        "NVIDIA H100 80GB HBM3, 81559\nNVIDIA H100 PCIe, 81559\nNVIDIA A100-SXM4-40GB, 40960\n"
        "NVIDIA A100-SXM4-80GB, 81920\nNVIDIA GeForce RTX 4090, 24564\nNVIDIA L4, 23034\nNVIDIA H200, 143771\n"
        "Quadro RTX 8000, 49152\n"
    )
    assert gpus.parse_nvidia_smi(text) == (
        "h100-sxm-80g",
        "h100-pcie-80g",
        "a100-40g",
        "a100-80g",
        "rtx4090-24g",
        "l4-24g",
        "h200-141g",
        "quadro-rtx-8000-48g",
    )


def test_a_declared_list_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    gpus.host_gpus.cache_clear()
    monkeypatch.setenv(gpus.VARIABLE, "l4-24g, l4-24g")
    try:
        assert gpus.host_gpus() == HostGpus(("l4-24g", "l4-24g"), "$NODUS_LOCAL_GPUS")
        gpus.host_gpus.cache_clear()
        monkeypatch.setenv(gpus.VARIABLE, "none")
        assert gpus.host_gpus().describe() == "no GPU ($NODUS_LOCAL_GPUS)"
    finally:
        gpus.host_gpus.cache_clear()


def test_what_a_request_asks_of_the_host() -> None:
    def asking(*types: str, count: int = 1) -> Resources:
        return Resources(gpu=GpuResources(types=types, count=count))

    two = HostGpus(("l4-24g", "l4-24g"), "nvidia-smi")
    assert two.unschedulable(asking("h100-sxm-80g", "l4-24g", count=2)) is None
    assert two.unschedulable(None) is None and two.unschedulable(Resources()) is None
    assert two.unschedulable(asking("l4-24g", count=4)) == "asks for 4 GPUs of l4-24g; this host has 2 GPUs of l4-24g"
    none = HostGpus((), "nvidia-smi not found")
    assert none.unschedulable(asking("h100-sxm-80g", "a100-80g")) == (
        "asks for 1 GPU of h100-sxm-80g or a100-80g; this host has no GPU (nvidia-smi not found)"
    )
