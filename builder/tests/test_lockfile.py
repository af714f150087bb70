"""nodus.lock: round trips that keep people's edits, the refusal to republish, and located errors."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nodus.builder.lockfile import Lock, LockEntry
from nodus.errors import BuildError, ConfigError


def _digest(byte: str) -> str:
    return "sha256:" + byte * 64


def _entry(image: str = "a", key: str = "b") -> LockEntry:
    return LockEntry(
        image=_digest(image),
        base=_digest("c"),
        requirements=_digest("d"),
        key=_digest(key),
        splits={"train": 5000, "test": 500},
        manifests={"train/0": _digest("e"), "test/0": _digest("f")},
        builder="0.1.0",
    )


EDITED = f"""\
# Reviewed by the catalog team; do not hand-edit digests.
lockfileVersion: 1
owner: catalog-team   # a key nodus-build does not know
environments:
  # the newest first, by hand
  gsm8k@1.0.0:
    image: {_digest("1")}  # pinned in the 2025 report
    base: {_digest("2")}
    requirements: {_digest("3")}
    key: {_digest("4")}
    splits: {{train: 7473, test: 1319}}
    manifests: {{train/0: {_digest("5")}, test/0: {_digest("6")}}}
    builder: 0.1.0
  arithmetic@2.0.0:
    image: {_digest("7")}
    base: {_digest("2")}
    requirements: {_digest("3")}
    key: {_digest("8")}
    builder: 0.1.0
"""


def test_missing_file_is_empty_and_save_writes_it(tmp_path: Path) -> None:
    path = tmp_path / "nodus.lock"
    lock = Lock.load(path)
    assert lock.get("arithmetic", "2.0.0") is None
    lock.record("arithmetic", "2.0.0", _entry())
    lock.save()
    again = Lock.load(path)
    assert again.get("arithmetic", "2.0.0") == _entry()
    assert path.read_text(encoding="utf-8").startswith("# nodus.lock")
    assert [p.name for p in tmp_path.iterdir()] == ["nodus.lock"]  # no temporary file left behind


def test_comments_order_and_unknown_keys_survive_record_and_save(tmp_path: Path) -> None:
    path = tmp_path / "nodus.lock"
    path.write_text(EDITED, encoding="utf-8")
    lock = Lock.load(path)
    lock.record("reasoning-gym", "1.0.0", _entry())
    lock.record("arithmetic", "2.0.0", _entry(image="7", key="9"))  # same image, newer inputs
    lock.save()
    text = path.read_text(encoding="utf-8")
    for kept in (
        "# Reviewed by the catalog team",
        "owner: catalog-team   # a key nodus-build does not know",
        "# the newest first, by hand",
        "# pinned in the 2025 report",
    ):
        assert kept in text
    assert text.index("gsm8k@1.0.0") < text.index("arithmetic@2.0.0") < text.index("reasoning-gym@1.0.0")
    # The untouched entry is byte for byte what the person wrote.
    assert EDITED.split("  arithmetic@2.0.0:")[0] in text
    assert Lock.load(path).get("arithmetic", "2.0.0") == _entry(image="7", key="9")


def test_a_published_version_never_gets_another_image(tmp_path: Path) -> None:
    path = tmp_path / "nodus.lock"
    path.write_text(EDITED, encoding="utf-8")
    lock = Lock.load(path)
    with pytest.raises(BuildError) as raised:
        lock.record("gsm8k", "1.0.0", _entry(image="a"))
    assert _digest("1") in raised.value.message and _digest("a") in raised.value.message
    assert raised.value.hint is not None and "new spec.version" in raised.value.hint
    kept = lock.get("gsm8k", "1.0.0")
    assert kept is not None and kept.image == _digest("1")


def test_another_projects_version_of_a_name_is_its_own_entry(tmp_path: Path) -> None:
    """The catalog's nodus/gsm8k@1.0.0 and the project's own gsm8k@1.0.0 share a lock without one refusing the
    other's image: the catalog's is keyed `nodus/gsm8k@1.0.0`, the default project's as before."""
    path = tmp_path / "nodus.lock"
    path.write_text(EDITED, encoding="utf-8")
    lock = Lock.load(path)
    lock.record("gsm8k", "1.0.0", _entry(image="a", key="9"), project="nodus")  # no BuildError: another entry
    lock.save()
    again = Lock.load(path)
    catalog, own = again.get("gsm8k", "1.0.0", "nodus"), again.get("gsm8k", "1.0.0")
    assert catalog is not None and catalog.image == _digest("a")
    assert own is not None and own.image == _digest("1")
    assert again.get("gsm8k", "1.0.0", "default") == own  # `default` is the unprefixed key
    assert again.is_current("gsm8k", "1.0.0", _digest("9"), "nodus") and not again.is_current(
        "gsm8k", "1.0.0", _digest("9")
    )
    assert "  nodus/gsm8k@1.0.0:" in path.read_text(encoding="utf-8")
    assert "# pinned in the 2025 report" in path.read_text(encoding="utf-8")


def test_is_current_compares_the_build_spec_key(tmp_path: Path) -> None:
    path = tmp_path / "nodus.lock"
    path.write_text(EDITED, encoding="utf-8")
    lock = Lock.load(path)
    assert lock.is_current("gsm8k", "1.0.0", _digest("4"))
    assert not lock.is_current("gsm8k", "1.0.0", _digest("0"))
    assert not lock.is_current("gsm8k", "2.0.0", _digest("4"))


def test_save_keeps_the_file_mode(tmp_path: Path) -> None:
    path = tmp_path / "nodus.lock"
    path.write_text(EDITED, encoding="utf-8")
    path.chmod(0o664)
    lock = Lock.load(path)
    lock.record("reasoning-gym", "1.0.0", _entry())
    lock.save()
    assert os.stat(path).st_mode & 0o777 == 0o664


@pytest.mark.parametrize(
    ("text", "where", "what"),
    [
        ("lockfileVersion: 1\nenvironments:\n  a@1.0.0: {image: [\n", ":4:", "not valid YAML"),
        (
            "lockfileVersion: 1\nenvironments:\n  a@1.0.0:\n    image: nope\n",
            ":4:5",
            "image 'nope' is not a sha256 digest",
        ),
        ("lockfileVersion: 1\nenvironments:\n  a@1.0.0:\n    builder: 0.1.0\n", ":3:3", "missing image, base"),
        ("lockfileVersion: 1\nenvironments:\n  x: {}\n", ":3:3", "not name@version"),
        ("lockfileVersion: 2\n", ":1:1", "lockfileVersion 2"),
        ("- a\n", ":1:1", "a lock file is a mapping"),
        ("environments:\n  a@1: {}\n  a@1: {}\n", ":3:", "not valid YAML"),
    ],
)
def test_a_broken_file_is_a_config_error_naming_file_and_line(tmp_path: Path, text: str, where: str, what: str) -> None:
    path = tmp_path / "nodus.lock"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as raised:
        Lock.load(path)
    assert raised.value.message.startswith(f"{path}{where}"), raised.value.message
    assert what in raised.value.message


def test_entries_are_checked() -> None:
    with pytest.raises(ConfigError, match="split 'train'"):
        LockEntry(
            image=_digest("a"), base=_digest("b"), requirements=_digest("c"), key=_digest("d"), splits={"train": -1}
        )


def test_the_source_digest_is_recorded_and_an_entry_without_one_still_reads(tmp_path: Path) -> None:
    path = tmp_path / "nodus.lock"
    lock = Lock.load(path)
    lock.record("old", "1.0.0", _entry())  # as nodus-build wrote entries before `source`
    lock.record("new", "1.0.0", LockEntry(**{**_entry().__dict__, "source": _digest("9")}))
    lock.save()
    text = path.read_text()
    assert text.count("source:") == 1 and f"source: {_digest('9')}" in text
    again = Lock.load(path)
    old, new = again.get("old", "1.0.0"), again.get("new", "1.0.0")
    assert old is not None and old.source == "" and new is not None and new.source == _digest("9")
    assert again.source_changed("new", "1.0.0", _digest("8"))
    assert not again.source_changed("new", "1.0.0", _digest("9"))
    assert not again.source_changed("old", "1.0.0", _digest("8"))  # nothing recorded: nothing to compare
    assert not again.source_changed("missing", "1.0.0", _digest("8"))
    # The same image rebuilt keeps its source, and one without a source does not erase it.
    again.record("new", "1.0.0", _entry())
    entry = again.get("new", "1.0.0")
    assert entry is not None and entry.source == _digest("9")
    with pytest.raises(ConfigError, match="source"):
        LockEntry(**{**_entry().__dict__, "source": "not-a-digest"})
