"""Project settings: `nodus.yaml` beside `nodus.lock`, what a project decides for all its resources on a host.

Who uses it: `nodus.reconciler.project.Project.settings` reads it (once per command); the TrainingJob controller
takes the grading sandbox and the executor from it. The file is plain YAML without `apiVersion` (it is not a
resource, so `nodus plan` skips it as other YAML), unknown keys are errors, and every key has a default, so a
project without the file behaves as before:

    # nodus.yaml
    executor: local        # where the project's jobs run: local (default, the only one yet)
    grading:
      sandbox: container   # auto (default) | container | process
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import ValidationError

from nodus.errors import ConfigError
from nodus.specs.base import SpecModel

SETTINGS_FILE = "nodus.yaml"


class GradingSettings(SpecModel):
    """How this project's graders are sandboxed on the hosts that run its jobs."""

    sandbox: Literal["auto", "container", "process"] = "auto"
    """auto: in the grader image under podman where the host has it, else in process mode (said at apply, as an
    event and as the job's ContainerSandbox condition); container: always in the image, and a job is refused on a
    host that cannot (reason SandboxUnavailable); process: always in process mode (namespaces, a dropped uid,
    rlimits, exactly the files the image would hold)."""


class ProjectSettings(SpecModel):
    """The settings of one project (`nodus.yaml`)."""

    executor: Literal["local"] = "local"
    """Which executor runs the project's jobs (`nodus.reconciler.executors.choose`): local, processes on this
    machine under a supervisor each. The only one so far; the field exists so a project names it."""
    grading: GradingSettings = GradingSettings()
    """Grading sandboxes."""


def load_settings(root: Path) -> ProjectSettings:
    """The settings in `root/nodus.yaml`, or the defaults where there is none; a bad file is one ConfigError
    naming the file and the field."""
    path = root / SETTINGS_FILE
    if not path.is_file():
        return ProjectSettings()
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc})") from None
    if data is None:
        return ProjectSettings()
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: project settings are a mapping (grading: {{sandbox: ...}})")
    try:
        return ProjectSettings.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"])
        raise ConfigError(
            f"{path}: {field}: {first['msg']}",
            hint=f"see the README's Project settings: {field if field == 'executor' else 'grading.sandbox'}",
        ) from None
