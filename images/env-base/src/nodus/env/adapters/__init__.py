"""The adapter seam: whatever `load_environment()` returned -> one `Adapter` the grader can drive.

Who uses it: `nodus.env.environment.load_environment`. Adapters are tried in order; each module in this
package handles one way of writing environments (add verifiers, OpenEnv or verl/SkyRL as one module each).
"""

from __future__ import annotations

from typing import Any

from nodus.env.adapters import module, reasoning_gym
from nodus.env.adapters.base import Adapter, AdapterError, RawTask, StepResult

__all__ = ["Adapter", "AdapterError", "RawTask", "StepResult", "adapt"]


def adapt(obj: Any) -> Adapter:
    """The first adapter that accepts `obj`, or an AdapterError saying what an environment must provide."""
    if reasoning_gym.accepts(obj):
        return reasoning_gym.ReasoningGymAdapter(obj)
    if module.accepts(obj):
        return module.ModuleAdapter(obj)
    raise AdapterError(
        f"the loader returned {type(obj).__name__}, which is not an environment: expected a module or object "
        "with tasks(split) and reward(completion, answer) (or step(turns, answer)), or a reasoning_gym dataset"
    )
