"""What a run leaves in NODUS_OUTPUT_DIR: the adapter, results, provenance, curves and a manifest of them all.

Who uses it: `grpo_lora.main` (everything) and `evaluate.main` (results, provenance, manifest). Layout, as the
seeds' Training guide names it:

    adapter/            the LoRA adapter (adapter_model.safetensors, adapter_config.json) and the tokenizer
    results.json        the final metrics and the per-step history
    provenance.json     runtime, environment and model: names, digests and revisions; library versions
    curves.png          reward and loss per step (when matplotlib can draw)
    manifest.json       {"files": {path: {"sha256", "size"}}} of every other file, written last
"""

from __future__ import annotations

import hashlib
import json
import os
from importlib import metadata
from pathlib import Path
from typing import Any

from nodus.runtimes.contract import RunContext

LIBRARIES = ("nodus-runtimes", "torch", "transformers", "trl", "peft", "accelerate")


def write_json(path: Path, document: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n")
    os.replace(temporary, path)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def model_digest(folder: Path) -> str:
    """sha256 over the model folder's files (name and content hash, sorted): which weights this run started from."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and not p.name.startswith(".")):
        digest.update(f"{path.relative_to(folder).as_posix()}\0{sha256(path)}\n".encode())
    return "sha256:" + digest.hexdigest()


def provenance(context: RunContext) -> dict[str, Any]:
    params = context.params
    versions: dict[str, str | None] = {}
    for name in LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    environment = params.get("environment") or {}
    return {
        "runtime": params.get("runtime"),
        "environment": {
            "name": environment.get("name"),
            "version": environment.get("version"),
            "image": environment.get("image"),
            "seed": environment.get("seed"),
        },
        "model": {"revision": params.get("modelRevision"), "digest": model_digest(context.model)},
        "trainingJob": params.get("trainingJob"),
        "attempt": context.attempt,
        "libraries": versions,
    }


def history(log_history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per optimizer step from TRL's log history (restored from the checkpoint on a resume)."""
    rows: dict[int, dict[str, Any]] = {}
    for entry in log_history:
        if "step" not in entry or "train_runtime" in entry:
            continue
        row = rows.setdefault(int(entry["step"]), {"step": int(entry["step"])})
        for key in ("loss", "reward", "reward_std", "kl", "frac_reward_zero_std"):
            if isinstance(entry.get(key), int | float):
                row[key] = entry[key]
    return [rows[step] for step in sorted(rows)]


def plot(rows: list[dict[str, Any]], path: Path) -> bool:
    """Reward and loss per step, one panel each; False when there is nothing to draw or no matplotlib."""
    if not rows:
        return False
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    figure, (reward_axis, loss_axis) = plt.subplots(2, 1, figsize=(7, 5), sharex=True)
    steps = [r["step"] for r in rows]
    rewards = [r.get("reward", float("nan")) for r in rows]
    reward_axis.plot(steps, rewards, color="tab:green", alpha=0.4, label="mean reward per step")
    window = max(1, len(rows) // 10)
    smooth = [
        sum(rewards[max(0, i - window + 1) : i + 1]) / len(rewards[max(0, i - window + 1) : i + 1])
        for i in range(len(rewards))
    ]
    reward_axis.plot(steps, smooth, color="tab:green", label=f"moving mean ({window} steps)")
    reward_axis.legend(loc="lower right")
    reward_axis.set_ylabel("reward")
    reward_axis.grid(alpha=0.3)
    loss_axis.plot(steps, [r.get("loss", float("nan")) for r in rows], color="tab:blue", label="loss")
    loss_axis.set_ylabel("loss")
    loss_axis.set_xlabel("step")
    loss_axis.grid(alpha=0.3)
    figure.suptitle("GRPO: reward and loss per step")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return True


def manifest(outputs: Path) -> dict[str, Any]:
    files = {}
    for path in sorted(p for p in outputs.rglob("*") if p.is_file() and p.name != "manifest.json"):
        files[path.relative_to(outputs).as_posix()] = {"sha256": sha256(path), "size": path.stat().st_size}
    return {"files": files}


def export(context: RunContext, *, trainer: Any = None, tokenizer: Any = None, results: dict[str, Any]) -> None:
    outputs = context.outputs
    if trainer is not None:
        adapter = outputs / "adapter"
        trainer.model.save_pretrained(adapter)
        if tokenizer is not None:
            tokenizer.save_pretrained(adapter)
        rows = history(trainer.state.log_history)
        results = {**results, "history": rows}
        plot(rows, outputs / "curves.png")
    write_json(outputs / "results.json", results)
    write_json(outputs / "provenance.json", provenance(context))
    write_json(outputs / "manifest.json", manifest(outputs))
