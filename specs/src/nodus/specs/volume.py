"""The Volume kind (`nodus.dev/v1`): versioned storage for data sets, imported models and exported results.

Who uses it: `nodus.specs.parse` validates it; the reconciler's Volume controller imports a pinned model
revision (read-only, reused by every later run on that revision) or holds files uploaded with `nodus cp`.
Every committed change makes a new integer revision that TrainingJobs can pin.
"""

from __future__ import annotations

from typing import Literal, Self

from pydantic import model_validator

from nodus.specs.base import Resource, SpecModel
from nodus.specs.types import DnsLabel, HfModelUri, Quantity


class VolumeSource(SpecModel):
    """What the Volume is filled from at creation: a pinned model revision or a local folder."""

    uri: HfModelUri | None = None
    """A model at a pinned revision, hf://org/name@<40-character commit>, imported from the local cache."""
    path: str | None = None
    """A local folder (relative to this file) copied in once, e.g. a model the project built."""
    secret: DnsLabel | None = None
    """A Secret with HF_TOKEN, only for gated repositories."""

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        self.require_exactly_one("uri", "path")
        if self.secret is not None and self.uri is None:
            raise ValueError("secret is only used with uri")
        return self


class VolumeSpec(SpecModel):
    """Storage and where its first revision comes from."""

    access_mode: Literal["ReadWriteOnce", "ReadOnlyMany"] = "ReadWriteOnce"
    """ReadWriteOnce: one writer (exports, uploads); ReadOnlyMany: shared read-only (imported models)."""
    size: Quantity | None = None
    """An upper bound on its contents, e.g. 50Gi; unbounded on the local store when left out."""
    source: VolumeSource | None = None
    """Fill it from a model revision or a folder; empty (for uploads and exports) when left out."""

    @model_validator(mode="after")
    def _imports_are_read_only(self) -> Self:
        if self.source is not None and self.source.uri is not None and self.access_mode != "ReadOnlyMany":
            raise ValueError("a Volume imported from a model revision is read-only: set accessMode: ReadOnlyMany")
        return self


class Volume(Resource):
    """Versioned storage in the project."""

    API_VERSION = "nodus.dev/v1"
    KIND = "Volume"
    SHORT_NAMES = ("vol", "volume", "volumes")
    UPDATABLE_IN_PLACE = ("size",)

    api_version: Literal["nodus.dev/v1"]
    """Always nodus.dev/v1."""
    kind: Literal["Volume"]
    """Always Volume."""
    spec: VolumeSpec
    """The desired state."""
