"""The project a command works on: its folder, nodus.lock, state folder, state store and local executor.

Who calls it: every reconciler command of the CLI (`plan`, `apply`, `get`, `describe`, `unlock`, ...), once,
from its PATH and `--state` options. The project is the folder holding nodus.lock (else the nearest `.git`
above PATH, else the current folder); its state folder is `.nodus/` there (or `NODUS_HOME`), shared with
nodus-build: `images/` (the local image store), `state.db` (the SQLite state store, unless `--state` names
a PostgreSQL URL), `jobs/` (the local executor's job folders). Project settings are `nodus.yaml` beside
`nodus.lock` (`nodus.specs.settings`). Reads create none of it (`open_state(create=
False)`); a state folder nodus creates gets a `.gitignore` of `*` (`Store.ensure_root`).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path

from nodus.builder.store import LOCK_NAME, Store, find_project
from nodus.reconciler.state import STATE_FILE, open_store
from nodus.reconciler.state.records import StateStore
from nodus.reconciler.state.sqlite import EmptyStore
from nodus.specs.settings import ProjectSettings, load_settings


@dataclass
class Project:
    root: Path
    lock_path: Path
    files: Store
    """The state folder as nodus-build knows it (images, manifests, caches)."""
    state_url: str | None

    @classmethod
    def find(cls, path: Path | None = None, *, state: str | None = None, state_dir: Path | None = None) -> Project:
        root = find_project(path or Path.cwd())
        return cls(
            root, root / LOCK_NAME, Store.for_project(root, state_dir), state or os.environ.get("NODUS_STATE") or None
        )

    def settings(self) -> ProjectSettings:
        """The project's `nodus.yaml` (defaults where there is none)."""
        return load_settings(self.root)

    @property
    def jobs(self) -> Path:
        return self.files.root / "jobs"

    def volume_revision(self, volume_project: str, name: str, revision: int) -> Path:
        """The folder of revision `revision` of Volume `volume_project/name`: the one place its layout is written
        (the Volume controller fills it, an export commits to it, the local executor mounts it as the model)."""
        return self.files.root / "volumes" / volume_project / name / f"rev{revision}"

    def has_state(self) -> bool:
        """Whether there is a state store to read: `--state` (or NODUS_STATE) names one, or the state folder holds
        the SQLite file. Anything at that path counts (an empty file, a folder): opening it says what is wrong,
        where taking it for no state would plan every resource anew."""
        path = self.files.root / STATE_FILE
        return self.state_url is not None or path.exists() or path.is_symlink()

    def open_state(self, *, create: bool = True) -> StateStore:
        """The state store (migrated): SQLite in the state folder unless `--state` says otherwise.

        `create=False` is for reads (`get`, `describe`, `wait`, `plan`): where the project has no state yet they
        get an empty store in memory, and nothing is created on disk."""
        if not create and not self.has_state():
            empty = EmptyStore()
            empty.migrate()
            return empty
        self.files.ensure_root()
        store = open_store(self.state_url, project_state_dir=self.files.root)
        store.migrate()
        return store


def holder() -> str:
    """Who takes a lease: `user@host pid N` (shown to whoever finds the state locked)."""
    user = os.environ.get("USER") or os.environ.get("LOGNAME") or str(os.getuid())
    return f"{user}@{socket.gethostname()} pid {os.getpid()}"
