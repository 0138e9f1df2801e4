"""Our task env behind rsl-rl's VecEnv interface: TensorDict groups, dones, time-outs and logs per step."""

import pytest
import torch

from robo_rl.tasks.task_registry import make_env

pytest.importorskip("tensordict", reason="tensordict comes with rsl-rl-lib (the dev extra)")
from robo_rl.adapters.to_rsl_rl import RslRlVecEnv  # noqa: E402


def test_groups_dones_time_outs_and_logs():
    env = make_env("arm-reach", 3, seed=0)
    try:
        venv = RslRlVecEnv(env)
        assert (venv.num_envs, venv.num_actions, venv.device) == (3, env.action_dim, "cpu")
        obs = venv.get_observations()
        assert obs.batch_size == torch.Size([3]) and set(obs.keys()) == {"policy", "critic"}
        assert torch.equal(obs["policy"], env.get_observations()["policy"])
        venv.episode_length_buf = torch.full((3,), env.max_episode_length - 1)  # every world times out next step
        obs, reward, dones, extras = venv.step(torch.zeros(3, env.action_dim))
        assert obs["policy"].shape == (3, env.obs_dims["policy"]) and reward.shape == (3,)
        assert dones.all() and extras["time_outs"].all()  # time-outs, not terminations
        assert len(venv.step_logs) == 1 and venv.step_logs[0] is extras["log"]
    finally:
        env.close()
