"""A verl dataset module: parquet rows in verl's shape and verl's custom reward function.

nodus reads `train_files` / `val_files` (local paths here; `hf://datasets/owner/name/path.parquet` works too and
is fetched when the image is built) and scores each completion with `compute_score`. The parquet files are
written by `make_data.py` (verl's own data scripts write the same columns).
"""

from __future__ import annotations

import re

train_files = "data/train.parquet"
val_files = "data/test.parquet"

ANSWER = re.compile(r"####\s*(-?\d+)")


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    """verl's signature: 1.0 for the right `#### n`, 0.0 for a wrong one, None when there is no `#### n`."""
    found = ANSWER.findall(solution_str)
    if not found:
        return None
    return {"score": float(found[-1] == str(ground_truth)), "acc": found[-1] == str(ground_truth)}
