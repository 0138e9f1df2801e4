"""Scripted experts: their demonstrations are consistent transitions, and they solve their tasks (slow)."""

import pytest
import torch

from robo_rl.tasks.experts import EXPERTS, ReachExpert, rollout_expert
from robo_rl.tasks.task_registry import make_env


def test_demonstrations_are_transitions_of_the_env():
    env = make_env("arm-reach", 4, seed=0)
    demo = rollout_expert(env, ReachExpert(env), 6, seed=1)
    n, steps = 4, env.max_episode_length
    assert demo.episode_success.shape == (6,)
    assert demo.obs.shape == demo.next_obs.shape == (2 * steps * n, env.obs_dims["policy"])  # two rounds of 4
    assert demo.action.shape == (2 * steps * n, env.action_dim) and demo.reward.shape == (2 * steps * n,)
    assert demo.action.abs().max() <= env.cfg.action_clip
    done = (demo.terminated | demo.truncated).reshape(-1, n)  # (T, N)
    assert done.sum() == 8 and done[steps - 1].all() and done[-1].all()  # full episodes, no random start
    obs, next_obs = demo.obs.reshape(-1, n, demo.obs.shape[-1]), demo.next_obs.reshape(-1, n, demo.obs.shape[-1])
    torch.testing.assert_close(next_obs[:-1][~done[:-1]], obs[1:][~done[:-1]])  # row t + 1 follows row t
    assert not torch.equal(next_obs[steps - 1], obs[steps])  # at an episode's end: its last observation, not a reset
    env.close()


@pytest.mark.slow
@pytest.mark.parametrize("task", list(EXPERTS))
def test_expert_succeeds_in_95_percent_of_100_episodes(task):
    env = make_env(task, 100, seed=0)
    demo = rollout_expert(env, EXPERTS[task](env), 100, seed=123, record=False)
    env.close()
    print(f"{task}: scripted expert success {demo.success_rate:.2f} over {demo.episode_success.numel()} episodes")
    assert demo.episode_success.numel() == 100
    assert demo.success_rate >= 0.95
