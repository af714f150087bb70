"""A Secret's values, read where the Secret says they are: the applying process's environment, or a dotenv file.

Who calls it: the Ray executor's settings (`executor.ray.tokenSecret`, `executors/ray/settings.py`); the runs that
name Secrets come next. A Secret is a resource like any other, applied from the project's files into its state
store; only its key names and where their values live are stored, never a value. `value` reads one at the moment
it is needed and hands it to the caller, which passes it on to a process or a client: nothing here writes it.

Failures name the Secret, the key and where the value was looked for (the variable, the file and line), never the
value, and nothing falls back to another source.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Final

from nodus.errors import ConfigError
from nodus.specs.secret import SecretSpec

from .project import Project
from .references import split_ref
from .state import open_store
from .state.records import DEFAULT_PROJECT, ResourceKey

_LINE: Final = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*?)\s*$")


def stored_secret(project: Project, ref: str, where: str) -> SecretSpec:
    """The Secret `ref` (`NAME` in project default, or `PROJECT/NAME`) as it was last applied to the project's
    state store (read only); a ConfigError when there is none."""
    owner, name = split_ref(ref, DEFAULT_PROJECT)
    key = ResourceKey("Secret", owner, name)
    record = None
    if project.has_state():
        store = open_store(project.state_url, project_state_dir=project.files.root, migrate=False)
        try:
            record = store.get(key)
        finally:
            store.close()
    if record is None:
        raise ConfigError(
            f"{where}: Secret {name} does not exist in project {owner} (nothing applied it)",
            hint="add a Secret of that name (kind: Secret, spec.keys) to the project's files and nodus apply it",
        )
    return SecretSpec.model_validate(record.spec["spec"])


def value(spec: SecretSpec, name: str, key: str, *, base: Path, where: str) -> str:
    """The value of `key` of Secret `name`, from where `spec` says (a relative dotenv path is from `base`)."""
    if key not in spec.keys:
        raise ConfigError(f"{where}: Secret {name} has no key {key} (its keys: {', '.join(spec.keys)})")
    if spec.provider == "Env":
        variable = spec.env_prefix + key
        found = os.environ.get(variable)
        if not found:
            raise ConfigError(
                f"{where}: Secret {name} key {key}: the environment variable {variable} is not set",
                hint=f"export {variable} in the shell that runs nodus",
            )
        return found
    assert spec.path is not None  # provider File has a path (the spec says so)
    path = Path(spec.path).expanduser()
    path = path if path.is_absolute() else base / path
    values = read_dotenv(path, f"{where}: Secret {name}")
    if not values.get(key):
        raise ConfigError(f"{where}: Secret {name} key {key}: {path} has no {key}=... line")
    return values[key]


def read_dotenv(path: Path, where: str) -> dict[str, str]:
    """`KEY=VALUE` lines (`export` and one pair of quotes allowed, `#` comments and blank lines skipped)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read {path}: {exc.strerror or exc}") from None
    values: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        found = _LINE.match(line)
        if found is None:
            raise ConfigError(f"{where}: {path}:{number}: not a KEY=VALUE line")
        key, raw = found.groups()
        if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "'\"":
            raw = raw[1:-1]
        values[key] = raw
    return values
