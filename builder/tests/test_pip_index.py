"""`package.pip.index`: the package from that index alone, its dependencies from the default index alone.

Two PEP 503 indexes on 127.0.0.1 stand in for a private index (the Environments Hub's, say) and PyPI
(`UV_DEFAULT_INDEX`, which uv reads as its default index), so these tests need no network. The private
index also holds a different `tiny-dep`: were it first for every package (dependency confusion), that copy
would win.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from nodus.builder.lockfile import Lock, LockEntry
from nodus.builder.plan import BaseImage, LockedRequirements, plan
from nodus.builder.provenance import resolved_dependencies
from nodus.builder.requirements import install, lock, uv_cause
from nodus.builder.store import Store
from nodus.errors import BuildError, ConfigError

Serve = Callable[[Sequence[Path]], str]
Wheel = Callable[..., Path]
DIGEST = "sha256:" + "ab" * 32
LOADS_ITSELF = "import sys\n\ndef load_environment():\n    return sys.modules[__name__]\n"


def _module(root: Path, name: str, source: str) -> Path:
    (root / name).mkdir(parents=True)
    (root / name / "__init__.py").write_text(source)
    return root


def _sha(wheel: Path) -> str:
    return hashlib.sha256(wheel.read_bytes()).hexdigest()


@pytest.fixture
def indexes(
    tmp_path: Path, wheel_from_folder: Wheel, simple_index: Serve, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    """A default index with the real `tiny-dep`; a private one with `reverse-words` and a shadow `tiny-dep`."""
    public_dep = wheel_from_folder(
        _module(tmp_path / "src-public", "tiny_dep", "WHO = 'public'\n"),
        tmp_path / "w1",
        name="tiny-dep",
        version="1.0",
    )
    only_public = wheel_from_folder(
        _module(tmp_path / "src-only", "only_public", "X = 1\n"), tmp_path / "w1", name="only-public", version="1.0"
    )
    shadow_dep = wheel_from_folder(
        _module(tmp_path / "src-shadow", "tiny_dep", "WHO = 'private'\n"),
        tmp_path / "w2",
        name="tiny-dep",
        version="1.0",
    )
    package = wheel_from_folder(
        _module(tmp_path / "src-env", "reverse_words_env", LOADS_ITSELF),
        tmp_path / "w2",
        name="reverse-words",
        version="1.0.0",
        dependencies=["tiny-dep==1.0"],
    )
    default = simple_index([public_dep, only_public])
    monkeypatch.setenv("UV_DEFAULT_INDEX", default)
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))  # each test's ports differ; keep uv's cache apart
    private = simple_index([shadow_dep, package])
    return {"default": default, "private": private, "public_dep": public_dep, "package": package}


def test_the_package_comes_from_its_index_and_its_dependencies_from_the_default_one(
    tmp_path: Path, indexes: dict[str, Any]
) -> None:
    store = Store(tmp_path / ".nodus")
    store.ensure()
    private = indexes["private"]
    locked = lock(["reverse-words==1.0.0"], index=private, store=store)
    assert locked.lines == (
        f"reverse-words==1.0.0 --hash=sha256:{_sha(indexes['package'])}",
        f"tiny-dep==1.0 --hash=sha256:{_sha(indexes['public_dep'])}",  # PyPI's, not the private index's copy
    )
    assert locked.indexes == (("reverse-words", private),)
    assert f"# index: reverse-words from {private}\n" in locked.text()
    # Cached with where each came from; the same answer without resolving again.
    assert lock(["reverse-words==1.0.0"], index=private, store=store) == locked

    site = tmp_path / "site-packages"
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    install(locked, site, scratch=scratch)
    assert (site / "tiny_dep" / "__init__.py").read_text() == "WHO = 'public'\n"
    assert (site / "reverse_words_env" / "__init__.py").read_text() == LOADS_ITSELF
    assert (site / "reverse_words-1.0.0.dist-info" / "top_level.txt").read_text() == "reverse_words_env\n"


def test_a_package_missing_from_its_index_fails_naming_the_index(tmp_path: Path, indexes: dict[str, Any]) -> None:
    store = Store(tmp_path / ".nodus")
    store.ensure()
    private = indexes["private"]
    with pytest.raises(BuildError, match=f"^reverse-words==9.9.9 is not on index {private}: ") as missing:
        lock(["reverse-words==9.9.9"], index=private, store=store)
    assert "\n" not in missing.value.message
    # A package the default index has but the named one lacks is not taken from the default index.
    with pytest.raises(BuildError, match=f"^only-public==1.0 is not on index {private}: "):
        lock(["only-public==1.0"], index=private, store=store)


def test_installing_takes_a_package_only_from_its_locked_index(tmp_path: Path, indexes: dict[str, Any]) -> None:
    # A lock that says tiny-dep came from the private index installs the private copy, never the default's.
    store = Store(tmp_path / ".nodus")
    store.ensure()
    locked = lock(["reverse-words==1.0.0"], index=indexes["private"], store=store)
    wrong = LockedRequirements.of(locked.lines, {"reverse-words": indexes["private"], "tiny-dep": indexes["private"]})
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    # The private index's tiny-dep has other bytes than the locked (default index's) hash: refused.
    with pytest.raises(BuildError, match=f"installing the locked requirements from index {indexes['private']} failed"):
        install(wrong, tmp_path / "site", scratch=scratch)


def test_where_a_package_came_from_is_part_of_the_requirements_hash() -> None:
    line = f"reverse-words==1.0.0 --hash=sha256:{'c' * 64}"
    plain = LockedRequirements.of([line])
    pinned = LockedRequirements.of([line], {"Reverse_Words": "http://127.0.0.1:9/simple/"})
    assert pinned.indexes == (("reverse-words", "http://127.0.0.1:9/simple/"),)
    assert pinned.sha256 != plain.sha256
    assert plain.to_dict() == {"lines": [line], "sha256": plain.sha256}  # golden plans of path packages unchanged
    assert pinned.to_dict()["indexes"] == {"reverse-words": "http://127.0.0.1:9/simple/"}
    assert LockedRequirements.from_text(pinned.text()) == pinned
    assert pinned.index_of(line) == "http://127.0.0.1:9/simple/" and plain.index_of(line) is None
    with pytest.raises(ConfigError, match="names no locked package"):
        LockedRequirements.of([line], {"other": "http://127.0.0.1:9/simple/"})


def test_the_lock_entry_records_which_packages_came_from_the_index(tmp_path: Path) -> None:
    path = tmp_path / "nodus.lock"
    lockfile = Lock.load(path)
    entry = LockEntry(DIGEST, DIGEST, DIGEST, DIGEST, indexes={"reverse-words": "https://hub.example/acme/simple/"})
    lockfile.record("reverse-words", "1.0.0", entry)
    lockfile.record("other", "1.0.0", LockEntry(DIGEST, DIGEST, DIGEST, DIGEST))
    lockfile.save()
    text = path.read_text()
    assert "indexes:\n      reverse-words: https://hub.example/acme/simple/" in text
    assert text.count("indexes") == 1  # left out when empty
    again = Lock.load(path).get("reverse-words", "1.0.0")
    assert again is not None and dict(again.indexes) == {"reverse-words": "https://hub.example/acme/simple/"}


def _pip_plan(make_environment: Callable[..., Any], package: dict[str, Any], requirements: LockedRequirements) -> Any:
    return plan(
        make_environment(package),
        spec_dir=Path("/specs"),
        base=BaseImage("nodus/env-base:test", DIGEST),
        requirements=requirements,
        builder_version="0.0.0",
        sources={Path("/specs"): DIGEST},
    )


def test_a_pip_package_tells_the_image_its_distribution(make_environment: Callable[..., Any]) -> None:
    index = "https://hub.example/acme/simple/"
    line = f"reverse-words==1.0.0 --hash=sha256:{'c' * 64}"
    requirements = LockedRequirements.of([line], {"reverse-words": index})
    pip = _pip_plan(
        make_environment, {"pip": {"name": "reverse-words", "version": "1.0.0", "index": index}}, requirements
    )
    assert dict(pip.image.env)["NODUS_ENVIRONMENT_DISTRIBUTION"] == "reverse-words"
    path = _pip_plan(make_environment, {"path": "."}, LockedRequirements.of([]))
    assert "NODUS_ENVIRONMENT_DISTRIBUTION" not in dict(path.image.env)
    # Provenance names the index of the package that came from it, and only of that one.
    uris = [item.get("uri", "") for item in resolved_dependencies(pip)]
    assert f"pkg:pypi/reverse-words@1.0.0?repository_url={index.replace(':', '%3A').replace('/', '%2F')}" in uris


def test_uv_errors_become_one_line_with_the_cause_first() -> None:
    refused = (
        "error: Request failed after 3 retries in 8.0s\n  cause: Failed to fetch: http://127.0.0.1:9/reverse-words/\n"
        "  cause: tcp connect error\n  cause: Connection refused (os error 111)\n"
    )
    assert uv_cause(refused) == "Failed to fetch: http://127.0.0.1:9/reverse-words/ (Connection refused (os error 111))"
    assert uv_cause("error: something odd\n") == "error: something odd"
