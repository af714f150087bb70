"""The adapter seam: whatever `load_environment()` returned -> one `Adapter` the grader can drive.

Who uses it: `nodus.env.environment.load_environment`. `ADAPTERS` is tried in order, most specific first: each
module of this package handles one way of writing environments and is one line here (`accepts(obj)`, and the
adapter class it makes). The plain module shape (`tasks` and `reward`) comes last, since anything with those two
names would pass it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nodus.env.adapters import module, openenv, reasoning_gym, verifiers_classic, verifiers_v1, verl
from nodus.env.adapters.base import Adapter, AdapterError, RawTask, StepResult

__all__ = ["ADAPTERS", "Adapter", "AdapterError", "RawTask", "StepResult", "adapt"]

ADAPTERS: tuple[tuple[str, Callable[[Any], bool], Callable[[Any], Adapter]], ...] = (
    ("reasoning-gym", reasoning_gym.accepts, reasoning_gym.ReasoningGymAdapter),
    ("verifiers", verifiers_classic.accepts, verifiers_classic.VerifiersClassicAdapter),
    ("verifiers-v1", verifiers_v1.accepts, verifiers_v1.VerifiersV1Adapter),
    ("openenv", openenv.accepts, openenv.OpenEnvAdapter),
    ("verl", verl.accepts, verl.VerlAdapter),
    ("module", module.accepts, module.ModuleAdapter),
)
"""(name, accepts, make) of every adapter, in the order they are tried."""


def adapt(obj: Any) -> Adapter:
    """The first adapter that accepts `obj`, or an AdapterError saying what an environment must provide."""
    for _name, accepts, make in ADAPTERS:
        if accepts(obj):
            return make(obj)
    raise AdapterError(
        f"the loader returned {type(obj).__name__}, which is not an environment: expected a module or object "
        "with tasks(split) and reward(completion, answer) (or step(turns, answer)), or a reasoning_gym dataset"
    )
