"""The Environment kind (`nodus.dev/v1`): a versioned set of tasks with a grader, and where its package is.

Who uses it: `nodus.specs.parse` validates Environment documents with it; `nodus-build` turns `spec.package`
into a digest-pinned grader image; the reconciler's Environment controller marks it Ready once that digest
is in `nodus.lock`. A version's image never changes: any change but the descriptive fields needs a new
`version` (see `UPDATABLE_IN_PLACE`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta
from typing import Annotated, Literal, Self

from pydantic import Field, field_validator, model_validator

from nodus.specs.base import Loc, Resource, SpecModel
from nodus.specs.types import (
    Duration,
    DurationRange,
    ImageRef,
    PipName,
    PipVersion,
    SemVer,
    Url,
    image_is_pinned,
)

LOADER_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*(:[A-Za-z_][A-Za-z0-9_]*)?$")

Category = Literal["Math", "Code", "Reasoning", "Games", "Tools", "Agentic", "Custom"]
Mode = Literal["Train", "Evaluate"]
ALL_MODES: tuple[Mode, ...] = ("Train", "Evaluate")


class PipPackage(SpecModel):
    """A pip package that holds the environment, at one exact version (a Hub is just an index)."""

    name: PipName
    """The distribution name, e.g. reverse-words."""
    version: PipVersion
    """The exact version to install; ranges are refused so a build is reproducible."""
    index: Url | None = None
    """A package index to take it from (a private index or the Environments Hub); PyPI when left out."""


class Package(SpecModel):
    """Where the environment's code comes from: exactly one of pip, image or path."""

    pip: PipPackage | None = None
    """A pip package whose loader returns the environment."""
    image: ImageRef | None = None
    """A prebuilt grader image, named by digest; it is verified, not rebuilt."""
    path: str | None = None
    """A local package folder, relative to this file (catalog and development packages)."""
    loader: str = "load_environment"
    """`module`, `function` or `module:function` returning the environment (default load_environment)."""

    @field_validator("loader")
    @classmethod
    def _loader_form(cls, value: str) -> str:
        if not LOADER_RE.match(value):
            raise ValueError(f"must be module, function or module:function (got {value!r})")
        return value

    @field_validator("path")
    @classmethod
    def _path_form(cls, value: str | None) -> str | None:
        if value is not None and (not value.strip() or "\0" in value):
            raise ValueError("must be a folder path")
        return value

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        self.require_exactly_one("pip", "image", "path")
        return self


class Grading(SpecModel):
    """How completions are graded."""

    grader: Literal["Program", "ExactMatch"] = "Program"
    """Program: the package's grader in a sandbox; ExactMatch: compare with the answer, no sandbox."""
    max_parallel: Annotated[int, Field(ge=1, le=256)] = 4
    """At most this many grading sandboxes at once for one job."""
    timeout: Annotated[Duration, DurationRange("1s", "30m")] = timedelta(seconds=30)
    """Per-task grading time limit; a grader past it gives InfrastructureFailure, never a reward of 0."""


class EnvironmentSpec(SpecModel):
    """The desired Environment: its version, package, and how it is graded."""

    version: SemVer
    """Semantic version; published versions are immutable (change the package, publish a new version)."""
    package: Package
    """Where the environment's tasks and grader come from."""
    category: Category = "Custom"
    """Catalog category shown by `nodus get environments`."""
    modes: Annotated[list[Mode], Field(min_length=1, max_length=2)] = Field(default_factory=lambda: list(ALL_MODES))
    """What the environment may be used for: Train, Evaluate or both."""
    reward_type: Literal["Binary", "Continuous"] = "Binary"
    """Binary rewards are 0 or 1; Continuous rewards give partial credit (only 1 is Correct)."""
    grading: Grading = Field(default_factory=Grading)
    """Grading settings."""
    description: str | None = None
    """A one-paragraph summary for `nodus describe`."""
    license: str | None = None
    """The licence of the tasks and data (SPDX id or a short text)."""

    @field_validator("modes")
    @classmethod
    def _unique_modes(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("each mode may appear once")
        return value


class Environment(Resource):
    """A versioned set of tasks with a grader."""

    API_VERSION = "nodus.dev/v1"
    KIND = "Environment"
    SHORT_NAMES = ("env", "envs", "environments", "environment")
    UPDATABLE_IN_PLACE = ("description", "license", "category", "grading.maxParallel", "grading.timeout")

    api_version: Literal["nodus.dev/v1"]
    """Always nodus.dev/v1."""
    kind: Literal["Environment"]
    """Always Environment."""
    spec: EnvironmentSpec
    """The desired state."""

    def lint(self) -> Iterator[tuple[Loc, str]]:
        image = self.spec.package.image
        if image is not None and not image_is_pinned(image):
            yield (
                ("spec", "package", "image"),
                "not pinned by a sha256 digest: nodus-build verifies images by digest and will refuse it",
            )
