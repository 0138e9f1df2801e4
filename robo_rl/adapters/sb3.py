"""A gymnasium vector env in same-step autoreset mode as a stable-baselines3 `VecEnv`.

SB3 takes single `gymnasium.Env`s (and steps them one by one in its DummyVecEnv) or its own
`VecEnv`; it has no adapter for `gymnasium.vector.VectorEnv`. This one lets SB3 drive one batched
env directly, e.g. our `robo_rl.adapters.to_gymnasium.TaskVectorEnv`:

    from stable_baselines3 import PPO
    from robo_rl.adapters.to_gymnasium import TaskVectorEnv
    from robo_rl.adapters.sb3 import SB3VecEnv
    PPO("MlpPolicy", SB3VecEnv(TaskVectorEnv("arm-reach", 16))).learn(10_000)

What SB3 reads per env in `infos`: "terminal_observation" (the last observation of an episode that
ended, for time-out bootstrapping), "TimeLimit.truncated" (a time-out that is not a termination)
and "episode" {"r", "l", "t"} (its episode statistics, as SB3's Monitor writes them). Requires
stable-baselines3 (the `dev` extra).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from stable_baselines3.common.vec_env.base_vec_env import VecEnv, VecEnvIndices, VecEnvStepReturn


def per_env_infos(info: dict[str, Any], terminated: np.ndarray, truncated: np.ndarray) -> list[dict[str, Any]]:
    """gymnasium's batched info of one step -> SB3's list of one info dict per env."""
    n = len(terminated)
    infos: list[dict[str, Any]] = [{} for _ in range(n)]
    final_mask = info.get("_final_obs", np.zeros(n, dtype=bool))
    episode_mask = info.get("_episode", np.zeros(n, dtype=bool))
    for i in range(n):
        infos[i]["TimeLimit.truncated"] = bool(truncated[i] and not terminated[i])
        if final_mask[i]:
            infos[i]["terminal_observation"] = info["final_obs"][i]
        if episode_mask[i]:
            infos[i]["episode"] = {k: float(v[i]) for k, v in info["episode"].items()}
    return infos


class SB3VecEnv(VecEnv):
    """SB3 VecEnv over a gymnasium VectorEnv whose metadata declares `AutoresetMode.SAME_STEP`.

    Args:
        env: the vector env (its `single_observation_space` / `single_action_space` become SB3's spaces).

    Raises:
        ValueError: the env resets in another autoreset mode (SB3 expects the reset in the same step).
    """

    def __init__(self, env: VectorEnv):
        mode = env.metadata.get("autoreset_mode")
        if mode != AutoresetMode.SAME_STEP:
            raise ValueError(f"autoreset_mode = {mode!r}: SB3VecEnv needs AutoresetMode.SAME_STEP")
        self.env = env
        self.render_mode = env.render_mode
        super().__init__(env.num_envs, env.single_observation_space, env.single_action_space)
        self._actions: np.ndarray | None = None

    def reset(self) -> np.ndarray:
        """Reset all envs; a seed set by `VecEnv.seed` (one per env, consecutive) is used once."""
        seed = self._seeds[0]
        obs, _ = self.env.reset(seed=seed)
        self._reset_seeds()
        self._reset_options()
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = actions

    def step_wait(self) -> VecEnvStepReturn:
        obs, reward, terminated, truncated, info = self.env.step(self._actions)
        dones = terminated | truncated
        return obs, reward.astype(np.float32), dones, per_env_infos(info, terminated, truncated)

    def close(self) -> None:
        self.env.close()

    def get_images(self) -> list[np.ndarray]:
        return list(self.env.render() or ())

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        """The vector env's attribute, once per selected env (the envs share one object)."""
        return [getattr(self.env, attr_name)] * len(self._indices(indices))

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        setattr(self.env, attr_name, value)

    def env_method(self, method_name: str, *method_args: Any, indices: VecEnvIndices = None, **method_kwargs: Any):
        result = getattr(self.env, method_name)(*method_args, **method_kwargs)
        return [result] * len(self._indices(indices))

    def env_is_wrapped(self, wrapper_class: type, indices: VecEnvIndices = None) -> list[bool]:
        return [False] * len(self._indices(indices))

    def _indices(self, indices: VecEnvIndices) -> list[int]:
        if indices is None:
            return list(range(self.num_envs))
        if isinstance(indices, int):
            return [indices]
        return list(indices)
