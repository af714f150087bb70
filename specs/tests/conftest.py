"""Shared fixtures of the nodus.specs tests: the 'full' specs (every field of every kind) and the seeds."""

from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
FULL = FIXTURES / "full"
REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
# The product documents live beside the checkout (../shared/seeds), as they do in CI.
SEEDS = REPO.parent / "shared" / "seeds"


@pytest.fixture
def full_texts() -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(FULL.glob("*.yaml"))}
