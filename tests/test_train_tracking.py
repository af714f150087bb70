"""`spec.tracking` end to end through `nodus apply` (issue 17's acceptance): a managed runtime's metrics reach a real
MLflow server and an offline W&B run, the Secrets' values reach no file of the project's state folder, and a tracker
that cannot be reached is a warning in the run, never a failed run.

- MLflow: a server this test starts (`mlflow server` on 127.0.0.1 and a free port, its SQLite store and artifacts
  under tmp_path, stopped by its process group, which it leads). A `nodus/sft` TrainingJob with
  `tracking.mlflow {uri, secret, experiment}` and a Secret of provider Env for MLFLOW_TRACKING_TOKEN; then the
  server is asked with mlflow's own client: the experiment, the run, the loss of every step (the same numbers as the
  run's results.json history), the training parameters.
- W&B: `WANDB_MODE=offline` in the applying process's environment (the trainer inherits it) and a W&B connection
  Secret for WANDB_API_KEY. The offline run's files appear where wandb puts them by default, `./wandb` in the
  trainer's working folder, which is the job's folder (`.nodus/jobs/default/NAME/wandb/offline-run-*`, not an
  output); its `.wandb` log holds the config, every step's metrics and both held-out measurements.
- Unreachable: `tracking.mlflow.uri` a loopback port nothing listens on: the run Succeeds, with one warning line.

Nothing here leaves loopback: MLflow's and W&B's telemetry are off (pytest's variable alone already turns MLflow's
off), W&B is offline. Skips where mlflow or wandb are not installed (`make setup` installs the `tracking` group).
Slow: three tiny-model runs of a few seconds each, and an MLflow server that takes about 15 s to start.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from nodus.cli.main import cli

pytestmark = pytest.mark.slow

PROMPT = "Spell the word backwards inside <answer></answer>.\n\nWord: {word}"
STEPS = 6
LOCAL_ONLY = {"MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true", "WANDB_DISABLE_CODE": "true"}
"""No tracker telemetry: a test sends nothing beyond loopback."""


def nodus(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture
def mlflow_server(tmp_path: Path) -> Iterator[str]:
    """`mlflow server` on 127.0.0.1 and a free port, its store under tmp_path; its URI. Stopped by its process group
    (the server and its uvicorn worker), which it leads: `start_new_session`."""
    pytest.importorskip("mlflow", reason="mlflow is not installed (make setup installs the tracking group)")
    folder = tmp_path / "mlflow-server"
    folder.mkdir()
    port = free_port()
    command = [
        *(sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"),
        *("--backend-store-uri", f"sqlite:///{folder / 'mlflow.db'}"),
        *("--artifacts-destination", str(folder / "artifacts")),
    ]
    log = (folder / "server.log").open("wb")
    server = subprocess.Popen(
        command,
        cwd=folder,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, **LOCAL_ONLY},
        start_new_session=True,
    )
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{uri}/health", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                tail = (folder / "server.log").read_text(errors="replace")[-3000:]
                pytest.fail(f"mlflow server did not answer on {uri} (exit status {server.poll()}):\n{tail}")
            time.sleep(0.5)
        yield uri
    finally:
        stop_group(server)
        log.close()


def stop_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the process group `process` leads, SIGKILL after 20 s; then reap it."""
    for sig, grace in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        try:
            process.wait(timeout=grace)
            break
        except subprocess.TimeoutExpired:
            continue
    process.wait(timeout=10)


@pytest.fixture
def project(tmp_path: Path, tiny_model: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> str:
    """A project in tmp_path (the current folder) with a Volume `chats` holding chats.jsonl (uploaded with `nodus
    cp`) and the tiny model in the Hugging Face cache nodus imports from; the model's pinned URI."""
    cache_folder, revision = tiny_model
    monkeypatch.delenv("NODUS_HOME", raising=False)
    monkeypatch.delenv("NODUS_STATE", raising=False)
    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "WANDB_API_KEY", "WANDB_PROJECT", "WANDB_MODE"):
        monkeypatch.delenv(name, raising=False)
    for name, setting in LOCAL_ONLY.items():
        monkeypatch.setenv(name, setting)
    # This host's settings for the trainers nodus starts, which get none of this shell's variables unless listed: no
    # tracker telemetry, and W&B offline where a test asks for it (nothing leaves loopback).
    monkeypatch.setenv("NODUS_PASS_ENV", ",".join([*LOCAL_ONLY, "WANDB_MODE"]))
    monkeypatch.setenv("HF_HUB_CACHE", cache_folder)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "nodus.lock").write_text("lockfileVersion: 1\n")
    (tmp_path / "volumes.yaml").write_text(
        "apiVersion: nodus.dev/v1\nkind: Volume\nmetadata: {name: chats}\nspec: {accessMode: ReadWriteOnce}\n"
    )
    assert nodus("apply", "volumes.yaml", "--yes")[0] == 0
    rows = [{"question": PROMPT.format(word=w), "answer": f"<answer>{w[::-1]}</answer>"} for w in made_up_words(160)]
    (tmp_path / "chats.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    code, output = nodus("cp", "chats.jsonl", "vol/chats:chats.jsonl")
    assert code == 0, output
    return f"hf://nodus/tiny-qwen3@{revision}"


def made_up_words(count: int) -> list[str]:
    """Words of three to five letters from a fixed seed: the reverse-words skill the tiny model was warmed up on."""
    import random

    rng = random.Random(17)
    found: list[str] = []
    while len(found) < count:
        word = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 5)))
        if word not in found and word != word[::-1]:
            found.append(word)
    return found


def apply_sft(model: str, name: str, tracking: str, secrets: str) -> str:
    """Apply `secrets` (YAML documents) and an SFT TrainingJob with `tracking`, wait for it; `nodus logs tj/NAME`."""
    Path("secrets.yaml").write_text(secrets)
    Path("job.yaml").write_text(
        "apiVersion: nodus.dev/v1beta1\nkind: TrainingJob\n"
        f'metadata: {{name: {name}}}\nspec:\n  runtime: nodus/sft\n  model: {{uri: "{model}"}}\n'
        "  data: {volume: chats, path: chats.jsonl, format: JSONL, columns: {prompt: question, completion: answer}}\n"
        f"  parameters: {{steps: {STEPS}, learningRate: 1.0e-2, batchSize: 8, saveSteps: {STEPS}, "
        "lora: {r: 8, alpha: 16}}\n"
        f"  tracking: {tracking}\n"
    )
    code, output = nodus("apply", ".", "--yes", "--wait", "--timeout", "5m")
    logs = nodus("logs", f"tj/{name}")[1]
    assert code == 0 and f"TrainingJob/{name}: Succeeded" in output, f"{output}\n--- nodus logs ---\n{logs[-4000:]}"
    return logs


def results(name: str) -> dict[str, Any]:
    code, output = nodus("cp", f"tj/{name}:outputs/results.json", f"downloads/{name}-results.json")
    assert code == 0, output
    found: dict[str, Any] = json.loads(Path(f"downloads/{name}-results.json").read_text())
    return found


def files_holding(root: Path, secret: str) -> list[str]:
    """The files under `root` whose bytes contain `secret` (links are not followed)."""
    return [
        str(path.relative_to(root))
        for path in root.rglob("*")
        if path.is_file() and not path.is_symlink() and secret.encode() in path.read_bytes()
    ]


# --- MLflow --------------------------------------------------------------------------------------------------------


def test_metrics_reach_the_mlflow_server_and_the_token_no_file_of_the_state_folder(
    project: str, mlflow_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlflow.tracking import MlflowClient

    token = "mlflow-token-SECRET-4b1e7a"
    monkeypatch.setenv("TEST_MLFLOW_TRACKING_TOKEN", token)
    logs = apply_sft(
        project,
        "sft-mlflow",
        f'{{mlflow: {{uri: "{mlflow_server}", secret: mlflow, experiment: nodus-sft}}}}',
        "apiVersion: nodus.dev/v1\nkind: Secret\nmetadata: {name: mlflow}\n"
        "spec: {keys: [MLFLOW_TRACKING_TOKEN], provider: Env, envPrefix: TEST_}\n",
    )
    assert "warning: tracking" not in logs, logs

    client = MlflowClient(tracking_uri=mlflow_server)
    experiment = client.get_experiment_by_name("nodus-sft")
    assert experiment is not None, [e.name for e in client.search_experiments()]
    runs = client.search_runs([experiment.experiment_id], order_by=["attributes.start_time ASC"])

    def points(run_id: str, key: str) -> list[tuple[int, float]]:
        return sorted((m.step, round(m.value, 4)) for m in client.get_metric_history(run_id, key))

    for each in runs:
        print(
            f"\nMLflow run {each.info.run_id} ({each.info.status}, {len(each.data.params)} params): "
            f"loss {points(each.info.run_id, 'loss')}, eval_loss {points(each.info.run_id, 'eval_loss')}"
        )
    training = [each for each in runs if "loss" in each.data.metrics]
    assert len(training) == 1, runs
    run = training[0]
    results_json = results("sft-mlflow")
    assert points(run.info.run_id, "loss") == [(row["step"], round(row["loss"], 4)) for row in results_json["history"]]
    held = results_json["heldOut"]
    assert points(run.info.run_id, "eval_loss")[0] == (0, round(held["before"]["heldOutLoss"], 4))  # the baseline
    assert run.info.status == "FINISHED"
    assert run.data.params["learning_rate"] == "0.01" and run.data.params["max_steps"] == str(STEPS)

    assert files_holding(Path(".nodus"), token) == []
    assert token not in nodus("describe", "tj/sft-mlflow")[1]

    # The measurement after training belongs in the same run. transformers' MLflowCallback ends its run at the end
    # of training, and the trainer measures the held-out rows after that, so mlflow starts a second run for it.
    finals = [point for each in runs for point in points(each.info.run_id, "eval_loss") if point[0] == STEPS]
    assert finals == [(STEPS, round(held["after"]["heldOutLoss"], 4))], finals
    assert len(runs) == 1, [each.info.run_id for each in runs]  # the measurement after training in the same run


# --- W&B, offline ----------------------------------------------------------------------------------------------------


def test_metrics_land_in_an_offline_wandb_run(project: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("wandb", reason="wandb is not installed (make setup installs the tracking group)")
    key = "wandb0SECRET0" + "7" * 28  # the 40 characters of a W&B API key
    monkeypatch.setenv("TEST_WANDB_API_KEY", key)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_DIR", raising=False)
    logs = apply_sft(
        project,
        "sft-wandb",
        "{wandb: {connection: wandb, project: nodus-sft}}",
        "apiVersion: nodus.dev/v1\nkind: Secret\nmetadata: {name: wandb}\n"
        "spec: {keys: [WANDB_API_KEY], provider: Env, envPrefix: TEST_}\n",
    )
    assert "warning: tracking" not in logs, logs

    # wandb writes `./wandb/offline-run-*` in the trainer's working folder: the job's folder in the state folder.
    runs = sorted(Path(".nodus").rglob("offline-run-*"))
    assert [run.parent.parent for run in runs] == [Path(".nodus/jobs/default/sft-wandb")], runs
    run = runs[0]
    files = sorted(str(p.relative_to(run)) for p in run.rglob("*") if p.is_file())
    print(f"\nW&B offline run {run.name}: {files}")
    records = wandb_records(run)
    kinds = [record.WhichOneof("record_type") for record in records]
    rows = [items(record.history.item) for record in records if record.WhichOneof("record_type") == "history"]
    config: dict[str, Any] = {}
    for record in records:
        if record.WhichOneof("record_type") == "config":
            config.update(items(record.config.update))
    losses = [(row["train/global_step"], row["train/loss"]) for row in rows if "train/loss" in row]
    evaluations = [row["eval/loss"] for row in rows if "eval/loss" in row]
    print(f"W&B records: { {kind: kinds.count(kind) for kind in sorted(set(kinds))} }")
    print(f"W&B train/loss per step: {[(step, round(loss, 4)) for step, loss in losses]}; eval/loss {evaluations}")
    history = results("sft-wandb")
    assert [(step, round(loss, 4)) for step, loss in losses] == [
        (row["step"], round(row["loss"], 4)) for row in history["history"]
    ]
    # The held-out measurements before and after training are the trainer's evaluations, in the same W&B run.
    held = history["heldOut"]
    assert [round(value, 4) for value in evaluations] == [
        round(held["before"]["heldOutLoss"], 4),
        round(held["after"]["heldOutLoss"], 4),
    ]
    assert config["learning_rate"] == 0.01 and config["max_steps"] == STEPS
    assert kinds[0] == "header" and kinds[-1] == "exit" and kinds.count("run") == 1
    assert files_holding(Path(".nodus"), key) == []  # the offline run's files among them


def wandb_records(run: Path) -> list[Any]:
    """The records of an offline run's `.wandb` file (wandb_internal_pb2.Record), in order.

    wandb 0.31 no longer ships a Python reader of it, so this reads the format itself: a 7-byte header (`:W&B`, two
    bytes of magic and a version byte), then LevelDB's log format: 32 KiB blocks of chunks, each `crc32c (4) length
    (2, little-endian) type (1)` and the bytes; FULL (1) is a whole record, FIRST (2), MIDDLE (3), LAST (4) one cut
    across blocks; a block's tail under 7 bytes is padding."""
    import struct

    from wandb.proto import wandb_internal_pb2

    (log,) = run.glob("*.wandb")
    data = log.read_bytes()
    assert data[:4] == b":W&B", data[:7]
    block, position, pieces, records = 32768, 7, [], []
    while position + 7 <= len(data):
        left = block - position % block
        if left < 7:
            position += left
            continue
        _, length, kind = struct.unpack("<IHB", data[position : position + 7])
        if kind == 0:  # preallocated zeros at the end of the block
            position += left
            continue
        pieces.append(data[position + 7 : position + 7 + length])
        position += 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()  # type: ignore[attr-defined]
            record.ParseFromString(b"".join(pieces))
            records.append(record)
            pieces = []
    return records


def items(update: Any) -> dict[str, Any]:
    """A history row's or config update's items as {key: value}."""
    return {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in update}


# --- a tracker that cannot be reached -------------------------------------------------------------------------------


def test_an_unreachable_mlflow_server_is_a_warning_not_a_failed_run(project: str) -> None:
    pytest.importorskip("mlflow", reason="mlflow is not installed (make setup installs the tracking group)")
    nowhere = f"http://127.0.0.1:{free_port()}"  # a loopback port nothing listens on
    logs = apply_sft(
        project,
        "sft-unreachable",
        f'{{mlflow: {{uri: "{nowhere}", experiment: nodus-sft}}}}',
        "",
    )
    warnings = [line for line in logs.splitlines() if "warning: tracking.mlflow" in line]
    print(f"\n{warnings}")
    assert len(warnings) == 1 and "reporting failed" in warnings[0] and "going on without mlflow" in warnings[0]
    assert results("sft-unreachable")["heldOut"]["improved"]
