"""The catalog's ready TrainingJob templates: `TrainingJob.from_example("nodus/graph-coloring@1.0.0")`.

Who calls it: users of the SDK (`from nodus.recipes import TrainingJob`), as the seeds' "Run example" does in the
console. The templates are the catalog's `catalog/<name>/examples/*.yaml` (`title`, `measured` and `trainingJob`),
found through `nodus.reconciler.planning.managed_environments`, the same catalog `nodus describe environment/NAME
-n nodus` lists them from. What comes back is a `RecipeJob`: its `spec` is the template's, to change as a dict
(`job.spec["parameters"]["steps"] = 10`), then `job.preview()` shows the plan and `job.run(max_cost=...)` applies
it, the catalog Environment joining the plan and building on the first apply.
"""

from __future__ import annotations

import copy
from typing import Any

from nodus.errors import ConfigError
from nodus.recipes.apply import Options
from nodus.recipes.jobs import RecipeJob, dns_label
from nodus.reconciler.planning.managed_environments import examples_of, find
from nodus.reconciler.state.records import DEFAULT_PROJECT
from nodus.reconciler.views.catalog import read_example


def from_example(
    environment: str, example: str | None = None, *, project: str | None = None, options: Options | None = None
) -> RecipeJob:
    """The TrainingJob of a catalog Environment's example (`example`: its file's stem; the only or first one when
    left out), not applied yet. ConfigError, in one line naming the Environment and the examples it has, when there
    is no such Environment or example."""
    reference = environment if "/" in environment else f"nodus/{environment}"
    try:
        entry = find(reference)
    except LookupError as exc:
        raise ConfigError(str(exc), hint="nodus get environments -n nodus lists the catalog") from None
    paths = examples_of(entry)
    names = [path.stem for path in paths]
    if not paths:
        raise ConfigError(f"{reference}: the catalog Environment has no examples ({entry.folder / 'examples'})")
    if example is not None and example not in names:
        raise ConfigError(f"{reference}: no example {example!r} (it has: {', '.join(names)})")
    path = paths[names.index(example)] if example is not None else paths[0]
    try:
        template = read_example(path)["trainingJob"]
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    spec: dict[str, Any] = copy.deepcopy(template.get("spec") or {})
    if not isinstance(spec.get("environment"), dict):
        raise ConfigError(f"{path}: trainingJob.spec.environment: the template names no Environment")
    hint = str((template.get("metadata") or {}).get("name") or entry.desired.key.name)
    namespace = dns_label(project or DEFAULT_PROJECT, "project")
    return RecipeJob(spec, namespace, hint, options or Options())


class TrainingJob:
    """`TrainingJob.from_example(...)`: the seeds' `nodus.TrainingJob.from_example`, in the SDK's namespace."""

    from_example = staticmethod(from_example)
