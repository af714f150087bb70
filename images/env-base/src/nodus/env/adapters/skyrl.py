"""Scoring a verl-style row with the SkyRL-gym environment its `env_class` names (skyrl-gym 0.4 API).

Who uses it: `adapters.verl.VerlAdapter`, for a dataset module without `compute_score`. Each row's
environment is built as SkyRL's trainer builds it: `skyrl_gym.make(env_class, env_config=..., extras=...)`,
where `extras` is the row without `prompt` and `env_class` (so `reward_spec`, `extra_info`, `data_source`)
and `env_config` the module's `env_config[env_class]` (an OmegaConf config, as SkyRL passes it; empty when
the module has none). Grading makes a fresh environment per completion, `init(prompt)`, one `step(reply)`:
its reward is the reward. nodus runs single-turn SkyRL environments only: loading refuses an environment
whose `max_turns` is above one, and grading fails a step that does not end the episode.

InvalidOutput: a SkyRL environment's reward says only how good a reply was (gsm8k's is 0 both for a wrong number
and for no `#### n` at all). Where the environment's own package has a parser, `utils.extract_solution` as
skyrl-gym's gsm8k has (verl's scoring code, which SkyRL's environments reuse), a reply it finds no answer in is
InvalidOutput, as a verifiers parser's None is; the reward still comes from the environment's step.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from nodus.env.adapters.base import AdapterError


def _skyrl_gym() -> Any:
    try:
        import skyrl_gym  # type: ignore[import-not-found]
    except ImportError:
        raise AdapterError(
            "SkyRL dataset: rows name an env_class but skyrl_gym is not installed; add skyrl-gym to the package's "
            "dependencies (or define compute_score in the module)"
        ) from None
    return skyrl_gym


def extras(row: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in row.items() if key not in ("prompt", "env_class")}


class SkyRLScorer:
    """Builds and steps SkyRL-gym environments for rows; `check` refuses multi-turn ones at load."""

    def __init__(self, env_config: Any) -> None:
        if env_config is not None and not isinstance(env_config, dict):
            raise AdapterError("SkyRL dataset: env_config must be a dict of env_class -> that environment's config")
        self.env_config: dict[str, Any] = dict(env_config or {})

    def _config(self, env_class: str) -> Any:
        config = self.env_config.get(env_class) or {}
        try:
            from omegaconf import OmegaConf  # type: ignore[import-not-found]  # skyrl-gym's own dependency; its environments read attributes
        except ImportError:
            return config
        return OmegaConf.create(config)

    def make(self, row: dict[str, Any]) -> Any:
        env_class = row["env_class"]
        gym = _skyrl_gym()
        if env_class not in gym.registry:
            known = ", ".join(sorted(gym.registry)) or "none"
            raise AdapterError(
                f"SkyRL dataset: env_class {env_class!r} is not a registered SkyRL-gym environment "
                f"(registered: {known})"
            )
        return gym.make(env_class, env_config=self._config(env_class), extras=extras(row))

    def check(self, rows: list[dict[str, Any]]) -> None:
        """Build the environment of the first row of each env_class: it must exist and play one turn."""
        firsts: dict[str, dict[str, Any]] = {}
        for row in rows:
            firsts.setdefault(row["env_class"], row)
        for env_class, row in firsts.items():
            try:
                env = self.make(row)
            except AdapterError:
                raise
            except Exception as exc:
                raise AdapterError(
                    f"SkyRL dataset: skyrl_gym.make({env_class!r}) failed: {type(exc).__name__}: {exc}"
                ) from exc
            turns = getattr(env, "max_turns", 1)
            _close(env)
            if isinstance(turns, int) and turns > 1:
                raise AdapterError(
                    f"SkyRL environment {env_class!r} is multi-turn (max_turns={turns}): nodus runs SkyRL "
                    "environments of one turn only"
                )

    def score(self, row: dict[str, Any], completion: str) -> Any:
        env = self.make(row)
        try:
            env.init(row.get("prompt"))
            output = env.step(completion)
        finally:
            _close(env)
        if not output.get("done", True):
            raise RuntimeError(
                f"SkyRL environment {row['env_class']!r} did not end after one turn: nodus runs single-turn "
                "SkyRL environments only"
            )
        parse = own_parser(env)
        if parse is not None and parse(completion) is None:
            return None  # the environment's own parser found no answer: InvalidOutput (contract.classify)
        return output.get("reward")


def own_parser(env: Any) -> Callable[[str], Any] | None:
    """`extract_solution` of the `utils` module beside the environment's class (`skyrl_gym.envs.gsm8k.utils` for
    `skyrl_gym.envs.gsm8k.env.GSM8kEnv`), when it has one taking the reply alone; else None."""
    module = type(env).__module__
    package = module.rpartition(".")[0]
    if not package:
        return None
    try:
        utils = importlib.import_module(f"{package}.utils")
    except ImportError:
        return None
    extract = getattr(utils, "extract_solution", None)
    if not callable(extract):
        return None
    return lambda reply: extract(solution_str=reply)


def _close(env: Any) -> None:
    close = getattr(env, "close", None)
    if callable(close):
        close()
