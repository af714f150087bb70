"""The Environment a job trains or evaluates on, as the job session gets it: how its graders find the
environment (an image, or package folders on this host) and which tasks the trainer gets (counts, seed, the
manifest folder that fixes each split's list).

Who uses it: the job session (`attempt_api.py` serves its tasks and grades against it), the local executor's
job spec (`executors/local/job.py`, which re-exports it: the controllers and the workload resolver import it
from there), and the tests. Its JSON (`to_json`/`from_json`, camelCase) is the `environment` of spec.json.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from nodus.errors import ConfigError

from ..grading import EnvironmentRef

DEFAULT_TRAIN_TASKS: Final = 256
DEFAULT_HELD_OUT_TASKS: Final = 64


@dataclass(frozen=True)
class EnvironmentSpec:
    """The Environment a job trains or evaluates on: how the graders find it and which tasks the trainer gets."""

    name: str
    version: str
    image: str | None = None
    digest: str | None = None
    paths: tuple[str, ...] = ()
    site_dirs: tuple[str, ...] = ()
    loader: str | None = None
    train_tasks: int = DEFAULT_TRAIN_TASKS
    held_out_tasks: int = DEFAULT_HELD_OUT_TASKS
    seed: int = 0
    manifests: str | None = None
    """A folder of task manifests, `<split>-<seed>.jsonl`: the whole list of a split at a seed, fixed at first
    use (or at build time) and reused by every later run of the environment, whoever asks."""

    def __post_init__(self) -> None:
        for what, count in (("trainTasks", self.train_tasks), ("heldOutTasks", self.held_out_tasks)):
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise ConfigError(f"environment {self.name}: {what} must be a whole number >= 0, got {count!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ConfigError(f"environment {self.name}: seed must be a whole number >= 0, got {self.seed!r}")
        self.ref()  # an environment with neither an image nor folders is refused here, not in the supervisor

    def ref(self) -> EnvironmentRef:
        return EnvironmentRef(
            self.name,
            self.version,
            image=self.image,
            digest=self.digest,
            paths=tuple(Path(p) for p in self.paths),
            site_dirs=tuple(Path(p) for p in self.site_dirs),
            loader=self.loader,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version,
            "image": self.image,
            "digest": self.digest,
            "paths": list(self.paths),
            "siteDirs": list(self.site_dirs),
            "loader": self.loader,
            "trainTasks": self.train_tasks,
            "heldOutTasks": self.held_out_tasks,
            "seed": self.seed,
            "manifests": self.manifests,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EnvironmentSpec:
        try:
            return cls(
                name=str(data["name"]),
                version=str(data["version"]),
                image=data.get("image"),
                digest=data.get("digest"),
                paths=tuple(str(p) for p in data.get("paths") or ()),
                site_dirs=tuple(str(p) for p in data.get("siteDirs") or ()),
                loader=data.get("loader"),
                train_tasks=data.get("trainTasks", DEFAULT_TRAIN_TASKS),
                held_out_tasks=data.get("heldOutTasks", DEFAULT_HELD_OUT_TASKS),
                seed=data.get("seed", 0),
                manifests=data.get("manifests"),
            )
        except KeyError as exc:
            raise ConfigError(f"a job's environment needs {exc.args[0]!r}") from None
