"""What a TrainingJob's trainer gets from Secrets and from `spec.tracking`, by reference: never a value in the store.

Who calls it: the TrainingJob controller at launch (`reconcile_trainingjob`). It turns
- `spec.model.secret` (and `spec.teacher.secret`) into HF_TOKEN, for gated repositories,
- `spec.tracking.mlflow` into MLFLOW_TRACKING_URI and MLFLOW_EXPERIMENT_NAME (plain settings) and, from its Secret,
  MLFLOW_TRACKING_TOKEN or MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (whichever keys the Secret has),
- `spec.tracking.wandb` into WANDB_PROJECT and, from the Secret its `connection` names, WANDB_API_KEY,
into the workload's `env` (settings) and `secrets` (`SecretRef`s: the Secret's key and where its value is, which the
job's supervisor reads when it starts the trainer: `executors/local/supervisor.py`). Each value is read once here too,
to refuse the launch in one line naming the Secret and the key when it cannot be found, and then dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from nodus.reconciler.executors.workload import SecretRef
from nodus.reconciler.project import Project
from nodus.reconciler.secret_values import stored_secret, value

HF_TOKEN: Final = "HF_TOKEN"
MLFLOW_KEYS: Final = ("MLFLOW_TRACKING_TOKEN", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")
WANDB_KEY: Final = "WANDB_API_KEY"


@dataclass
class RunSecrets:
    """The trainer's extra environment: plain settings, and references to Secret keys."""

    env: dict[str, str] = field(default_factory=dict)
    secrets: list[SecretRef] = field(default_factory=list)


def run_secrets(spec: Mapping[str, Any], project: Project, label: str) -> RunSecrets:
    """The settings and Secret references of a TrainingJob's `spec`; ConfigError naming the field, the Secret and the
    key when a value cannot be read now."""
    found = RunSecrets()
    for part in ("model", "teacher"):
        secret = (spec.get(part) or {}).get("secret")
        if secret and not any(ref.env == HF_TOKEN for ref in found.secrets):
            found.secrets.append(_ref(project, label, f"spec.{part}.secret", str(secret), HF_TOKEN, (HF_TOKEN,)))
    tracking = spec.get("tracking") or {}
    mlflow = tracking.get("mlflow") or {}
    if mlflow:
        found.env["MLFLOW_TRACKING_URI"] = str(mlflow["uri"])
        if mlflow.get("experiment"):
            found.env["MLFLOW_EXPERIMENT_NAME"] = str(mlflow["experiment"])
        if mlflow.get("secret"):
            source = stored_secret(project, str(mlflow["secret"]), f"{label}: spec.tracking.mlflow.secret")
            keys = [key for key in MLFLOW_KEYS if key in source.keys] or list(source.keys)[:1]
            for key in keys:
                target = key if key in MLFLOW_KEYS else "MLFLOW_TRACKING_TOKEN"
                ref = _ref(project, label, "spec.tracking.mlflow.secret", str(mlflow["secret"]), target, (key,))
                found.secrets.append(ref)
    wandb = tracking.get("wandb") or {}
    if wandb:
        if wandb.get("project"):
            found.env["WANDB_PROJECT"] = str(wandb["project"])
        name = str(wandb["connection"])
        found.secrets.append(_ref(project, label, "spec.tracking.wandb.connection", name, WANDB_KEY, (WANDB_KEY,)))
    return found


def tracking_params(spec: Mapping[str, Any]) -> dict[str, Any]:
    """`params.json`'s `tracking`: which trackers the trainer reports to (the settings themselves are in its env)."""
    tracking = spec.get("tracking") or {}
    out: dict[str, Any] = {}
    if tracking.get("mlflow"):
        out["mlflow"] = {"experiment": tracking["mlflow"].get("experiment")}
    if tracking.get("wandb"):
        out["wandb"] = {"project": tracking["wandb"].get("project")}
    return out


def secret_ref(project: Project, label: str, where: str, name: str, env: str) -> SecretRef:
    """A reference to Secret `name`'s key `env` (else its only key) for the variable `env`, checked readable now."""
    return _ref(project, label, where, name, env, (env,))


def _ref(project: Project, label: str, where: str, name: str, env: str, keys: tuple[str, ...]) -> SecretRef:
    """A reference to the Secret's key for `env` (the first of `keys` it has, else its only key), checked readable."""
    source = stored_secret(project, name, f"{label}: {where}")
    key = next((key for key in keys if key in source.keys), source.keys[0] if len(source.keys) == 1 else keys[0])
    value(source, name, key, base=project.root, where=f"{label}: {where}")  # readable now; the value is dropped
    dumped = source.model_dump(mode="json", by_alias=True, exclude_none=True)
    if source.provider == "File" and source.path is not None and not Path(source.path).expanduser().is_absolute():
        dumped["path"] = str(project.root / source.path)  # the supervisor reads it from the job's folder
    return SecretRef(env=env, secret=name, key=key, source=dumped, field=where)
