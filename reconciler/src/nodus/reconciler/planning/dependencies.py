"""What waits for what among the resources of one plan: an `exportTo` feeding a `model.volume`, `data.volume` or
`teacher.volume`, a job's Environment, an endpoint's `trainingJob`.

Who calls it: the planner (`planning.diff.plan`), which records each action's `waits_for`, orders a wave so that a
producer comes before its consumers, and `nodus plan` shows `# waits for tj/NAME` on the consumer's line. Pure: the
plan's documents in, keys out. The fields come from one table (`nodus.reconciler.references.REFERENCE_FIELDS`), so
a kind that names another resource is a row there, not a branch here.
"""

from __future__ import annotations

from collections.abc import Mapping

from nodus.reconciler.references import produced, references
from nodus.reconciler.state.records import JSONObject, ResourceKey


def waits_for(
    changing: Mapping[ResourceKey, JSONObject], revisions: Mapping[ResourceKey, int] | None = None
) -> dict[ResourceKey, tuple[ResourceKey, ...]]:
    """For each resource the plan creates or changes (`changing`: its documents by key), the other resources of the
    same plan it waits for, sorted; resources that wait for none are left out. `revisions`: the latest revision of
    each Ready Volume in the store; a pinned revision it has already waits for nothing (as the controller decides)."""
    there = revisions or {}
    producers: dict[ResourceKey, list[ResourceKey]] = {}
    for key, document in changing.items():
        for target in produced(document):
            producers.setdefault(target, []).append(key)
    found: dict[ResourceKey, tuple[ResourceKey, ...]] = {}
    for key, document in changing.items():
        wanted: set[ResourceKey] = set()
        for reference in references(document):
            if reference.field.waits_on == "self" and reference.key in changing:
                wanted.add(reference.key)
            elif reference.field.waits_on == "producers":
                pinned, latest = reference.revision, there.get(reference.key)
                if pinned is None or latest is None or pinned > latest:
                    wanted.update(producers.get(reference.key, ()))
        wanted.discard(key)  # a job that reads and writes one Volume reads what was there before it
        if wanted:
            found[key] = tuple(sorted(wanted))
    return found


def depth(key: ResourceKey, waits: Mapping[ResourceKey, tuple[ResourceKey, ...]]) -> int:
    """How many producers stand before `key` in its longest chain (0: it waits for none); a cycle counts once."""
    seen: set[ResourceKey] = set()

    def walk(current: ResourceKey) -> int:
        if current in seen:
            return 0
        seen.add(current)
        deepest = max((walk(before) + 1 for before in waits.get(current, ())), default=0)
        seen.discard(current)
        return deepest

    return walk(key)


def cycle(waits: Mapping[ResourceKey, tuple[ResourceKey, ...]]) -> list[ResourceKey] | None:
    """A chain of resources that wait for each other (`[a, b, a]`: a waits for b, which waits for a), or None. Such
    jobs would wait for ever, each for the other's export: the plan refuses them."""
    done: set[ResourceKey] = set()

    def walk(key: ResourceKey, path: list[ResourceKey]) -> list[ResourceKey] | None:
        if key in path:
            return [*path[path.index(key) :], key]
        if key in done:
            return None
        for before in waits.get(key, ()):
            found = walk(before, [*path, key])
            if found is not None:
                return found
        done.add(key)
        return None

    for key in sorted(waits):
        found = walk(key, [])
        if found is not None:
            return found
    return None
