"""Writes data/train.parquet and data/test.parquet: additions in verl's row shape (run once; deterministic)."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

SYSTEM = "Solve the problem. End your reply with '#### ' and the number."


def rows(split: str, count: int, seed: int, seen: set[tuple[int, int]]) -> list[dict]:
    """COUNT additions none of which is in SEEN (nodus keeps a repeated prompt once: 80 rows stay 80 tasks)."""
    rng = random.Random(seed)
    out = []
    for index in range(count):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        while (a, b) in seen:
            a, b = rng.randint(10, 99), rng.randint(10, 99)
        seen.add((a, b))
        out.append(
            {
                "data_source": "nodus/addition",
                "prompt": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"What is {a} + {b}?"}],
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": str(a + b)},
                "extra_info": {"split": split, "index": index, "answer": str(a + b), "question": f"{a} + {b}"},
            }
        )
    return out


def main(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    seen: set[tuple[int, int]] = set()
    pq.write_table(pa.Table.from_pylist(rows("train", 80, 1, seen)), folder / "train.parquet")
    pq.write_table(pa.Table.from_pylist(rows("test", 20, 2, seen)), folder / "test.parquet")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "data")
