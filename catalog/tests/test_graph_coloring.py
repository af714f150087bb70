"""nodus/graph-coloring: generated k-colourable graphs, graded by checking the colouring."""

from __future__ import annotations

import itertools

import pytest

FOLDER, MODULE = "graph-coloring", "graph_coloring_env"


@pytest.fixture(scope="module")
def env(catalog):
    return catalog.load(FOLDER)


def test_splits_and_shapes(env, checks):
    checks.check_shapes(env, {"train": 2000, "test": 200})
    checks.check_repeatable(env)


def test_same_tasks_in_every_process(env, task_dumps, dump):
    first, second = task_dumps
    assert first[MODULE] == second[MODULE] == dump(env)


def test_prompt_describes_the_graph_of_the_answer(env):
    for task in env.tasks("test"):
        graph = task["answer"]
        edges = ", ".join(f"{u}-{v}" for u, v in graph["edges"])
        assert f"Edges: {edges}\n" in task["prompt"]
        assert f"colours 1 to {graph['colors']} " in task["prompt"]
        assert task["metadata"] == {
            "vertices": graph["vertices"],
            "edges": len(graph["edges"]),
            "colors": graph["colors"],
        }


def test_no_colouring_in_prompt_or_metadata(env):
    for task in env.tasks("test") + env.tasks("train"):
        assert " ".join(map(str, task["answer"]["example"])) not in task["prompt"]
        assert "example" not in task["metadata"]


def test_fixture_cases(env, checks):
    checks.check_fixtures(env, FOLDER)


def test_gold_answers_score_one(env, checks):
    golds = [
        ("<answer>" + " ".join(map(str, t["answer"]["example"])) + "</answer>", t["answer"])
        for t in env.tasks("test")[:20]
    ]
    checks.check_gold(env, golds)
    # The self-check hook gives the same kind of completion.
    assert all(env.reward(env.gold_completion(t["answer"]), t["answer"]) == 1.0 for t in env.tasks("train")[:20])


def test_any_valid_colouring_is_correct(env):
    """Every colouring found by brute force scores 1.0; every other assignment scores 0.0."""
    small = [t["answer"] for t in env.tasks("test") if t["answer"]["vertices"] <= 6][:5]
    assert small
    for graph in small:
        for colours in itertools.product(range(1, graph["colors"] + 1), repeat=graph["vertices"]):
            valid = all(colours[u] != colours[v] for u, v in graph["edges"])
            completion = "<answer>" + " ".join(map(str, colours)) + "</answer>"
            assert env.reward(completion, graph) == (1.0 if valid else 0.0)


def test_every_graph_is_colourable_and_needs_its_edges(env):
    for task in env.tasks("train"):
        graph = task["answer"]
        assert all(graph["example"][u] != graph["example"][v] for u, v in graph["edges"])
        assert len(graph["edges"]) >= graph["vertices"] - 1


@pytest.mark.parametrize(
    ("colours", "expected"),
    [
        ("1 3 1 3 1 3 3 1 2", 1.0),
        ("[1, 3, 1, 3, 1, 3, 3, 1, 2]", 1.0),
        ("1;3;1;3;1;3;3;1;2", 1.0),
        ("1 3 1 3 1 3 3 1 " + "2" * 50, 0.0),
        ("0 3 1 3 1 3 3 1 2", 0.0),
        ("1 3 1 3 1 3 3 1 2 1", 0.0),
        ("1 3 1 3 1 3 3 1 -2", None),
        ("1 3 1 3 1 3 3 1 2.0", None),
    ],
)
def test_reward_parsing(env, colours, expected):
    answer = env.tasks("test")[0]["answer"]
    assert env.reward(f"<answer>{colours}</answer>", answer) == expected


def test_junk_never_raises(env, checks):
    checks.check_junk(env, env.tasks("test")[0]["answer"])
