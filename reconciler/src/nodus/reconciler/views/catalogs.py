"""What nodus ships as project `nodus`, listed and described in every project: the catalog Environments
(`views.catalog`) and the managed runtimes (`views.runtime_catalog`), one `Catalog` each.

Who calls it: `nodus.cli.resources` (`get KIND -n nodus`, `describe KIND/NAME -n nodus`) through `catalog_for`.
A catalog is the list of what a job can name, so it is shown whole, whether or not a job of this project named
an entry yet; an entry the store holds shows the store's record. Adding a catalog is a class and one line in
CATALOGS; nothing else branches on its kind.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from nodus.builder.lockfile import Lock
from nodus.errors import ConfigError
from nodus.reconciler.planning import managed, managed_environments
from nodus.reconciler.planning.managed_files import MANAGED_PROJECT
from nodus.reconciler.project import Project
from nodus.reconciler.state.records import ResourceKey, ResourceRecord
from nodus.reconciler.views import catalog as environment_view
from nodus.reconciler.views import runtime_catalog as runtime_view
from nodus.reconciler.views.columns import Column


class Catalog(Protocol):
    kind: str
    columns: list[Column]

    def rows(self, project: Project, stored: list[ResourceRecord]) -> tuple[list[ResourceRecord], list[str]]:
        """Every entry (the store's record when it has one) and the catalog files that could not be read."""
        ...

    def describe(self, project: Project, name: str, record: ResourceRecord | None) -> list[str]:
        """The entry's own lines of `describe`; ConfigError naming what the catalog has when it has no `name`."""
        ...


def _not_in_catalog(kind: str, name: str, keys: Mapping[ResourceKey, object]) -> ConfigError:
    known = ", ".join(sorted(key.name for key in keys)) or "none"
    return ConfigError(
        f"{kind}/{name} is not in the catalog of project {MANAGED_PROJECT} (the catalog has: {known})",
        hint=f"nodus get {kind.lower()}s -n {MANAGED_PROJECT} lists them",
    )


class EnvironmentCatalog:
    kind = "Environment"
    columns = environment_view.COLUMNS

    def rows(self, project: Project, stored: list[ResourceRecord]) -> tuple[list[ResourceRecord], list[str]]:
        catalog, problems = managed_environments.read_catalog()
        lock = Lock.load(project.lock_path)
        return environment_view.catalog_records(catalog, stored, lock=lock, images=project.files.images), problems

    def describe(self, project: Project, name: str, record: ResourceRecord | None) -> list[str]:
        catalog, _ = managed_environments.read_catalog()
        key = ResourceKey(self.kind, MANAGED_PROJECT, name)
        entry = catalog.get(key)
        if entry is None:
            raise _not_in_catalog(self.kind, name, catalog)
        lock = Lock.load(project.lock_path)
        shown = record or environment_view.catalog_records({key: entry}, [], lock=lock, images=project.files.images)[0]
        return environment_view.describe_lines(entry, shown, project.files)


class RuntimeCatalog:
    kind = "TrainingRuntime"
    columns = runtime_view.COLUMNS

    def rows(self, project: Project, stored: list[ResourceRecord]) -> tuple[list[ResourceRecord], list[str]]:
        catalog, problems = managed.read_catalog()
        return runtime_view.catalog_records(catalog, stored), problems

    def describe(self, project: Project, name: str, record: ResourceRecord | None) -> list[str]:
        catalog, _ = managed.read_catalog()
        entry = catalog.get(ResourceKey(self.kind, MANAGED_PROJECT, name))
        if entry is None:
            raise _not_in_catalog(self.kind, name, catalog)
        shown = record or runtime_view.catalog_records({entry.key: entry}, [])[0]
        return runtime_view.describe_lines(entry, shown)


CATALOGS: dict[str, Catalog] = {catalog.kind: catalog for catalog in (EnvironmentCatalog(), RuntimeCatalog())}


def catalog_for(kind: str, project: str | None) -> Catalog | None:
    """The catalog `get`/`describe` of `kind` in `project` shows, or None: only project `nodus` has catalogs."""
    return CATALOGS.get(kind) if project == MANAGED_PROJECT else None


def current_record(project: Project, catalog: Catalog, name: str, stored: ResourceRecord | None) -> ResourceRecord:
    """The record `describe` shows of entry `name`: the store's, else what applying it would find."""
    if stored is not None:
        return stored
    rows, _ = catalog.rows(project, [])
    return next(row for row in rows if row.key.name == name)
