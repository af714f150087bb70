"""The gang's shape (`nodus.specs.topology`) and the Job spec's refusal of one nodus could not give a shape."""

from __future__ import annotations

import pytest

from nodus.specs import topology
from nodus.specs.parse import parse_text


@pytest.mark.parametrize(
    ("asked", "nodes", "per_node"),
    [
        ({"total_gpus": 16}, 2, 8),
        ({"total_gpus": 8}, 1, 8),  # a total one machine holds is a single-node Job
        ({"total_gpus": 3}, 1, 3),
        ({"total_gpus": 12}, 3, 4),
        ({"total_gpus": 64}, 8, 8),
        ({"total_gpus": 16, "gpus_per_node": 4}, 4, 4),
        ({"nodes": 2}, 2, 1),
        ({"nodes": 2, "gpu_count": 8}, 2, 8),
        ({"nodes": 2, "gpus_per_node": 4, "gpu_count": 8}, 2, 4),
    ],
)
def test_the_shape_follows_the_guides_rules(asked: dict[str, int], nodes: int, per_node: int) -> None:
    shape = topology.resolve(**asked)
    assert (shape.nodes, shape.gpus_per_node) == (nodes, per_node)


@pytest.mark.parametrize(
    ("asked", "message"),
    [
        ({"total_gpus": 13}, "cannot be split evenly into at most 8 nodes"),
        ({"total_gpus": 16, "gpus_per_node": 1}, "needs 16 nodes; a gang has at most 8"),
        ({"total_gpus": 12, "gpus_per_node": 8}, "not a multiple of gpusPerNode 8"),
    ],
)
def test_a_shape_that_cannot_be_made_is_refused(asked: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        topology.resolve(**asked)


def test_of_spec_reads_a_jobs_gang_and_a_trainingjobs_nodes() -> None:
    job = {"resources": {"gpu": {"type": ["h100-sxm-80g"], "count": 1}}, "distributed": {"totalGPUs": 16}}
    assert topology.of_spec(job).to_dict() == {"nodes": 2, "gpusPerNode": 8, "totalGPUs": 16}
    training = {"resources": {"gpu": {"type": ["h100-sxm-80g"], "count": 8}, "nodes": 2}, "distributed": {}}
    assert (topology.of_spec(training).nodes, topology.of_spec(training).gpus_per_node) == (2, 8)
    assert topology.of_spec({}).nodes == 1


def test_a_job_whose_gang_has_no_shape_does_not_validate() -> None:
    text = (
        "apiVersion: nodus.dev/v1beta1\nkind: Job\nmetadata: {name: odd}\nspec:\n  command: [x]\n"
        "  resources: {gpu: {type: [h100-sxm-80g]}}\n  distributed: {totalGPUs: 13}\n"
    )
    (problem,) = parse_text(text, "odd.yaml").errors
    assert "distributed: totalGPUs 13 cannot be split evenly" in str(problem)
    cpu = "apiVersion: nodus.dev/v1beta1\nkind: Job\nmetadata: {name: cpu}\nspec:\n  command: [x]\n"
    (problem,) = parse_text(cpu + "  distributed: {totalGPUs: 16}\n", "cpu.yaml").errors
    assert "distributed.totalGPUs needs resources.gpu" in str(problem)
