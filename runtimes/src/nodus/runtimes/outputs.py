"""What a run leaves in NODUS_OUTPUT_DIR: the weights, results, provenance, curves and a manifest of them all.

Who uses it: `grpo_lora.main` (everything), `evaluate.main` (results, provenance, manifest) and `finetune.run`
for the data-driven runtimes (everything, with `model/` for full fine-tuning and their own curves). Layout, as the
seeds' Training guide names it:

    adapter/            the LoRA adapter (adapter_model.safetensors, adapter_config.json) and the tokenizer
    model/              instead of adapter/ after full fine-tuning: the whole model and the tokenizer
    results.json        the final metrics and the per-step history
    provenance.json     runtime, environment (or data and teacher) and model: names, digests and revisions (and,
                        for a model that is another run's outputs, that run: `model.trainedBy`); library versions
    curves.png          the method's metric (GRPO: reward) and loss per step (when matplotlib can draw)
    manifest.json       {"files": {path: {"sha256", "size"}}} of every other file, written last

The weights are written to `<folder>.partial` and renamed into place, so a run that dies while saving leaves no
half-written folder under the name a user would download.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from nodus.runtimes.contract import RunContext

LIBRARIES = ("nodus-runtimes", "torch", "transformers", "trl", "peft", "accelerate")


@dataclass(frozen=True)
class Curves:
    """What a run's history keeps of TRL's log and what curves.png draws: `metric` per step above the loss."""

    keys: tuple[str, ...] = ("loss", "reward", "reward_std", "kl", "frac_reward_zero_std")
    """The log entries kept per step in results.json `history`."""
    metric: str = "reward"
    """The entry drawn in the upper panel (with a moving mean), the loss in the lower one."""
    label: str = "reward"
    """The upper panel's axis label."""
    legend: str = "mean reward per step"
    title: str = "GRPO: reward and loss per step"


GRPO_CURVES = Curves()


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


def trained_by(model: Path) -> dict[str, Any] | None:
    """The run that trained `model`, where the model is another run's outputs (a Volume revision that `exportTo`
    filled): what that run's provenance.json says of itself and of the model it started from. The folder is the
    outputs themselves (provenance.json beside model/) or their model/ or adapter/ folder (provenance.json one up);
    None for a model that is not a run's output (a pinned Hugging Face revision, weights a user uploaded)."""
    for folder in (model, model.parent) if model.name in ("model", "adapter") else (model,):
        path = folder / "provenance.json"
        try:
            earlier = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(earlier, dict) or not earlier.get("trainingJob"):
            continue
        runtime = earlier.get("runtime")
        started = earlier.get("model")
        return {
            "trainingJob": earlier["trainingJob"],
            "attempt": earlier.get("attempt"),
            "runtime": runtime.get("name") if isinstance(runtime, dict) else runtime,
            "model": {"revision": started.get("revision"), "digest": started.get("digest")}
            if isinstance(started, dict)
            else None,
            "provenanceSha256": sha256(path),
        }
    return None


def merged_from(context: RunContext) -> dict[str, Any]:
    """For a run whose model is LoRA adapters merged into a base (`RunContext.adapters`): the base and each adapter,
    named as params.json names them, with their digests and the run that trained each adapter. Empty otherwise."""
    if context.base_model is None or not context.adapters:
        return {}
    params = context.params
    names = list(params.get("modelAdapters") or [])
    adapters = []
    for number, folder in enumerate(context.adapters):
        entry: dict[str, Any] = {"revision": names[number] if number < len(names) else None}
        entry["digest"] = model_digest(folder)
        if (earlier := trained_by(folder)) is not None:
            entry["trainedBy"] = earlier
        adapters.append(entry)
    base = {"revision": params.get("modelBase"), "digest": model_digest(context.base_model)}
    return {"base": base, "adapters": adapters, "merged": True}


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
        "model": {
            "revision": params.get("modelRevision"),
            "digest": model_digest(context.model),
            **({"trainedBy": earlier} if (earlier := trained_by(context.model)) else {}),
            **merged_from(context),
        },
        "trainingJob": params.get("trainingJob"),
        "attempt": context.attempt,
        "libraries": versions,
    }


def history(log_history: list[dict[str, Any]], keys: tuple[str, ...] = GRPO_CURVES.keys) -> list[dict[str, Any]]:
    """One row per optimizer step from TRL's log history (restored from the checkpoint on a resume); evaluation
    entries (`eval_*`) are not steps and are left out."""
    rows: dict[int, dict[str, Any]] = {}
    for entry in log_history:
        if "step" not in entry or "train_runtime" in entry or any(key.startswith("eval_") for key in entry):
            continue
        row = rows.setdefault(int(entry["step"]), {"step": int(entry["step"])})
        for key in keys:
            if isinstance(entry.get(key), int | float):
                row[key] = entry[key]
    return [rows[step] for step in sorted(rows)]


def moving_mean(values: list[float]) -> tuple[list[float], str] | None:
    """The values' moving mean over a tenth of them and its legend (`moving mean (3 steps)`); None when the
    window is one step, since the mean of one step is the curve itself and a second line would say nothing."""
    window = max(1, len(values) // 10)
    if window == 1:
        return None
    smooth = [
        sum(values[max(0, i - window + 1) : i + 1]) / len(values[max(0, i - window + 1) : i + 1])
        for i in range(len(values))
    ]
    return smooth, f"moving mean ({window} steps)"


def plot(rows: list[dict[str, Any]], path: Path, curves: Curves = GRPO_CURVES) -> bool:
    """The metric (GRPO: reward) and loss per step, one panel each; False when there is nothing to draw or no
    matplotlib."""
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
    rewards = [r.get(curves.metric, float("nan")) for r in rows]
    reward_axis.plot(steps, rewards, color="tab:green", alpha=0.4, label=curves.legend)
    smooth = moving_mean(rewards)
    if smooth is not None:
        reward_axis.plot(steps, smooth[0], color="tab:green", label=smooth[1])
    reward_axis.legend(loc="lower right")
    reward_axis.set_ylabel(curves.label)
    reward_axis.grid(alpha=0.3)
    loss_axis.plot(steps, [r.get("loss", float("nan")) for r in rows], color="tab:blue", label="loss")
    loss_axis.set_ylabel("loss")
    loss_axis.set_xlabel("step")
    loss_axis.grid(alpha=0.3)
    figure.suptitle(curves.title)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return True


def manifest(outputs: Path) -> dict[str, Any]:
    files = {}
    for path in sorted(p for p in outputs.rglob("*") if p.is_file() and p.name != "manifest.json"):
        files[path.relative_to(outputs).as_posix()] = {"sha256": sha256(path), "size": path.stat().st_size}
    return {"files": files}


def save_weights(model: Any, tokenizer: Any, folder: Path) -> None:
    """The model (or its adapter) and the tokenizer into `folder`, through `<folder>.partial` and a rename."""
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    model.save_pretrained(partial)
    if tokenizer is not None:
        tokenizer.save_pretrained(partial)
    shutil.rmtree(folder, ignore_errors=True)  # an earlier attempt's copy of this same run's weights
    partial.rename(folder)


def export(
    context: RunContext,
    *,
    trainer: Any = None,
    tokenizer: Any = None,
    results: dict[str, Any],
    weights: str = "adapter",
    curves: Curves = GRPO_CURVES,
    sources: dict[str, Any] | None = None,
) -> None:
    """Everything a run leaves: `weights` names the folder (adapter or model), `curves` what the history keeps
    and draws, `sources` what provenance.json adds about the inputs (data, teacher)."""
    outputs = context.outputs
    if trainer is not None:
        save_weights(trainer.model, tokenizer, outputs / weights)
        rows = history(trainer.state.log_history, curves.keys)
        results = {**results, "history": rows}
        plot(rows, outputs / "curves.png", curves)
    write_json(outputs / "results.json", results)
    write_json(outputs / "provenance.json", {**provenance(context), **(sources or {})})
    write_json(outputs / "manifest.json", manifest(outputs))
