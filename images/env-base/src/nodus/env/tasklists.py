"""Task lists generated once and handed out as fresh copies: the usual body of an environment's `tasks`.

Who uses it: catalog environments (`tasks = generated_once(_generate)`) and any environment whose tasks come
from a generator. The lists are produced on first use, kept as JSON text (so they cannot be edited in
place), and decoded afresh on every call: a caller that edits a task changes only its own copy.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

Tasks = list[dict[str, Any]]


def generated_once(generate: Callable[[], dict[str, Tasks]]) -> Callable[[str], Tasks]:
    """`tasks(split)` over `generate()`, which returns `{"train": [...], "test": [...]}` and runs once."""
    cache: dict[str, str] = {}

    def tasks(split: str) -> Tasks:
        if split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test' (got {split!r})")
        if not cache:
            cache.update({name: json.dumps(items) for name, items in generate().items()})
        result: Tasks = json.loads(cache[split])
        return result

    return tasks
