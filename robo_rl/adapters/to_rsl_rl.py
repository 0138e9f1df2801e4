"""Our task envs behind rsl-rl-lib's `rsl_rl.env.VecEnv` interface (duck-typed; rsl-rl-lib 5.5.1), so rsl-rl's own
`OnPolicyRunner` can train on exactly the env our runner trains on (`scripts/bench_ppo.py --learning`).

Observations become a TensorDict with our "policy" and "critic" groups; `dones` is terminated | truncated
and `extras["time_outs"]` the truncations. Every step's `info["log"]` is kept (`step_logs`) so a caller can
average task metrics per iteration exactly as our runner does. Requires tensordict (rsl-rl-lib's dependency;
the `dev` extra).

    from rsl_rl.runners import OnPolicyRunner
    from robo_rl.adapters.to_rsl_rl import RslRlVecEnv
    OnPolicyRunner(RslRlVecEnv(make_env("arm-reach", 64)), train_cfg, log_dir=None).learn(100)
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict


class RslRlVecEnv:
    """A batched VecEnv of ours (DESIGN.md §1) as rsl-rl's VecEnv.

    Args:
        env: our VecEnv (a TaskEnv): `num_envs`, `action_dim`, `max_episode_length`, `episode_length` (N,),
            `get_observations()` and `step(actions)`.
    """

    def __init__(self, env: Any):
        self.env = env
        self.num_envs = env.num_envs
        self.num_actions = env.action_dim
        self.max_episode_length = env.max_episode_length
        self.device = str(env.device)
        self.cfg: dict = {}
        self.step_logs: list[dict[str, float]] = []
        """Every step's `info["log"]`, in order."""
        self._obs = env.get_observations()

    @property
    def episode_length_buf(self) -> torch.Tensor:
        """(N,) steps into each world's episode (rsl-rl randomises it with `init_at_random_ep_len`)."""
        return self.env.episode_length

    @episode_length_buf.setter
    def episode_length_buf(self, value: torch.Tensor) -> None:
        self.env.episode_length.copy_(value)

    def _wrap(self, obs: dict[str, torch.Tensor]) -> TensorDict:
        return TensorDict(dict(obs), batch_size=[self.num_envs])

    def get_observations(self) -> TensorDict:
        """The observation groups of the last step, as a TensorDict (N, ...)."""
        return self._wrap(self._obs)

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict[str, Any]]:
        """(obs, reward (N,), dones (N,) bool, extras {"time_outs": (N,) bool, "log": this step's log})."""
        obs, reward, terminated, truncated, info = self.env.step(actions)
        self._obs = obs
        self.step_logs.append(info["log"])
        return self._wrap(obs), reward, terminated | truncated, {"time_outs": truncated, "log": info["log"]}
