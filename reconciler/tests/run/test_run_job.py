"""`nodus run`'s flags compiled into a Job (`nodus.reconciler.run_job`), and the estimate of the Job they make.

Pure: no store, no executor. The seeds' two `nodus run` lines must compile into exactly the example files' Jobs.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest
import yaml

from nodus.reconciler.controllers.trainingjob import resources_of
from nodus.reconciler.planning.desired import desired_from
from nodus.reconciler.pricing.estimate import Facts, estimate_plain_job
from nodus.reconciler.pricing.prices import load_prices
from nodus.reconciler.run_job import (
    RunFlagError,
    RunRequest,
    compile_job,
    default_name,
    gpu_type_of,
    marked,
    validated,
)
from nodus.specs.parse import parse_resources

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "examples" / "multi-node"
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
TABLE = load_prices(environ={})
GPU_TYPES = list(TABLE.gpu)
TORCHRUN = ("torchrun", "train.py")


def compiled(**flags: object) -> dict[str, object]:
    command = flags.pop("command", TORCHRUN)
    return compile_job(RunRequest(command=command, **flags), GPU_TYPES, now=NOW)  # type: ignore[arg-type]


def refusal(**flags: object) -> str:
    with pytest.raises(RunFlagError) as caught:
        validated(compiled(**flags))
    assert "\n" not in caught.value.message
    return caught.value.message


@pytest.mark.parametrize(
    ("example", "flags"),
    [
        (
            "torchrun-2-node.yaml",
            {"name": "torchrun-2-node", "gpus": ("H100",), "nodes": 2, "launcher": "torchrun", "max_cost": "2.00"},
        ),
        (
            "torchrun-2-node-xp.yaml",
            {
                "name": "torchrun-2-node-xp",
                "gpus": ("H100",),
                "nodes": 2,
                "launcher": "torchrun",
                "network": "global",
                "transport": "auto",
                "startup_timeout": "15m",
                "max_cost": "2.00",
            },
        ),
    ],
)
def test_the_seeds_run_lines_compile_into_the_example_files(example: str, flags: dict[str, object]) -> None:
    path = EXAMPLES / example
    document = compiled(**flags)
    assert document == yaml.safe_load(path.read_text())  # as the file reads, field for field
    (from_file,) = desired_from(parse_resources([path]).resources)
    job = validated(document)
    assert job.document == from_file.document and job.spec_hash == from_file.spec_hash  # and as nodus reads it
    # The Job nodus run stores says who made it; nothing else differs.
    stored = validated(marked(document)).document
    assert stored["metadata"]["labels"] == {"nodus.dev/created-by": "nodus-run"}
    assert stored["spec"] == from_file.document["spec"]


def test_total_gpus_leaves_the_shape_to_nodus_and_gpus_per_node_sets_it() -> None:
    document = compiled(gpus=("H100",), total_gpus=16, launcher="torchrun")
    assert document["spec"]["distributed"] == {"totalGPUs": 16}  # type: ignore[index]
    assert document["spec"]["resources"] == {"gpu": {"type": ["h100-sxm-80g"]}}  # type: ignore[index]
    pinned = compiled(gpus=("H100",), total_gpus=16, gpus_per_node=4)
    assert pinned["spec"]["distributed"] == {"totalGPUs": 16, "gpusPerNode": 4}  # type: ignore[index]
    single = compiled(gpus=("A100", "h100-sxm-80g"), gpus_per_node=4)
    assert single["spec"] == {  # no gang: no distributed block
        "command": list(TORCHRUN),
        "resources": {"gpu": {"type": ["a100-80g", "h100-sxm-80g"], "count": 4}},
    }
    validated(document), validated(pinned), validated(single)


@pytest.mark.parametrize(
    ("typed", "spelled"),
    [
        ("plain", "Plain"),
        ("TORCHRUN", "Torchrun"),
        ("ray", "Ray"),
        ("Verl", "Verl"),
        ("accelerate", "Accelerate"),
        ("deepspeed", "Deepspeed"),
    ],
)
def test_each_launcher_is_spelled_as_the_spec_spells_it(typed: str, spelled: str) -> None:
    document = compiled(launcher=typed, nodes=2)
    assert document["spec"]["launcher"] == spelled  # type: ignore[index]
    assert validated(document).document["spec"]["launcher"] == spelled


@pytest.mark.parametrize(
    ("name", "gpu_type"),
    [
        ("H100", "h100-sxm-80g"),
        ("h100 pcie", "h100-pcie-80g"),
        ("A100", "a100-80g"),
        ("a100-40g", "a100-40g"),
        ("L4", "l4-24g"),  # not l40s-48g: names match segment by segment
        ("L40S", "l40s-48g"),
        ("RTX4090", "rtx4090-24g"),
        ("NVIDIA RTX 4090", "rtx4090-24g"),
        ("h200-141g", "h200-141g"),
    ],
)
def test_gpu_names_as_people_write_them_map_to_the_price_tables_types(name: str, gpu_type: str) -> None:
    assert gpu_type_of(name, GPU_TYPES) == gpu_type


def test_an_unknown_gpu_is_refused_listing_the_known_types() -> None:
    message = refusal(gpus=("X100",))
    assert message.startswith("--gpu X100: not a GPU type the price table knows; known: b200-180g, ")
    assert "h100-sxm-80g" in message and "l4-24g" in message


@pytest.mark.parametrize(
    ("flags", "start"),
    [
        ({"command": ()}, "--: no command to run"),
        ({"nodes": 2, "total_gpus": 16, "gpus": ("H100",)}, "--nodes and --total-gpus: give one of them"),
        ({"total_gpus": 16}, "--total-gpus 16: needs --gpu"),
        ({"gpus_per_node": 4}, "--gpus-per-node 4: needs --gpu"),
        ({"network": "global"}, "--network: places a gang's members: give --nodes or --total-gpus too"),
        ({"startup_timeout": "10m"}, "--startup-timeout: places a gang's members"),
        ({"gpus": ("H100",), "total_gpus": 13}, "--total-gpus 13: totalGPUs 13 cannot be split evenly"),
        ({"gpus": ("H100",), "total_gpus": 16, "gpus_per_node": 1}, "--total-gpus 16: totalGPUs 16 at gpusPerNode 1"),
        ({"nodes": 9}, "--nodes: must be less than or equal to 8"),
        ({"nodes": 1}, "--nodes: must be greater than or equal to 2"),
        ({"launcher": "mpi"}, "--launcher mpi: one of plain, torchrun, accelerate, deepspeed, ray, verl"),
        ({"nodes": 2, "network": "lan"}, "--network lan: one of colocated, regional, global"),
        ({"nodes": 2, "transport": "udp"}, "--transport udp: one of direct, auto"),
        ({"nodes": 2, "startup_timeout": "2m"}, "--startup-timeout: must be between 5m and 60m"),
        ({"env": ("NODUS_NODE_RANK=3",)}, "--env: NODUS_NODE_RANK is set by nodus for every rank"),
        ({"env": ("MASTER_ADDR=x",)}, "--env: MASTER_ADDR is set by nodus"),
        ({"env": ("NNODES=2",)}, "--env: NNODES is set by nodus"),
        ({"env": ("FOO",)}, "--env FOO: not K=V"),
        ({"outputs": ("model",)}, "--output model: not NAME=PATH"),
        ({"max_cost": "two dollars"}, "--max-cost: must be a non-negative decimal amount"),
        ({"timeout": "soon"}, "--timeout: must be a duration such as 90s"),
        ({"name": "Not_A_Label"}, "--name: must be a DNS label"),
    ],
)
def test_a_bad_flag_is_refused_in_one_line_naming_it(flags: dict[str, object], start: str) -> None:
    assert refusal(**flags).startswith(start)


def test_the_other_flags_land_in_their_spec_fields() -> None:
    document = compiled(
        command=("python", "train.py", "--lr", "1e-4"),
        name="tune",
        project="team-a",
        env=("HF_HUB_OFFLINE=1", "EMPTY="),
        working_dir="/work",
        timeout="2h",
        outputs=("model=/nodus/outputs/model",),
        max_cost="5",
    )
    assert document["metadata"] == {"name": "tune", "project": "team-a"}
    assert document["spec"] == {
        "command": ["python", "train.py", "--lr", "1e-4"],
        "workingDir": "/work",
        "env": {"HF_HUB_OFFLINE": "1", "EMPTY": ""},
        "maxCostUSD": "5",
        "timeout": "2h",
        "outputs": [{"name": "model", "path": "/nodus/outputs/model"}],
    }
    assert validated(document).key.project == "team-a"


def test_the_default_name_is_a_dns_label_from_the_command_and_the_time() -> None:
    name = default_name(TORCHRUN, NOW)
    assert name.startswith("run-") and len(name) == 12 and name == default_name(TORCHRUN, NOW)
    assert name != default_name(TORCHRUN, NOW.replace(second=1)) != default_name(("python",), NOW)
    assert validated(compiled()).key.name == name


def test_a_gangs_estimate_prices_every_member_and_shows_the_hold_and_the_assembly_bound() -> None:
    job = validated(compiled(gpus=("H100",), total_gpus=16, launcher="torchrun", timeout="1h")).document
    estimate = estimate_plain_job(job, Facts(now=NOW), TABLE).to_dict()
    assert estimate["resources"] == {"gpu": {"type": ["h100-sxm-80g"], "count": 8}, "nodes": 2}
    rate = TABLE.gpu_rate("h100-sxm-80g")
    assert rate is not None
    per_hour = rate * 16
    assert Decimal(estimate["perHourUSD"]) == per_hour
    assert Decimal(estimate["costUSD"]) == per_hour  # an hour's timeout: the ceiling of one attempt
    assert Decimal(estimate["gangHoldUSD"]) == per_hour
    # (2 members + 2 replacements) x 8 GPUs x (15m startup + 5m teardown) x 3 tries
    assert Decimal(estimate["assemblyBoundUSD"]) == (rate * 8 * 4 * Decimal(20) / 60 * 3).quantize(Decimal("0.0001"))
    assert "method" not in estimate and estimate["unpriced"] == []
    assert "resources: spec.resources and spec.distributed: 2 nodes of 8 GPUs (totalGPUs 16)" in estimate["basis"]


def test_a_job_without_a_timeout_has_a_first_hold_but_no_cost() -> None:
    job = validated(compiled(gpus=("L4",), max_cost="0.10")).document
    estimate = estimate_plain_job(job, Facts(now=NOW), TABLE)
    assert estimate.cost_usd is None and estimate.first_hold_usd == Decimal("0.10")  # held up to the cap
    assert estimate.cap_below_first_hold  # an hour of an L4 is more than $0.10: a dry run says it blocks
    assert [item.item for item in estimate.unpriced] == ["duration"]


def test_the_workload_gets_the_shape_the_estimate_priced() -> None:
    """`totalGPUs` reaches the executor resolved (2 nodes of 8), not as the 1-GPU default of `resources.gpu`."""
    job = validated(compiled(gpus=("H100",), total_gpus=16, launcher="torchrun")).document
    resources = resources_of(job["spec"])
    assert resources is not None and resources.gpu is not None
    assert (resources.nodes, resources.gpu.count, resources.gpu.types) == (2, 8, ("h100-sxm-80g",))
    assert resources.launcher == "Torchrun"
    gang = resources_of(validated(compiled(gpus=("L4",), nodes=2, gpus_per_node=4)).document["spec"])
    assert gang is not None and gang.gpu is not None and (gang.nodes, gang.gpu.count) == (2, 4)
