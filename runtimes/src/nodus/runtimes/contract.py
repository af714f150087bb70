"""The runtime contract of the seeds' "Bring your own runtime" table, read once at a trainer's start.

Who uses it: `grpo_lora.main` and `evaluate.main`. The supervisor sets the variables:
`NODUS_INPUT_PARAMS` (a folder with `params.json`: task, mode, merged parameters, environment, evaluation,
trainingJob, modelRevision, runtime), `NODUS_INPUT_MODEL` (the imported, read-only model folder),
`NODUS_INPUT_ADAPTERS` (LoRA adapters to merge into it first, when the job's model is an exported adapter),
`NODUS_STATE_DIR` (resumable state: checkpoints, the saved baseline), `NODUS_OUTPUT_DIR` (results), and
`NODUS_ATTEMPT_API` / `NODUS_JOB_NAME` (the attempt API socket and the job it serves).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodus.runtimes.attempt import AttemptClient
from nodus.runtimes.merged_model import merge_adapters


class ContractError(SystemExit):
    """A variable or file of the contract is missing: the trainer cannot start (exit status 2)."""

    def __init__(self, message: str) -> None:
        print(f"nodus runtime: {message}", flush=True)
        super().__init__(2)


def _adapters() -> tuple[Path, ...]:
    """NODUS_INPUT_ADAPTERS: the adapter folders to merge into the model (os.pathsep between them), each checked."""
    folders = tuple(Path(part) for part in os.environ.get("NODUS_INPUT_ADAPTERS", "").split(os.pathsep) if part)
    for folder in folders:
        if not (folder / "adapter_config.json").is_file():
            raise ContractError(f"NODUS_INPUT_ADAPTERS: {folder} holds no adapter_config.json")
    return folders


def _required(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise ContractError(f"{name} is not set; this command runs under a nodus job supervisor")
    return value


@dataclass
class RunContext:
    params: dict[str, Any]
    model: Path
    state: Path
    outputs: Path
    api: AttemptClient
    attempt: str = "1"
    parameters: dict[str, Any] = field(default_factory=dict)
    base_model: Path | None = None
    """The base model (NODUS_INPUT_MODEL) where `model` is it with `adapters` merged in; None otherwise."""
    adapters: tuple[Path, ...] = ()
    """The LoRA adapter folders merged into `model` (NODUS_INPUT_ADAPTERS), in the order they were trained."""

    @classmethod
    def from_environment(cls, *, model_required: bool = True) -> RunContext:
        """The contract of this process's environment; `model_required=False` for a run that loads no model (an
        evaluation through an endpoint), whose `model` is then an empty path."""
        params_file = Path(_required("NODUS_INPUT_PARAMS")) / "params.json"
        try:
            params = json.loads(params_file.read_text())
        except (OSError, ValueError) as exc:
            raise ContractError(f"cannot read {params_file}: {exc}") from None
        model = (
            Path(_required("NODUS_INPUT_MODEL")) if model_required else Path(os.environ.get("NODUS_INPUT_MODEL", ""))
        )
        if model_required and not (model / "config.json").is_file():
            raise ContractError(f"NODUS_INPUT_MODEL {model} holds no config.json")
        state, outputs = Path(_required("NODUS_STATE_DIR")), Path(_required("NODUS_OUTPUT_DIR"))
        state.mkdir(parents=True, exist_ok=True)
        outputs.mkdir(parents=True, exist_ok=True)
        adapters = _adapters() if model_required else ()
        base = None
        if adapters:
            # The run's model is an exported LoRA adapter: trained on as its base with the adapters merged in.
            base, model = model, merge_adapters(model, adapters, state / "input-model")
        api = AttemptClient(_required("NODUS_ATTEMPT_API"), _required("NODUS_JOB_NAME"))
        return cls(
            params=params,
            model=model,
            state=state,
            outputs=outputs,
            api=api,
            attempt=os.environ.get("NODUS_ATTEMPT", "1"),
            parameters=dict(params.get("parameters") or {}),
            base_model=base,
            adapters=adapters,
        )

    @property
    def evaluation(self) -> dict[str, Any]:
        return dict(self.params.get("evaluation") or {"baseline": True, "final": True})
