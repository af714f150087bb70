"""BuildSpec planning: golden plans of the catalog, the cache key, and the source digest of a package folder."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nodus.builder.plan import (
    BaseImage,
    BuildSpec,
    LockedRequirements,
    golden_plans,
    golden_text,
    main,
    package_files,
    plan,
    source_digest,
)
from nodus.errors import BuildError, ConfigError
from nodus.specs.environment import Environment

BASE = BaseImage("oci:layout:env-base", "sha256:" + "ab" * 32)
REQUIREMENTS = LockedRequirements.of(["tomli==2.0.1 --hash=sha256:" + "cd" * 32])
SOURCE = "sha256:" + "ef" * 32
MakeEnvironment = Callable[..., Environment]


def _plan(environment: Environment, **overrides: Any) -> BuildSpec:
    arguments: dict[str, Any] = {
        "spec_dir": Path("/specs/demo"),
        "base": BASE,
        "requirements": REQUIREMENTS,
        "builder_version": "0.1.0",
        "sources": {Path("/specs/demo"): SOURCE},
    }
    arguments.update(overrides)
    return plan(environment, **arguments)


def _write_package(root: Path, files: dict[str, bytes]) -> Path:
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    return root


# Golden plans -------------------------------------------------------------------------------------------


def test_catalog_plans_match_golden_files(catalog_dir: Path, golden_dir: Path, golden_inputs: dict[str, Any]) -> None:
    plans = golden_plans(catalog_dir, golden_inputs)
    golden = {p.stem for p in golden_dir.glob("*.json")} - {"inputs"}
    assert sorted(plans) == sorted(golden), "run `python -m nodus.builder.plan --update-golden`"
    for name, build in plans.items():
        expected = (golden_dir / f"{name}.json").read_text(encoding="utf-8")
        assert golden_text(build) == expected, f"{name}: plan drifted; review, then --update-golden"


def test_golden_files_hold_what_the_image_needs(golden_dir: Path) -> None:
    arithmetic = json.loads((golden_dir / "arithmetic.json").read_text(encoding="utf-8"))
    assert arithmetic["image"]["tag"] == "env-nodus.arithmetic-2.0.0"  # the catalog is project nodus
    assert arithmetic["image"]["env"]["NODUS_ENVIRONMENT_LOADER"] == "arithmetic_env:load_environment"
    assert arithmetic["image"]["env"]["HF_DATASETS_OFFLINE"] == "1"
    assert arithmetic["image"]["labels"]["org.opencontainers.image.base.digest"] == arithmetic["base"]["digest"]
    assert (arithmetic["splits"], arithmetic["seeds"]) == (["train", "test"], [0, 42])
    # Fields an Environment may change in place never reach the image.
    assert "Apache" not in json.dumps(arithmetic) and "description" not in json.dumps(arithmetic)


def test_environments_sharing_a_folder_share_its_source(golden_dir: Path) -> None:
    evaluation = json.loads((golden_dir / "letter-counting-legacy-eval.json").read_text(encoding="utf-8"))
    rl = json.loads((golden_dir / "letter-counting-legacy-rl.json").read_text(encoding="utf-8"))
    assert evaluation["package"] == rl["package"]
    assert (evaluation["loader"], rl["loader"]) == (
        "letter_counting_legacy_env:load_eval",
        "letter_counting_legacy_env:load_rl",
    )
    assert evaluation["key"] != rl["key"]


def test_update_golden_rewrites_drifted_and_removes_stale_files(
    catalog_dir: Path, golden_dir: Path, tmp_path: Path
) -> None:
    golden = tmp_path / "golden"
    shutil.copytree(golden_dir, golden)
    (golden / "arithmetic.json").write_text("{}\n", encoding="utf-8")
    (golden / "retired.json").write_text("{}\n", encoding="utf-8")
    assert main(["--update-golden", "--catalog", str(catalog_dir), "--golden", str(golden)]) == 0
    assert (golden / "arithmetic.json").read_bytes() == (golden_dir / "arithmetic.json").read_bytes()
    assert not (golden / "retired.json").exists()


# The key -------------------------------------------------------------------------------------------------


def test_same_inputs_give_the_same_key_and_json(make_environment: MakeEnvironment) -> None:
    first, second = _plan(make_environment()), _plan(make_environment())
    assert first == second and first.key == second.key and first.to_json() == second.to_json()
    assert json.loads(first.to_json())["key"] == first.key
    assert first.to_json() == json.dumps(json.loads(first.to_json()), sort_keys=True, separators=(",", ":"))


@pytest.mark.parametrize(
    "overrides",
    [
        {"base": BaseImage("oci:layout:env-base", "sha256:" + "00" * 32)},
        {"requirements": LockedRequirements.of([])},
        {"builder_version": "0.2.0"},
        {"sources": {Path("/specs/demo"): "sha256:" + "11" * 32}},
        {"seeds": (0, 7)},
        {"splits": ("test",)},
    ],
)
def test_each_input_changes_the_key(make_environment: MakeEnvironment, overrides: dict[str, Any]) -> None:
    assert _plan(make_environment(), **overrides).key != _plan(make_environment()).key


def test_in_place_fields_do_not_change_the_key(make_environment: MakeEnvironment) -> None:
    plain = make_environment()
    described = plain.model_copy(
        update={"spec": plain.spec.model_copy(update={"description": "new words", "license": "MIT"})}
    )
    assert _plan(described).key == _plan(plain).key


def test_pip_and_image_packages(make_environment: MakeEnvironment) -> None:
    pip = _plan(make_environment({"pip": {"name": "reverse-words", "version": "1.2.0"}}), sources=None)
    assert pip.package.to_dict() == {"kind": "pip", "name": "reverse-words", "version": "1.2.0", "index": None}
    pinned = "ghcr.io/acme/env@sha256:" + "12" * 32
    image = _plan(make_environment({"image": pinned}), sources=None)
    assert image.package.to_dict() == {"kind": "image", "reference": pinned}
    with pytest.raises(ConfigError, match="not pinned"):
        _plan(make_environment({"image": "ghcr.io/acme/env:latest"}))


def test_path_package_resolves_relative_to_the_spec_and_needs_its_digest(make_environment: MakeEnvironment) -> None:
    shared = make_environment({"path": "../shared", "loader": "shared_env:load_eval"})
    build = _plan(shared, sources={Path("/specs/shared"): SOURCE})
    assert build.package.to_dict() == {"kind": "path", "digest": SOURCE}
    assert build.manifests == ("train/0", "train/42", "test/0", "test/42")
    with pytest.raises(BuildError, match="/specs/shared"):
        _plan(shared, sources={})


def test_tag_and_seed_rules(make_environment: MakeEnvironment) -> None:
    build = _plan(make_environment(version="1.0.0+build.7"), seeds=(42, 0, 42))
    assert build.image.tag == "env-demo-1.0.0_build.7"
    assert build.seeds == (0, 42)
    with pytest.raises(ConfigError, match="seeds"):
        _plan(make_environment(), seeds=())
    with pytest.raises(ConfigError, match="splits"):
        _plan(make_environment(), splits=("train", "train"))


def test_locked_requirements_are_checked() -> None:
    locked = LockedRequirements.of(["b==1 --hash=sha256:" + "0" * 64, "a==2 --hash=sha256:" + "1" * 64])
    assert locked.lines[0].startswith("a==2") and locked.text().endswith("\n")
    with pytest.raises(ConfigError, match="not `name==version"):
        LockedRequirements.of(["numpy>=2"])
    with pytest.raises(ConfigError, match="sorted"):
        LockedRequirements(tuple(reversed(locked.lines)), locked.sha256)
    with pytest.raises(ConfigError, match="hash to"):
        LockedRequirements(locked.lines, "sha256:" + "2" * 64)
    with pytest.raises(ConfigError, match="sha256 digest"):
        BaseImage("debian", "latest")


# Source digests ------------------------------------------------------------------------------------------

PACKAGE = {
    "demo_env.py": b"def load_environment():\n    return 1\n",
    "data/tasks.jsonl": b'{"q": 1}\n',
    "README.md": b"# demo\n",
}


def test_one_changed_byte_changes_the_digest(tmp_path: Path) -> None:
    folder = _write_package(tmp_path / "pkg", PACKAGE)
    before = source_digest(folder)
    (folder / "data/tasks.jsonl").write_bytes(b'{"q": 2}\n')
    assert source_digest(folder) != before


def test_order_on_disk_times_and_skipped_files_do_not_matter(tmp_path: Path) -> None:
    forward = _write_package(tmp_path / "a", PACKAGE)
    backward = _write_package(tmp_path / "b", dict(reversed(list(PACKAGE.items()))))
    os.utime(backward / "README.md", (1, 1))
    _write_package(
        backward,
        {
            "__pycache__/demo_env.cpython-311.pyc": b"\0",
            "data/__pycache__/x.pyc": b"\0",
            "stray.pyc": b"\0",
            ".git/HEAD": b"ref\n",
            ".venv/bin/python": b"",
            "tests/test_demo.py": b"def test(): pass\n",
        },
    )
    assert source_digest(forward) == source_digest(backward)
    assert package_files(backward) == ["README.md", "data/tasks.jsonl", "demo_env.py"]


def test_executable_bit_and_symlinks_count_and_skip_leaves_out_the_spec(tmp_path: Path) -> None:
    folder = _write_package(tmp_path / "pkg", {**PACKAGE, "environment.yaml": b"kind: Environment\n"})
    before = source_digest(folder)
    assert source_digest(folder, skip=["environment.yaml"]) != before
    (folder / "demo_env.py").chmod(0o755)
    executable = source_digest(folder)
    assert executable != before
    (folder / "latest").symlink_to("data/tasks.jsonl")
    assert "latest" in package_files(folder)
    assert source_digest(folder) != executable
    with pytest.raises(BuildError, match="does not exist"):
        source_digest(tmp_path / "missing")


def test_what_git_ignores_and_run_artefacts_are_not_part_of_a_package(tmp_path: Path) -> None:
    """A package folder that is also where runs are made (logs, `nodus cp` copies, saved dry runs): what its
    .gitignore files name (a folder's own, and those of the folders above it up to the repository's root) is
    left out of the file set, so neither the digest nor the image changes with them."""
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / ".gitignore").write_text("*.log\n/top-only.txt\n")
    folder = _write_package(repo / "env", PACKAGE)
    (folder / ".gitignore").write_text("# run artefacts\noutputs/\ndry.json\n!keep.log\nresults-*.json\n")
    before = source_digest(folder)
    _write_package(
        folder,
        {
            "train.log": b"step 1\n",
            "keep.log": b"kept: negated\n",
            "outputs/results.json": b"{}",
            "outputs/adapter/adapter_model.safetensors": b"w",
            "dry.json": b"{}",
            "results-1.json": b"{}",
            "data/more.log": b"nested: *.log matches at any depth\n",
            "top-only.txt": b"anchored to the repository root: not this one\n",
            # A dry run saved as JSON, not ignored: nodus wrote it (its documents are marked), so it is left out.
            "plan-dry.json": b'{"apiVersion": "nodus.dev/v1beta1", "metadata": {"annotations": {"nodus.dev/dry-run": "true"}}}',
            "data/rows.json": b'{"apiVersion": "nodus.dev/v1beta1"}',  # package data that merely names the API
        },
    )
    assert package_files(folder) == [
        ".gitignore",
        "README.md",
        "data/rows.json",
        "data/tasks.jsonl",
        "demo_env.py",
        "keep.log",
        "top-only.txt",
    ]
    (folder / "keep.log").unlink()
    (folder / "top-only.txt").unlink()
    (folder / "data" / "rows.json").unlink()
    assert source_digest(folder) == before  # what is ignored does not change the digest
