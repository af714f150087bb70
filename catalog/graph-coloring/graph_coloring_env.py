"""nodus/graph-coloring 1.0.0: colour a small graph's vertices with k colours so that no edge is monochrome.

Who calls it: `nodus-env` (the grader CLI in the Environment image) imports this module through the
loader `graph_coloring_env:load_environment` and uses `tasks(split)` and `reward(completion, answer)`;
the catalog tests import it directly.

Every graph is made k-colourable by construction: each vertex first gets a hidden colour and edges only
join vertices of different hidden colours. The reward does not compare with that colouring: it checks
the model's colouring against the graph, so any valid colouring is Correct. The hidden colouring stays
in the answer only so that a self-check has a known Correct completion.
"""

from __future__ import annotations

import random
import re
import sys
from itertools import combinations
from typing import Any

from nodus.env.answers import last_answer
from nodus.env.tasklists import generated_once

SEED = 10_000
TRAIN_SIZE = 2000
TEST_SIZE = 200
MIN_VERTICES, MAX_VERTICES = 5, 9
COLOUR_CHOICES = (2, 3, 3, 4)  # three colours twice as often as two or four
REWARD_TYPE = "Binary"

SEPARATORS = re.compile(r"[\s,;]+")


def load_environment() -> Any:
    """The loader nodus-env calls: this module is the environment."""
    return sys.modules[__name__]


def _random_graph(rng: random.Random) -> dict[str, Any]:
    """A k-colourable graph: a hidden colouring first, then edges only between different colours."""
    vertices = rng.randint(MIN_VERTICES, MAX_VERTICES)
    colours = rng.choice(COLOUR_CHOICES)
    while True:
        hidden = [rng.randint(1, colours) for _ in range(vertices)]
        if len(set(hidden)) == colours:  # every colour is needed by the hidden colouring
            break
    density = rng.uniform(0.4, 0.8)
    edges = [[u, v] for u, v in combinations(range(vertices), 2) if hidden[u] != hidden[v] and rng.random() < density]
    return {"vertices": vertices, "edges": edges, "colors": colours, "example": hidden}


def _prompt(graph: dict[str, Any]) -> str:
    n, k = graph["vertices"], graph["colors"]
    edges = ", ".join(f"{u}-{v}" for u, v in graph["edges"])
    return (
        f"Colour the vertices of this undirected graph with the colours 1 to {k} so that no edge joins two "
        f"vertices of the same colour. Not every colour has to be used.\n\n"
        f"Vertices: 0 to {n - 1}\nEdges: {edges}\n\n"
        f"Answer with {n} numbers separated by spaces, the colours of vertices 0 to {n - 1} in that order, "
        f"inside <answer></answer>."
    )


def _generate() -> dict[str, list[dict[str, Any]]]:
    rng = random.Random(SEED)
    seen: set[str] = set()
    made: list[dict[str, Any]] = []
    while len(made) < TEST_SIZE + TRAIN_SIZE:
        graph = _random_graph(rng)
        # Fewer edges than vertices - 1 leaves a puzzle that is mostly isolated vertices: draw again.
        if len(graph["edges"]) < graph["vertices"] - 1:
            continue
        prompt = _prompt(graph)
        if prompt in seen:
            continue
        seen.add(prompt)
        metadata = {"vertices": graph["vertices"], "edges": len(graph["edges"]), "colors": graph["colors"]}
        made.append({"prompt": prompt, "answer": graph, "metadata": metadata})
    return {"test": made[:TEST_SIZE], "train": made[TEST_SIZE:]}


# The tasks of `train` (2000) or `test` (200), always the same ones in the same order.
tasks = generated_once(_generate)


def _parse_colouring(text: str) -> list[int] | None:
    """`1 2 3`, `1, 2, 3` or `[1, 2, 3]` -> [1, 2, 3]; None when any item is not a whole number."""
    items = [item for item in SEPARATORS.split(text.strip().strip("[]()")) if item]
    if not items or not all(item.isascii() and item.isdigit() for item in items):
        return None
    # A colour of more than six digits is out of range anyway: 0 stands for it, so that int() never sees
    # thousands of digits.
    return [int(item) if len(item) <= 6 else 0 for item in items]


def reward(completion: str, answer: dict[str, Any]) -> float | None:
    """1.0 for a valid colouring in the last <answer>...</answer>; 0.0 for a colouring of the wrong length,
    with a colour outside 1..k, or with an edge whose ends share a colour; None when there is no answer tag
    or its content is not a list of integers."""
    text = last_answer(completion)
    if text is None:
        return None
    colouring = _parse_colouring(text)
    if colouring is None:
        return None
    if len(colouring) != answer["vertices"] or not all(1 <= c <= answer["colors"] for c in colouring):
        return 0.0
    if any(colouring[u] == colouring[v] for u, v in answer["edges"]):
        return 0.0
    return 1.0


def gold_completion(answer: dict[str, Any]) -> str:
    """A completion that is Correct for `answer` (nodus-env selfcheck grades it)."""
    return "<answer>" + " ".join(str(c) for c in answer["example"]) + "</answer>"
