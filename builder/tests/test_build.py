"""nodus-build end to end: the catalog into real images, twice; republishing refused; push, pull, prebuilt images.

These tests need podman (each build runs its freeze and check steps in a sandbox) and a base image, which the
session fixture `base_reference` makes once with mmdebstrap (about a minute on a fresh machine, cached after).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nodus.builder import provenance, registry
from nodus.builder.cli import main as nodus_build
from nodus.builder.lockfile import Lock
from nodus.builder.oci import read_image, tagged
from nodus.builder.store import Store

pytestmark = [pytest.mark.podman, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
GSM8K_DATA = json.dumps({"train": "/opt/environment/data/train.jsonl", "test": "/opt/environment/data/test.jsonl"})
PODMAN = ["podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs"]
RUN = [*PODMAN, "run", "--rm", "--network=none", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1000:1000"]


def copy_catalog(target: Path) -> Path:
    """The catalog without its development tests, in a git repository of its own (a project)."""
    shutil.copytree(REPO / "catalog", target / "catalog", ignore=shutil.ignore_patterns("tests", "__pycache__"))
    return target / "catalog"


def run_build(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    """`nodus-build ARGS --json` in process: its exit status and parsed JSON output."""
    with pytest.raises(SystemExit) as exited:
        nodus_build([*args, "--json"])
    out = capsys.readouterr().out
    return int(exited.value.code or 0), json.loads(out)


def build_args(paths: list[Path], project: Path, base: str) -> list[str]:
    return [
        *(str(p) for p in paths),
        "--network",
        "none",
        "--base",
        base,
        "--env",
        f"gsm8k:NODUS_GSM8K_DATA_FILES={GSM8K_DATA}",
        "--lock",
        str(project / "nodus.lock"),
        "--state-dir",
        str(project / ".nodus"),
    ]


def in_image(layout: Path, tag: str, *command: str) -> str:
    result = subprocess.run(
        [*RUN, "--user", "10001:10001", "--entrypoint", "/bin/sh", f"oci:{layout}:{tag}", "-c", " ".join(command)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


@pytest.fixture
def podman_layout(tmp_path: Path) -> Callable[[Path], Path]:
    """podman names `oci:` images after the layout path, which must be a plain lower-case name: link one."""

    def link(layout: Path) -> Path:
        named = tmp_path / "layout-link"
        named.unlink(missing_ok=True)
        named.symlink_to(layout, target_is_directory=True)
        return named

    return link


def test_catalog_builds_reproducibly_and_every_tool_accepts_the_images(
    tmp_path: Path,
    base_reference: str,
    need_tool: Callable[[str], str],
    capsys: pytest.CaptureFixture[str],
    podman_layout: Callable[[Path], Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    need_tool("skopeo")
    need_tool("umoci")
    first, second = tmp_path / "first", tmp_path / "second"
    digests: list[dict[str, str]] = []
    for project in (first, second):
        if project == second:
            # Empty caches all round for the second build, uv's included: sdists are downloaded and compiled
            # again, which is where reproducibility broke before (debug info naming the temporary folder).
            monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
        catalog = copy_catalog(project)
        code, output = run_build(capsys, *build_args([catalog], project, base_reference))
        assert code == 0, output
        assert {row["status"] for row in output["results"]} == {"built"}, output
        digests.append({row["name"]: row["image"] for row in output["results"]})
    names = {p.parent.name for p in (REPO / "catalog").glob("*/environment.yaml")}
    assert set(digests[0]) == names
    # Two builds from empty stores, caches and locks: the same bytes.
    assert digests[0] == digests[1]

    # A rebuild with nothing changed does nothing.
    code, output = run_build(capsys, *build_args([first / "catalog"], first, base_reference))
    assert code == 0 and {row["status"] for row in output["results"]} == {"cached"}

    store = Store(first / ".nodus")
    lock = Lock.load(first / "nodus.lock")
    layout = podman_layout(store.images)
    for name, digest in digests[0].items():
        entry = lock.get(name, "2.0.0" if name == "arithmetic" else "1.0.0", "nodus")  # the catalog's project
        assert entry is not None and entry.image == digest
        tag = f"env-nodus.{name}-{'2.0.0' if name == 'arithmetic' else '1.0.0'}"
        inspected = json.loads(
            subprocess.run(
                ["skopeo", "inspect", f"oci:{store.images}:{tag}"], capture_output=True, text=True, check=True
            ).stdout
        )
        assert inspected["Digest"] == digest
        assert inspected["Labels"]["dev.nodus.splits.test"] == str(entry.splits["test"])
        subprocess.run(["umoci", "stat", "--image", f"{store.images}:{tag}"], capture_output=True, check=True)
        info = json.loads(in_image(layout, tag, "nodus-env", "info"))
        assert info["name"] == name and info["splits"] == entry.splits
        # The tasks the image gives offline are the manifest stored with it, byte for byte.
        tasks = in_image(layout, tag, "nodus-env", "tasks", "--split", "test", "--seed", "42")
        assert tasks.encode() == store.manifest(entry.manifests["test/42"])
        assert all(set(json.loads(line)) == {"taskId", "prompt", "metadata"} for line in tasks.splitlines())
        # Provenance sits beside the image and names it.
        envelope = provenance.find(store.images, digest)
        assert envelope is not None
        statement = provenance.statement_of(envelope)
        assert statement["subject"][0]["digest"]["sha256"] == digest.removeprefix("sha256:")


def test_a_changed_byte_is_a_new_digest_and_refused_at_the_same_version(
    tmp_path: Path, base_reference: str, capsys: pytest.CaptureFixture[str]
) -> None:
    catalog = copy_catalog(tmp_path)
    spec = catalog / "arithmetic" / "environment.yaml"
    args = build_args([spec], tmp_path, base_reference)
    code, output = run_build(capsys, *args)
    assert code == 0
    old = output["results"][0]["image"]

    module = catalog / "arithmetic" / "arithmetic_env.py"
    module.write_bytes(module.read_bytes() + b"#")
    code, output = run_build(capsys, *args)
    row = output["results"][0]
    assert code == 1 and row["status"] == "failed"
    assert f"is published as image {old}" in row["error"] and "sha256:" in row["error"].split("gives")[1]
    assert "new spec.version" in row["hint"]
    assert Lock.load(tmp_path / "nodus.lock").get("arithmetic", "2.0.0", "nodus").image == old  # type: ignore[union-attr]
    assert tagged(Store(tmp_path / ".nodus").images, "env-nodus.arithmetic-2.0.0") == old

    # --check sees it too, without building.
    code, output = run_build(capsys, *args, "--check")
    assert code == 1 and output["results"][0]["status"] == "stale"

    spec.write_text(spec.read_text().replace("version: 2.0.0", "version: 2.0.1"))
    code, output = run_build(capsys, *args)
    assert code == 0 and output["results"][0]["image"] not in ("", old)


@pytest.mark.registry
def test_push_and_pull_back_by_digest_keeps_it(
    tmp_path: Path,
    base_reference: str,
    local_registry: str,
    need_tool: Callable[[str], str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    need_tool("skopeo")
    catalog = copy_catalog(tmp_path)
    args = build_args([catalog / "arithmetic"], tmp_path, base_reference)
    code, output = run_build(capsys, *args, "--push", f"{local_registry}/nodus/envs")
    assert code == 0, output
    row = output["results"][0]
    assert row["pushed"] == f"{local_registry}/nodus/envs@{row['image']}"
    inspected = subprocess.run(
        ["skopeo", "inspect", "--tls-verify=false", f"docker://{row['pushed']}"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(inspected.stdout)["Digest"] == row["image"]
    pulled = tmp_path / "pulled"
    registry.pull(registry.RegistryRef.parse(f"{local_registry}/nodus/envs"), row["image"], pulled, tag="back")
    assert read_image(pulled, "back").ref.manifest_digest == row["image"]
    # The provenance went with it, under the referrers fallback tag.
    attestation = provenance.attestation_tag(row["image"])
    digest = registry.resolve_tag(registry.RegistryRef.parse(f"{local_registry}/nodus/envs"), attestation)
    registry.pull(registry.RegistryRef.parse(f"{local_registry}/nodus/envs"), digest, pulled, tag=attestation)
    assert provenance.find(pulled, row["image"]) is not None


@pytest.mark.registry
def test_a_hand_built_image_is_accepted_as_package_image(
    tmp_path: Path, base_reference: str, local_registry: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """An image made with podman from a Containerfile (not by nodus-build) that implements the contract."""
    context = tmp_path / "context"
    shutil.copytree(REPO / "catalog" / "graph-coloring", context / "env", ignore=shutil.ignore_patterns("tests"))
    (context / "Containerfile").write_text(
        "FROM base\n"
        "COPY --chown=10001:10001 env /opt/environment\n"
        "ENV NODUS_ENVIRONMENT=hand-coloring NODUS_ENVIRONMENT_VERSION=1.0.0 "
        "NODUS_ENVIRONMENT_LOADER=graph_coloring_env:load_environment\n"
    )
    layout = base_reference.removeprefix("oci:").rpartition(":")[0]
    image = f"localhost/nodus-hand-built:{tmp_path.name.lower()}"
    pulled = subprocess.run(
        [*PODMAN, "pull", "-q", f"oci:{layout}:nodus-env-base"], capture_output=True, text=True, check=True
    )
    containerfile = (context / "Containerfile").read_text().replace("FROM base", f"FROM {pulled.stdout.strip()}")
    (context / "Containerfile").write_text(containerfile)
    digest_file = tmp_path / "digest"
    try:
        subprocess.run([*PODMAN, "build", "--network=none", "-t", image, str(context)], capture_output=True, check=True)
        subprocess.run(
            [
                *PODMAN,
                "push",
                "--tls-verify=false",
                "--digestfile",
                str(digest_file),
                image,
                f"docker://{local_registry}/hand/coloring:1.0.0",
            ],
            capture_output=True,
            check=True,
        )
    finally:
        subprocess.run([*PODMAN, "rmi", "--force", image, pulled.stdout.strip()], capture_output=True, check=False)
    digest = digest_file.read_text().strip()
    spec = tmp_path / "hand.yaml"
    spec.write_text(
        "apiVersion: nodus.dev/v1\nkind: Environment\nmetadata: {name: hand-coloring}\n"
        f'spec:\n  version: 1.0.0\n  package: {{image: "{local_registry}/hand/coloring@{digest}"}}\n'
    )
    code, output = run_build(
        capsys, str(spec), "--lock", str(tmp_path / "nodus.lock"), "--state-dir", str(tmp_path / ".nodus")
    )
    assert code == 0, output
    row = output["results"][0]
    assert row["status"] == "verified" and row["image"] == digest
    entry = Lock.load(tmp_path / "nodus.lock").get("hand-coloring", "1.0.0")
    assert entry is not None and entry.image == digest and entry.splits["test"] > 0
    assert set(entry.manifests) == {"train/0", "train/42", "test/0", "test/42"}


def test_the_base_is_pinned_and_rebuilt_to_the_same_digest(
    tmp_path: Path, base_reference: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`nodus-build base` pins a given base; building it from the recipe again gives the pinned digest."""
    layout, _, tag = base_reference.removeprefix("oci:").rpartition(":")
    given = read_image(Path(layout), tag).ref.manifest_digest
    flags = ["--lock", str(tmp_path / "nodus.lock"), "--state-dir", str(tmp_path / ".nodus")]
    with pytest.raises(SystemExit) as exited:
        nodus_build(["base", "--base", base_reference, *flags])
    assert exited.value.code == 0
    assert Lock.load(tmp_path / "nodus.lock").base().digest == given  # type: ignore[union-attr]
    # No --base now, and nothing in this project's store: the base is made from the recipe (mmdebstrap's tar
    # is cached per user) and must come out as the digest the lock pins, or the command fails.
    with pytest.raises(SystemExit) as exited:
        nodus_build(["base", *flags])
    assert exited.value.code == 0, capsys.readouterr().err
    assert tagged(Store(tmp_path / ".nodus").images, "nodus-env-base") == given
    assert given in capsys.readouterr().out


def test_a_failing_self_check_fails_the_build_with_its_step_and_log(
    tmp_path: Path, base_reference: str, capsys: pytest.CaptureFixture[str]
) -> None:
    catalog = copy_catalog(tmp_path)
    fixtures = catalog / "arithmetic" / "fixtures.jsonl"
    # The first fixture case expects Correct; make it expect Incorrect: the package now disagrees with itself.
    lines = fixtures.read_text().splitlines()
    lines[0] = lines[0].replace('"verdict": "Correct", "reward": 1.0', '"verdict": "Incorrect", "reward": 0.0')
    fixtures.write_text("\n".join(lines) + "\n")
    code, output = run_build(capsys, *build_args([catalog / "arithmetic"], tmp_path, base_reference))
    row = output["results"][0]
    assert code == 1 and row["status"] == "failed"
    # The fixture case's own disagreement first, then the step and the case, then the log.
    cause, log_path = row["error"].split("; full log: ")
    assert cause == (
        "graded Correct (reward 1.0): arithmetic@2.0.0: the self-check failed in fixture 1 (full-reward) "
        "(expected Incorrect, reward 0.0)"
    )
    log = Path(log_path)
    assert log.is_file() and '"fixture 1 (full-reward)"' in log.read_text()
    # Nothing was published: no lock entry, no tag.
    assert Lock.load(tmp_path / "nodus.lock").get("arithmetic", "2.0.0", "nodus") is None
    assert tagged(Store(tmp_path / ".nodus").images, "env-nodus.arithmetic-2.0.0") is None


PODMAN_PROGRESS = ("Getting image source signatures", "Copying blob", "Copying config", "Writing manifest", "Storing")


def test_a_raising_reward_fails_the_build_with_the_python_error_first(
    tmp_path: Path, base_reference: str, capsys: pytest.CaptureFixture[str]
) -> None:
    catalog = copy_catalog(tmp_path)
    module = catalog / "arithmetic" / "arithmetic_env.py"
    source = module.read_text()
    # Every reply now raises in the reward: the self-check's gold answer is an InfrastructureFailure.
    source = source.replace(
        "    text = last_answer(completion)\n", "    text = last_answer(completion)\n    1 / 0\n", 1
    )
    module.write_text(source)
    line = next(n for n, row in enumerate(source.splitlines(), start=1) if row == "    1 / 0")
    code, output = run_build(capsys, *build_args([catalog / "arithmetic"], tmp_path, base_reference))
    row = output["results"][0]
    assert code == 1 and row["status"] == "failed"
    error = row["error"]
    assert error.startswith(f"ZeroDivisionError: division by zero in reward (arithmetic_env.py:{line}): "), error
    assert "arithmetic@2.0.0: the self-check failed on the gold answer of train task " in error
    assert not any(noise in error for noise in PODMAN_PROGRESS), error
    assert "\n" not in error and Path(error.split("; full log: ")[1]).is_file()


def _wheel(folder: Path, module: bytes) -> Path:
    """A wheel of `nodus-tiny-env` 1.2.0 whose package `tinyenv` is `module`, made by hand (no build tools)."""
    import base64
    import hashlib
    import zipfile

    files = {
        "tinyenv/__init__.py": module,
        "nodus_tiny_env-1.2.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: nodus-tiny-env\nVersion: 1.2.0\n",
        "nodus_tiny_env-1.2.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: nodus-tests\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    record = [
        f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}"
        for name, data in files.items()
    ]
    files["nodus_tiny_env-1.2.0.dist-info/RECORD"] = (
        "\n".join([*record, "nodus_tiny_env-1.2.0.dist-info/RECORD,,"]) + "\n"
    ).encode()
    wheel = folder / "nodus_tiny_env-1.2.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return wheel


def test_a_pip_package_from_its_own_index(
    tmp_path: Path, base_reference: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`package.pip` with an index: a simple index on 127.0.0.1 serving a wheel of the arithmetic module."""
    import functools
    import hashlib
    import http.server
    import threading

    root = tmp_path / "index"
    (root / "simple" / "nodus-tiny-env").mkdir(parents=True)
    (root / "files").mkdir()
    wheel = _wheel(root / "files", (REPO / "catalog" / "arithmetic" / "arithmetic_env.py").read_bytes())
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    (root / "simple" / "nodus-tiny-env" / "index.html").write_text(
        f'<html><body><a href="../../files/{wheel.name}#sha256={digest}">{wheel.name}</a></body></html>\n'
    )
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        spec = tmp_path / "environment.yaml"
        spec.write_text(
            "apiVersion: nodus.dev/v1\nkind: Environment\nmetadata: {name: tiny-arithmetic}\nspec:\n  version: 1.0.0\n"
            "  package:\n    loader: tinyenv:load_environment\n"
            f"    pip: {{name: nodus-tiny-env, version: 1.2.0, index: 'http://127.0.0.1:{server.server_port}/simple'}}\n"
        )
        code, output = run_build(capsys, *build_args([spec], tmp_path, base_reference))
    finally:
        server.shutdown()
    row = output["results"][0]
    assert code == 0 and row["status"] == "built", output
    assert row["splits"] == {"train": 5000, "test": 500}
    entry = Lock.load(tmp_path / "nodus.lock").get("tiny-arithmetic", "1.0.0")
    assert entry is not None and entry.image == row["image"]
    locked = Store(tmp_path / ".nodus").cache / "requirements"
    assert any(f"nodus-tiny-env==1.2.0 --hash=sha256:{digest}" in p.read_text() for p in locked.iterdir())


HUB_ENV = """
import re
import sys

import six  # a dependency from PyPI, installed beside the package

WORDS = [f"w{i:02d}rd" for i in range(20)]
ANSWER = re.compile(r"<answer>([a-z0-9]+)</answer>")


def load_environment():
    return sys.modules[__name__]


def tasks(split):
    chosen = WORDS[:15] if split == "train" else WORDS[15:]
    return [{"prompt": six.ensure_str(f"Reverse {w}"), "answer": w[::-1], "metadata": {"length": len(w)}} for w in chosen]


def reward(completion, answer):
    found = ANSWER.findall(completion)
    return None if not found else float(found[-1] == answer)


def gold_completion(answer):
    return f"<answer>{answer}</answer>"
"""


def test_a_pip_package_from_a_simple_index_loads_its_own_module_and_grades_offline(
    tmp_path: Path,
    base_reference: str,
    capsys: pytest.CaptureFixture[str],
    podman_layout: Callable[[Path], Path],
    wheel_from_folder: Callable[..., Path],
    simple_index: Callable[[list[Path]], str],
) -> None:
    """A Hub-like package: distribution `reverse-words`, module `reverse_words_env`, the default loader, a
    dependency from PyPI; served from a PEP 503 index on 127.0.0.1 (`package.pip.index`)."""
    source = tmp_path / "src"
    (source / "reverse_words_env").mkdir(parents=True)
    (source / "reverse_words_env" / "__init__.py").write_text(HUB_ENV)
    wheel = wheel_from_folder(
        source, tmp_path / "wheels", name="reverse-words", version="1.0.0", dependencies=["six==1.17.0"]
    )
    index = simple_index([wheel])
    spec = tmp_path / "environment.yaml"
    document = (
        "apiVersion: nodus.dev/v1\nkind: Environment\nmetadata: {{name: {name}}}\nspec:\n  version: 1.0.0\n"
        "  package:\n    pip: {{name: reverse-words, version: {version}, index: '{index}'}}\n"
    )
    spec.write_text(document.format(name="reverse-words", version="1.0.0", index=index))
    code, output = run_build(capsys, *build_args([spec], tmp_path, base_reference))
    row = output["results"][0]
    assert code == 0 and row["status"] == "built", output
    assert row["splits"] == {"train": 15, "test": 5}
    entry = Lock.load(tmp_path / "nodus.lock").get("reverse-words", "1.0.0")
    assert entry is not None and dict(entry.indexes) == {"reverse-words": index}

    layout = podman_layout(Store(tmp_path / ".nodus").images)
    tag = "env-reverse-words-1.0.0"
    listed = [json.loads(line) for line in in_image(layout, tag, "nodus-env tasks --split test --seed 0").splitlines()]
    assert sorted(task["prompt"] for task in listed) == [f"Reverse w{i:02d}rd" for i in range(15, 20)]
    assert all(set(task) == {"taskId", "prompt", "metadata"} for task in listed)
    first = listed[0]
    word = first["prompt"].removeprefix("Reverse ")
    replies = [f"<answer>{word[::-1]}</answer>", "<answer>wrong</answer>", "no tags at all"]
    lines = "\\n".join(json.dumps({"taskId": first["taskId"], "completion": reply}) for reply in replies)
    graded = [json.loads(line) for line in in_image(layout, tag, f"printf '{lines}\\n' | nodus-env grade").splitlines()]
    assert [line["verdict"] for line in graded] == ["Correct", "Incorrect", "InvalidOutput"]

    # A version the index does not have: the build fails naming the index (PyPI is never asked for it).
    spec.write_text(document.format(name="reverse-words-next", version="9.9.9", index=index))
    code, output = run_build(capsys, *build_args([spec], tmp_path, base_reference))
    assert code == 1 and output["results"][0]["error"].startswith(f"reverse-words==9.9.9 is not on index {index}: ")


FETCHING_ENV = '''
"""Downloads its data on first load into HF_HOME, then reads only that copy (as the datasets library does)."""
import json
import os
import sys
import urllib.request


def load_environment():
    return sys.modules[__name__]


def _rows():
    path = os.path.join(os.environ["HF_HOME"], "fetched", "rows.json")
    if not os.path.exists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        urllib.request.urlretrieve(os.environ["FETCH_URL"], path)
    with open(path) as handle:
        return json.load(handle)


def tasks(split):
    rows = _rows()
    chosen = rows[:40] if split == "train" else rows[40:]
    return [{"prompt": f"Say {row}", "answer": row} for row in chosen]


def reward(completion, answer):
    return completion.strip() == f"<answer>{answer}</answer>"


def gold_completion(answer):
    return f"<answer>{answer}</answer>"
'''


def test_data_fetched_at_build_time_is_in_the_image_and_read_offline(
    tmp_path: Path, base_reference: str, capsys: pytest.CaptureFixture[str], podman_layout: Callable[[Path], Path]
) -> None:
    """The freeze step may use the network (here a server on 127.0.0.1); the check step and grading may not."""
    import functools
    import http.server
    import threading

    served = tmp_path / "served"
    served.mkdir()
    (served / "rows.json").write_text(json.dumps([f"word{i}" for i in range(56)]))
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    package = tmp_path / "fetching"
    package.mkdir()
    (package / "fetching_env.py").write_text(FETCHING_ENV)
    (package / "environment.yaml").write_text(
        "apiVersion: nodus.dev/v1\nkind: Environment\nmetadata: {name: fetching}\nspec:\n  version: 1.0.0\n"
        '  package: {path: ., loader: "fetching_env:load_environment"}\n'
    )
    args = [
        str(package),
        "--network",
        "host",
        "--base",
        base_reference,
        "--env",
        f"FETCH_URL=http://127.0.0.1:{server.server_port}/rows.json",
        "--lock",
        str(tmp_path / "nodus.lock"),
        "--state-dir",
        str(tmp_path / ".nodus"),
    ]
    try:
        code, output = run_build(capsys, *args)
    finally:
        server.shutdown()
    row = output["results"][0]
    assert code == 0 and row["status"] == "built", output
    assert row["splits"] == {"train": 40, "test": 16}
    # The server is gone: the image still has the rows, under HF_HOME, and serves its tasks with no network.
    layout = podman_layout(Store(tmp_path / ".nodus").images)
    rows = in_image(layout, "env-fetching-1.0.0", "cat", "/opt/nodus/data/fetched/rows.json")
    assert json.loads(rows)[0] == "word0"
    config = read_image(Store(tmp_path / ".nodus").images, "env-fetching-1.0.0").config
    assert any("datasets" in item.get("created_by", "") for item in config["history"])


@pytest.mark.registry
def test_the_base_can_be_pulled_by_digest_instead_of_built(
    tmp_path: Path, base_reference: str, local_registry: str, capsys: pytest.CaptureFixture[str]
) -> None:
    layout, _, tag = base_reference.removeprefix("oci:").rpartition(":")
    target = registry.RegistryRef.parse(f"{local_registry}/nodus/env-base")
    pushed = registry.push(Path(layout), tag, target, tags=["0.1.0"])
    flags = ["--lock", str(tmp_path / "nodus.lock"), "--state-dir", str(tmp_path / ".nodus")]
    with pytest.raises(SystemExit) as exited:
        nodus_build(["base", "--base", pushed.reference, *flags])
    assert exited.value.code == 0, capsys.readouterr().err
    pinned = Lock.load(tmp_path / "nodus.lock").base()
    assert pinned is not None and pinned.digest == pushed.digest and pinned.reference == pushed.reference
    assert tagged(Store(tmp_path / ".nodus").images, "nodus-env-base") == pushed.digest
