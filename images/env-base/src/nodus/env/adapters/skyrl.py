"""Scoring a verl-style row with the SkyRL-gym environment its `env_class` names (skyrl-gym 0.4 API).

Who uses it: `adapters.verl.VerlAdapter`, for a dataset module without `compute_score`. Each row's
environment is built as SkyRL's trainer builds it: `skyrl_gym.make(env_class, env_config=..., extras=...)`,
where `extras` is the row without `prompt` and `env_class` (so `reward_spec`, `extra_info`, `data_source`)
and `env_config` the module's `env_config[env_class]` (an OmegaConf config, as SkyRL passes it; empty when
the module has none). Grading makes a fresh environment per completion, `init(prompt)`, one `step(reply)`:
its reward is the reward. nodus runs single-turn SkyRL environments only: loading refuses an environment
whose `max_turns` is above one, and grading fails a step that does not end the episode.
"""

from __future__ import annotations

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
        return output.get("reward")


def _close(env: Any) -> None:
    close = getattr(env, "close", None)
    if callable(close):
        close()
