"""The Secret kind (`nodus.dev/v1`): a *reference* to credentials; nodus never keeps secret values in git.

Who uses it: `nodus.specs.parse` validates it (and refuses `data`/`stringData` with a message that says
why); the reconciler resolves the values at apply time from the environment or a file outside the repo and
hands them to the run that names the Secret (HF_TOKEN, ANTHROPIC_API_KEY, MLFLOW_TRACKING_TOKEN, ...).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Self

from pydantic import Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from nodus.specs.base import Resource, SpecModel
from nodus.specs.types import ENV_NAME_RE


class SecretSpec(SpecModel):
    """Which keys the Secret has and where their values come from at apply time."""

    keys: Annotated[list[str], Field(min_length=1)]
    """The key names, e.g. [HF_TOKEN]; each becomes an environment variable of the runs that use it."""
    provider: Literal["Env", "File"] = "Env"
    """Env: read each key from the applying process's environment; File: read a dotenv file."""
    env_prefix: str = ""
    """With Env: read <envPrefix><KEY> instead of KEY (e.g. PROD_)."""
    path: str | None = None
    """With File: the dotenv file (outside the repository) that holds the values."""

    @model_validator(mode="before")
    @classmethod
    def _no_values(cls, data: Any) -> Any:
        if isinstance(data, dict) and ({"data", "stringData", "value", "values"} & set(data)):
            raise PydanticCustomError(
                "secret_value",
                "secret values never go in git: list the key names under spec.keys and let nodus read the "
                "values from the environment or a file at apply time",
                {},
            )
        return data

    @field_validator("keys")
    @classmethod
    def _key_names(cls, value: list[str]) -> list[str]:
        for key in value:
            if not ENV_NAME_RE.match(key):
                raise ValueError(f"{key!r} is not a valid variable name")
        if len(set(value)) != len(value):
            raise ValueError("a key is listed twice")
        return value

    @field_validator("env_prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        if value and not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", value):
            raise ValueError(f"must be a variable-name prefix (got {value!r})")
        return value

    @model_validator(mode="after")
    def _file_needs_path(self) -> Self:
        if (self.provider == "File") != (self.path is not None):
            raise ValueError("provider File needs path, and path is only used with provider File")
        return self


class Secret(Resource):
    """Named credentials, by reference."""

    API_VERSION = "nodus.dev/v1"
    KIND = "Secret"
    SHORT_NAMES = ("secret", "secrets")
    UPDATABLE_IN_PLACE = ("keys", "provider", "envPrefix", "path")

    api_version: Literal["nodus.dev/v1"]
    """Always nodus.dev/v1."""
    kind: Literal["Secret"]
    """Always Secret."""
    spec: SecretSpec
    """The desired state."""
