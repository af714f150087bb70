"""What the packaged reward may import in the grader: the standard library, `nodus.env`, and what `pip=` names.

Who calls it: `nodus.recipes.environment`, after the reward's lines are extracted and before anything is
written. The grader has no network and gets only the packaged module, so an import that works on this machine
can still fail there: a third-party package not passed in `pip=`, a module of your own beside the script, a
relative import. Each is refused here with the line that imports it, instead of as an InfrastructureFailure
on every grading later.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import sys
from collections.abc import Iterable, Mapping, Sequence

from nodus.errors import ConfigError
from nodus.recipes.packaging import Extracted

_REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*(.*)$")


def normalised(name: str) -> str:
    """A distribution name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_names(pip: Iterable[str]) -> set[str]:
    """The distribution names of `pip=` (`sympy==1.13.3` -> `sympy`), or a one-line error for one that is not."""
    if isinstance(pip, str):
        raise ConfigError(f"pip= must be a list of requirements such as ['{pip}'], not a string")
    names = set()
    for item in pip:
        match = _REQUIREMENT.match(item) if isinstance(item, str) else None
        if match is None:
            raise ConfigError(f"pip=: {item!r} is not a requirement such as 'sympy==1.13.3'")
        names.add(normalised(match.group(1)))
    return names


def check_imports(extracted: Extracted, pip: Sequence[str]) -> None:
    """Refuse an import the grader could not satisfy (one line naming the file, the line and the module)."""
    declared = requirement_names(pip)
    distributions: Mapping[str, list[str]] | None = None
    for found in extracted.imports:
        where = f"{extracted.file}:{found.line}"
        if found.level:
            raise ConfigError(
                f"{where}: a relative import; the grader gets only the reward's own file",
                hint="import absolutely, or copy what the reward needs into its file",
            )
        top = found.module.split(".")[0]
        if top in sys.stdlib_module_names or normalised(top) in declared:
            continue
        if top == "nodus":
            if found.module == "nodus.env" or found.module.startswith("nodus.env."):
                continue
            raise ConfigError(
                f"{where}: {extracted.function}() needs {found.module}; the grader has only nodus.env of nodus",
                hint="keep the reward free of nodus.recipes and the CLI (move that import out of what it uses)",
            )
        if distributions is None:
            distributions = importlib.metadata.packages_distributions()
        owners = distributions.get(top) or []
        if any(normalised(owner) in declared for owner in owners):
            continue
        if owners:
            pins = ", ".join(f"'{owner}=={importlib.metadata.version(owner)}'" for owner in sorted(set(owners)))
            raise ConfigError(
                f"{where}: {extracted.function}() needs {found.module}, which the grader does not have",
                hint=f"the grader has no network: pass pip=[{pins}]",
            )
        raise ConfigError(
            f"{where}: {extracted.function}() needs {found.module}, {_what_is(top)}",
            hint="the grader gets only the reward's file and the packages in pip=",
        )


def _what_is(top: str) -> str:
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        return "which is not installed here either"
    return f"a module of your own ({spec.origin or top}) that is not packaged"
