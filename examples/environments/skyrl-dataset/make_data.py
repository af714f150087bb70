"""Writes data/train.parquet and data/test.parquet: word problems in SkyRL's row shape (run once; deterministic).

SkyRL's rows are verl's plus `env_class` (the SkyRL-gym environment that scores the row) and `reward_spec`
(what that environment reads its ground truth from). skyrl-gym's `gsm8k` environment scores a reply ending in
`#### n` against `reward_spec.ground_truth`.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

INSTRUCTION = "Let's think step by step and output the final answer after '####'."


def rows(split: str, count: int, seed: int, seen: set[tuple[int, int, int]]) -> list[dict]:
    """COUNT problems none of which is in SEEN (nodus keeps a repeated prompt once)."""
    rng = random.Random(seed)
    out = []
    for index in range(count):
        problem = (rng.randint(2, 9), rng.randint(3, 12), rng.randint(1, 20))
        while problem in seen:
            problem = (rng.randint(2, 9), rng.randint(3, 12), rng.randint(1, 20))
        seen.add(problem)
        boxes, per_box, extra = problem
        total = boxes * per_box + extra
        question = f"A shelf holds {boxes} boxes of {per_box} apples and {extra} loose apples. How many apples?"
        out.append(
            {
                "data_source": "nodus/apples",
                "prompt": [{"role": "user", "content": f"{question} {INSTRUCTION}"}],
                "env_class": "gsm8k",
                "reward_spec": {"method": "rule", "ground_truth": str(total)},
                "extra_info": {"split": split, "index": index, "answer": str(total), "question": question},
            }
        )
    return out


def main(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    seen: set[tuple[int, int, int]] = set()
    pq.write_table(pa.Table.from_pylist(rows("train", 80, 1, seen)), folder / "train.parquet")
    pq.write_table(pa.Table.from_pylist(rows("test", 20, 2, seen)), folder / "test.parquet")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "data")
