import dataclasses
import math

import pytest
import torch

from robo_rl.tasks.task_registry import TASKS, make_env, task_config_class
from robo_rl.terms import validate_contract


@pytest.mark.parametrize("name", list(TASKS))
def test_task_steps_with_finite_obs_of_contract_shapes(name):
    """Every task: reset and 200 steps on 4 worlds, shapes as the contract says, finite, every reward term logged."""
    cfg = dataclasses.replace(task_config_class(name)(), episode_length_s=1.0)  # episodes end within the test
    env = make_env(name, 4, cfg=cfg, seed=3)
    contract = env.contract
    validate_contract(contract)
    obs = env.reset()
    assert obs["policy"].shape == (4, contract.obs_dim)
    assert env.action_dim == contract.action_dim == env.action_dim_of(env.cfg) == sum(t.dim for t in env.action_terms)
    assert len(contract.joint_names) == len(env.joint_names)
    gen = torch.Generator().manual_seed(0)
    logged = set()
    for _ in range(200):
        actions = torch.randn(4, env.action_dim, generator=gen)
        obs, reward, terminated, truncated, info = env.step(actions)
        assert obs["policy"].shape == (4, contract.obs_dim)
        assert obs["critic"].shape == (4, env.obs_dims["critic"])
        assert info["final_obs"]["policy"].shape == (4, contract.obs_dim)
        assert reward.shape == terminated.shape == truncated.shape == (4,)
        for key, group in obs.items():
            assert group.shape[0] == 4
            if group.is_floating_point():
                assert torch.isfinite(group).all(), key
        assert torch.isfinite(reward).all()
        logged |= {k for k, v in info["log"].items() if math.isfinite(v)}
    assert {f"Episode_Reward/{t}" for t in env.reward_terms} <= logged
    env.close()


@pytest.mark.parametrize("name", list(TASKS))
def test_same_seed_same_trajectory(name):
    def rollout(seed):
        env = make_env(name, 4, seed=seed)
        obs = env.reset()
        gen = torch.Generator().manual_seed(1)
        out = [obs["policy"]]
        for _ in range(30):
            obs, reward, *_ = env.step(torch.randn(4, env.action_dim, generator=gen))
            out += [obs["policy"], reward[:, None]]
        env.close()
        return torch.cat(out, dim=-1)

    a, b, c = rollout(7), rollout(7), rollout(8)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


def test_final_obs_is_observation_before_reset():
    env = make_env("arm-reach", 2, seed=0)
    env.reset(random_start=False)
    zero = torch.zeros(2, env.action_dim)
    for _ in range(env.max_episode_length - 1):
        obs, _, _, truncated, _ = env.step(zero)
        assert not truncated.any()
    obs, _, terminated, truncated, info = env.step(zero)
    assert truncated.all() and not terminated.any()
    assert not torch.equal(info["final_obs"]["policy"], obs["policy"])  # new targets after the reset
    assert "Metrics/ee_distance_final" in info["log"]
    assert info["episode"]["ids"].tolist() == [0, 1]


def test_contract_describes_the_policy():
    env = make_env("quadruped-walk-flat", 2)
    c = env.contract
    assert c.joint_names[:3] == ("FL_hip_joint", "FL_thigh_joint", "FL_calf_joint")
    assert [t.name for t in c.observation] == [
        "base_ang_vel", "projected_gravity", "velocity_command", "joint_pos_rel", "joint_vel", "last_action"
    ]
    assert c.policy_dt == pytest.approx(0.02)
    assert len(c.kp) == len(c.kd) == len(c.torque_limits) == len(c.default_joint_pos) == 12
    assert all(k > 0 for k in c.kp)
    from robo_rl.core.contract import DeployContract

    assert DeployContract.from_json(c.to_json()) == c


def test_quadruped_stands_with_zero_actions():
    env = make_env("quadruped-walk-flat", 4, seed=0)
    env.reset(random_start=False)
    for _ in range(100):  # 2 s
        _, _, terminated, _, _ = env.step(torch.zeros(4, env.action_dim))
        assert not terminated.any()
    assert (env.base_pos[:, 2] > 0.2).all()


def test_tracking_rewards_judge_the_command_acted_on():
    """On a step where commands are resampled, the tracking terms use the command the policy acted on."""
    env = make_env("quadruped-walk-flat", 8, seed=0)
    env.reset(random_start=False)
    env.step(torch.zeros(8, env.action_dim))
    old = env.command.clone()  # (N, 3)
    env.command_time.fill_(0.5 * env.dt)  # every world resamples during the next step
    env.step(torch.zeros(8, env.action_dim))
    assert not torch.allclose(env.command, old)
    sigma2 = env.cfg.tracking_sigma**2
    terms = env._reward_terms()
    lin_err = (old[:, :2] - env.lin_vel_b[:, :2]).square().sum(-1)
    torch.testing.assert_close(terms["track_lin_vel_xy"], torch.exp(-lin_err / sigma2))
    torch.testing.assert_close(terms["track_ang_vel_z"], torch.exp(-(old[:, 2] - env.ang_vel_b[:, 2]) ** 2 / sigma2))


def test_random_starts_lie_on_the_grid_and_stay_spread():
    """Training time-outs (arm-reach never fails) come in blocks, one per grid interval, all phases used."""
    env = make_env("arm-reach", 64, seed=0)
    env.reset()
    stride, length = env.start_stride, env.max_episode_length
    assert stride == round(env.start_grid_s / env.dt) > 1
    assert torch.all(env.episode_length % stride == 0)
    assert len(set(env.episode_length.tolist())) > length // stride // 2  # decorrelated, not all in phase
    reset_steps = []
    for t in range(length):
        *_, truncated, info = env.step(torch.zeros(64, env.action_dim))
        if truncated.any():
            reset_steps.append(t)
    assert reset_steps and all((t - reset_steps[0]) % stride == 0 for t in reset_steps)
    env.close()


def test_step_runs_torch_single_threaded_and_restores_threads():
    env = make_env("arm-reach", 4)
    before = torch.get_num_threads()
    seen = []
    original = env._refresh

    def spy():
        seen.append(torch.get_num_threads())
        original()

    env._refresh = spy
    env.step(torch.zeros(4, env.action_dim))
    assert seen and all(n == 1 for n in seen)
    assert torch.get_num_threads() == before
    env.close()
