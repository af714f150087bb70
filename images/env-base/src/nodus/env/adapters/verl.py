"""Adapter for a verl (or SkyRL) dataset: a module naming parquet `train_files` / `val_files` and a reward.

Who uses it: `adapters.adapt`, when the loaded module (or object) has `train_files`. Rows are verl's:
`prompt` (at most a system message and one user message), `data_source`, `ability`,
`reward_model.ground_truth` and `extra_info`. With `compute_score(data_source, solution_str, ground_truth,
extra_info=None)` (verl's custom reward; a float, or a dict with "score"), that scores each completion;
without it, each row's `env_class` names the SkyRL-gym environment that does (`adapters.skyrl`). Without
`val_files`, every fifth row (rows 4, 9, ...) of `train_files` is held out.

Files are local paths (relative ones from the module's folder) or `hf://datasets/owner/name[@revision]/path`,
downloaded with huggingface_hub into HF_HOME: the build's freeze step has the network and HF_HOME becomes
a layer of the image, so grading (HF_HUB_OFFLINE=1) reads that copy. Parquet is read with pyarrow, which
the package's `datasets` dependency brings.

Ground truth never leaves the grader: a task's metadata keeps only `data_source`, `ability`, `env_class`
and `extra_info`'s `index` and `split`; `reward_model`, `reward_spec` and the rest of `extra_info` stay
in the task's answer.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodus.env.adapters import skyrl
from nodus.env.adapters.base import AdapterError, RawTask, StepResult

HF_PREFIX = "hf://datasets/"
PUBLIC_KEYS = ("data_source", "ability", "env_class")
PUBLIC_EXTRA_INFO = ("index", "split")


def accepts(obj: Any) -> bool:
    files = getattr(obj, "train_files", None)
    return isinstance(files, str) or (isinstance(files, list | tuple) and all(isinstance(f, str) for f in files))


@dataclass(frozen=True)
class Row:
    """One dataset row as the reward needs it (the task's answer: never printed)."""

    data_source: Any
    ground_truth: Any
    extra_info: Any
    row: dict[str, Any] = field(default_factory=dict)


def file_list(obj: Any, name: str) -> list[str]:
    value = getattr(obj, name, None)
    if value is None:
        return []
    files = [value] if isinstance(value, str) else value
    if not isinstance(files, list | tuple) or not files or not all(isinstance(f, str) and f for f in files):
        raise AdapterError(f"verl dataset: {name} must be a parquet path or a list of them")
    return list(files)


def local_path(path: str, base: Path | None) -> str:
    """Where a file named in `train_files`/`val_files` is on this machine (an `hf://` one is downloaded once)."""
    if path.startswith(HF_PREFIX):
        return _hub_file(path)
    if path.startswith("hf://"):
        raise AdapterError(f"verl dataset: {path}: only hf://datasets/owner/name/path files can be fetched")
    if not os.path.isabs(path) and base is not None and (base / path).exists():
        return str(base / path)
    return path


def _hub_file(path: str) -> str:
    owner, _, rest = path.removeprefix(HF_PREFIX).partition("/")
    name, _, filename = rest.partition("/")
    name, _, revision = name.partition("@")
    if not owner or not name or not filename:
        raise AdapterError(f"verl dataset: {path}: expected hf://datasets/owner/name[@revision]/path/in/repo.parquet")
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        raise AdapterError(
            f"verl dataset: {path} needs huggingface_hub; add datasets to the package's dependencies"
        ) from None
    try:
        return str(hf_hub_download(f"{owner}/{name}", filename, repo_type="dataset", revision=revision or None))
    except Exception as exc:
        # Offline with no copy: the file was not fetched when the image was built.
        raise AdapterError(f"verl dataset: {path}: cannot fetch it ({type(exc).__name__}: {exc})") from exc


def read_rows(path: str) -> list[dict[str, Any]]:
    try:
        import pyarrow.parquet as parquet  # type: ignore[import-untyped]
    except ImportError:
        raise AdapterError(
            "verl dataset: reading parquet needs pyarrow; add datasets to the package's dependencies"
        ) from None
    try:
        rows: list[dict[str, Any]] = parquet.read_table(path).to_pylist()
    except Exception as exc:
        raise AdapterError(f"verl dataset: cannot read {path}: {type(exc).__name__}: {exc}") from exc
    return rows


def chat_prompt(prompt: Any, where: str) -> list[dict[str, Any]]:
    """A row's `prompt` as chat messages: an optional system message, then exactly one user message."""
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    if not isinstance(prompt, list) or not all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in prompt
    ):
        raise AdapterError(f"{where}: prompt must be a list of {{'role', 'content'}} messages")
    roles = [m["role"] for m in prompt]
    if roles not in (["user"], ["system", "user"]):
        raise AdapterError(
            f"{where}: prompt must be at most a system message and one user message (got {', '.join(roles) or 'none'})"
        )
    return [{"role": m["role"], "content": m["content"]} for m in prompt]


def public_metadata(row: dict[str, Any]) -> dict[str, Any]:
    """What a task line may carry of a row: where it came from, never its answer."""
    metadata = {key: row[key] for key in PUBLIC_KEYS if isinstance(row.get(key), str | int | float)}
    extra = row.get("extra_info")
    if isinstance(extra, dict):
        metadata.update({k: extra[k] for k in PUBLIC_EXTRA_INFO if isinstance(extra.get(k), str | int)})
    return metadata


def ground_truth(row: dict[str, Any]) -> Any:
    for spec in ("reward_model", "reward_spec"):
        value = row.get(spec)
        if isinstance(value, dict) and "ground_truth" in value:
            return value["ground_truth"]
    return None


def score_value(value: Any) -> Any:
    """verl's reward result -> a reward: a dict gives its "score"."""
    if isinstance(value, dict):
        if "score" not in value:
            raise TypeError(f"compute_score returned a dict without 'score' (keys {sorted(value)})")
        return value["score"]
    return value


def gold_texts(answer: Any) -> list[str]:
    """The ground truth in the forms verl reward functions parse: bare, `#### x`, `\\boxed{x}`, `<answer>x</answer>`."""
    text = str(answer)
    return [text, f"#### {text}", f"\\boxed{{{text}}}", f"<answer>{text}</answer>"]


class VerlAdapter:
    """verl parquet rows scored by the module's compute_score, or by each row's SkyRL-gym environment."""

    multi_turn = False

    def __init__(self, obj: Any) -> None:
        self.obj = obj
        self.compute_score: Callable[..., Any] | None = getattr(obj, "compute_score", None)
        if self.compute_score is not None and not callable(self.compute_score):
            raise AdapterError("verl dataset: compute_score must be a function")
        self.kind = "verl" if self.compute_score is not None else "skyrl"
        self.reward_type = str(getattr(obj, "REWARD_TYPE", "Continuous"))
        self.train_files = file_list(obj, "train_files")
        self.val_files = file_list(obj, "val_files")
        module_file = getattr(obj, "__file__", None)
        self.base = Path(module_file).parent if isinstance(module_file, str) else None
        self.skyrl = None if self.compute_score is not None else skyrl.SkyRLScorer(getattr(obj, "env_config", None))
        self._cache: dict[str, list[RawTask]] | None = None

    def raw_tasks(self, split: str) -> list[RawTask]:
        if self._cache is None:
            train = self._tasks(self.train_files)
            if self.val_files:
                self._cache = {"train": train, "test": self._tasks(self.val_files)}
            else:
                self._cache = {
                    "train": [t for i, t in enumerate(train) if i % 5 != 4],
                    "test": [t for i, t in enumerate(train) if i % 5 == 4],
                }
            if self.skyrl is not None:
                self.skyrl.check([t.answer.row for s in ("train", "test") for t in self._cache[s]])
        return self._cache[split]

    def _tasks(self, files: list[str]) -> list[RawTask]:
        tasks: list[RawTask] = []
        for name in files:
            path = local_path(name, self.base)
            for number, row in enumerate(read_rows(path)):
                where = f"{os.path.basename(name)} row {number}"
                if self.skyrl is not None and not isinstance(row.get("env_class"), str):
                    raise AdapterError(
                        f"{where}: no env_class, and the module has no compute_score: name the SkyRL-gym "
                        "environment of each row, or define compute_score(data_source, solution_str, ground_truth, "
                        "extra_info=None)"
                    )
                answer = Row(row.get("data_source"), ground_truth(row), row.get("extra_info"), row)
                tasks.append(RawTask(chat_prompt(row.get("prompt"), where), answer, public_metadata(row)))
        return tasks

    def reward(self, completion: str, task: RawTask) -> Any:
        row: Row = task.answer
        if self.skyrl is not None:
            return self.skyrl.score(row.row, completion)
        assert self.compute_score is not None
        return score_value(
            self.compute_score(
                data_source=row.data_source,
                solution_str=completion,
                ground_truth=row.ground_truth,
                extra_info=row.extra_info,
            )
        )

    def step(self, turns: list[str], task: RawTask) -> StepResult:
        return StepResult(None, self.reward(turns[0] if turns else "", task))

    def extracted(self, completion: str) -> str | None:
        return None

    def gold_completions(self, task: RawTask) -> list[str]:
        maker = getattr(self.obj, "gold_completion", None)
        if callable(maker):
            return [str(maker(task.answer.ground_truth))]
        return gold_texts(task.answer.ground_truth) if task.answer.ground_truth is not None else []
