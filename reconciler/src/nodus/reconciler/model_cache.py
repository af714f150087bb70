"""Where a pinned model revision is on this host: imported into the project, or in the local Hugging Face cache.

Who calls it: the Volume and TrainingJob controllers (`nodus.reconciler.controllers.volume`, which imports models
into `.nodus/models/`), the estimator (`nodus.reconciler.pricing.facts`: a model's files give its parameter count)
and `nodus apply --dry-run` (a model not cached blocks the run). Only reads: it looks for folders and manifests
and never imports, copies or downloads anything, so planning and pricing can ask it without a controller.
"""

from __future__ import annotations

import os
from pathlib import Path

from nodus.reconciler.project import Project
from nodus.reconciler.state.records import JSONObject
from nodus.specs.status_names import Phase, Reason

MANIFEST = ".nodus-manifest.json"
"""The manifest (sha256 per file) a complete import holds; its presence is what "imported" means."""


def hub_cache() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]) / "hub"
    return Path("~/.cache/huggingface/hub").expanduser()


def split_uri(uri: str) -> tuple[str, str]:
    """`hf://org/name@commit` -> (`org/name`, `commit`)."""
    repo, _, revision = uri.removeprefix("hf://").partition("@")
    return repo, revision


def snapshot(uri: str) -> Path | None:
    """The cached snapshot folder of a pinned revision, or None when it is not in the local cache."""
    repo, revision = split_uri(uri)
    folder = hub_cache() / f"models--{repo.replace('/', '--')}" / "snapshots" / revision
    return folder if folder.is_dir() else None


BUILT_HERE: dict[str, str] = {
    "nodus/tiny-qwen3": (
        "it is built on this machine, not downloaded: build it with `python -m nodus.runtimes.tiny_model` "
        "(with `--warmup MODULE` for a warmed-up revision, as `make quickstart` builds the quickstart's; "
        "`--print-revision` prints the revision a recipe builds)"
    ),
}
"""Models no hub has, by repository: how to make them (`nodus.runtimes.tiny_model.REPO` is the tiny model's)."""


def how_to_cache(uri: str) -> str:
    """How a person puts `uri` in the local cache (nodus never does): the build of a model made here, else the
    download command."""
    repo, revision = split_uri(uri)
    return BUILT_HERE.get(repo) or f"fetch it once with `huggingface-cli download {repo} --revision {revision}`"


def not_cached(uri: str) -> JSONObject:
    how = how_to_cache(uri)
    return {
        "phase": Phase.PENDING,
        "reason": Reason.MODEL_NOT_CACHED,
        "message": f"{uri} is not in the local Hugging Face cache ({hub_cache()}): nodus never downloads weights "
        f"at run time; {how}",
    }


def model_folder(project: Project, uri: str) -> Path:
    repo, revision = split_uri(uri)
    return project.files.root / "models" / f"{repo.replace('/', '--')}@{revision}"


def imported(project: Project, uri: str) -> bool:
    return (model_folder(project, uri) / MANIFEST).is_file()
