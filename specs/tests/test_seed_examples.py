"""Every YAML document of the seed documents with `apiVersion: nodus.dev/...` validates as written.

Seed 000 keeps its line breaks: its documents are cut out and validated directly. Seed 001 lost its line
breaks; its documents live in `examples/` with the indentation restored, and this test checks that each one
is there word for word (comments included) and that `examples/` validates.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nodus.specs import parse_resources, parse_text

REPO = Path(__file__).resolve().parents[2]
SEEDS = REPO.parent / "shared" / "seeds"
EXAMPLES = REPO / "examples"

needs_seeds = pytest.mark.skipif(
    not SEEDS.is_dir(), reason="the seed documents (../shared/seeds) are not beside this checkout"
)


def _seed(prefix: str) -> str:
    return next(SEEDS.glob(f"{prefix}_*.txt")).read_text()


def _documents_of_000() -> list[str]:
    docs, current = [], None
    for line in _seed("000").splitlines():
        if line.startswith("apiVersion: nodus.dev/"):
            current = [line]
        elif current is not None:
            if not line.strip():
                docs.append("\n".join(current) + "\n")
                current = None
            else:
                current.append(line)
    if current:
        docs.append("\n".join(current) + "\n")
    return docs


def _documents_of_001() -> list[str]:
    blocks = re.findall(r"```yaml (.*?)```", _seed("001"), re.S)
    return [doc for block in blocks for doc in block.split(" --- ") if "apiVersion: nodus.dev/" in doc]


def _words(text: str) -> str:
    return " ".join(text.split())


@needs_seeds
def test_seed_000_documents_validate_as_written() -> None:
    docs = _documents_of_000()
    assert len(docs) >= 3
    for index, doc in enumerate(docs):
        result = parse_text(doc, f"seed-000-doc-{index}.yaml")
        assert result.errors == [], [str(e) for e in result.errors]
        assert len(result.resources) == 1


@needs_seeds
def test_seed_001_documents_are_in_examples_word_for_word() -> None:
    docs = _documents_of_001()
    assert len(docs) >= 10
    corpus = {p: _words(p.read_text()) for p in EXAMPLES.rglob("*.yaml")}
    for doc in docs:
        wanted = _words(doc)
        assert any(wanted in text for text in corpus.values()), f"not in examples/: {wanted[:120]}"


def _example_folders() -> list[Path]:
    return sorted({p.parent for p in EXAMPLES.rglob("*.yaml")})


@pytest.mark.parametrize("folder", _example_folders(), ids=lambda p: str(p.relative_to(EXAMPLES)))
def test_each_example_folder_validates(folder: Path) -> None:
    result = parse_resources([folder])
    assert result.errors == [], [str(e) for e in result.errors]
    assert result.resources
