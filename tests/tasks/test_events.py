"""Domain randomisation, action latency, pushes, observation noise and history (robo_rl.tasks.events, base)."""

import dataclasses

import numpy as np
import pytest
import torch

from robo_rl.core.config import ConfigError
from robo_rl.deploy.hardware import load_hardware
from robo_rl.deploy.observations import ObservationBuilder
from robo_rl.tasks.events import DomainRandConfig, delayed_actions
from robo_rl.tasks.task_registry import make_env, task_config_class
from tests.conftest import REPO
from tests.deploy.test_deploy_parity import robot_state_of

PHYSICS = DomainRandConfig(friction_scale=(0.5, 1.5), mass_scale=(0.8, 1.2), com_offset=0.02, kp_scale=(0.8, 1.2),
                           kd_scale=(0.5, 1.5), motor_strength=(0.8, 1.0), damping_add=(0.0, 0.5),
                           armature_add=(0.0, 0.01))


def env_with(task, n, seed=0, **fields):
    cfg = dataclasses.replace(task_config_class(task)(), **fields)
    return make_env(task, n, cfg=cfg, seed=seed)


def rollout(env, steps=30, seed=1):
    env.reset(random_start=False)
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        obs, reward, *_ = env.step(0.5 * torch.randn(env.num_envs, env.action_dim, generator=gen))
        out.append(obs["critic"].clone())
    return torch.stack(out)  # (T, N, O_c)


def test_randomized_parameters_are_reproducible_differ_per_world_and_stay_in_range():
    a, b, c = (env_with("quadruped-walk-flat", 4, seed=s, randomization=PHYSICS) for s in (3, 3, 4))
    assert set(a.randomization) == {"friction_scale", "mass_scale", "com_offset", "kp_scale", "kd_scale",
                                    "motor_strength", "damping_add", "armature_add"}
    for name, v in a.randomization.items():
        assert torch.equal(v, b.randomization[name]), name  # same seed, same samples
        assert not torch.equal(v, c.randomization[name]), name
        assert not torch.equal(v[0], v[1]), name  # worlds differ
    assert a.randomization["friction_scale"].min() >= 0.5 and a.randomization["friction_scale"].max() < 1.5
    assert a.randomization["com_offset"].abs().max() <= 0.02
    fric = a.backend.model_field("geom_friction")[:, :, 0]  # (N, G)
    nominal = torch.from_numpy(a.backend.model.geom_friction[:, 0])
    torch.testing.assert_close(fric, nominal * a.randomization["friction_scale"][:, None])
    kp = a.backend.model_field("actuator_gainprm")[:, a._act_columns, 0]  # (N, J)
    torch.testing.assert_close(kp, a._kp_nominal * a.randomization["kp_scale"])
    assert torch.equal(a.kp, kp.to(torch.float32))  # the torque reward uses each world's gains
    mass = a.backend.model_field("body_mass")
    assert torch.equal(mass[:, 0], torch.zeros(4))  # the world body keeps no mass
    for env in (a, b, c):
        env.close()


def test_randomization_changes_the_physics_and_is_off_by_default():
    plain = env_with("quadruped-walk-flat", 4)
    assert plain.randomization == {} and plain.observations.policy_is_view
    randomized = env_with("quadruped-walk-flat", 4, randomization=PHYSICS)
    base, rand = rollout(plain), rollout(randomized)
    assert torch.isfinite(rand).all()
    assert (base - rand).abs().max() > 1e-2  # same actions, different physics
    for env in (plain, randomized):
        env.close()


def test_reset_mode_resamples_only_reset_worlds_and_resume_restores_them():
    cfg = dataclasses.replace(PHYSICS, mode="reset")
    env = env_with("arm-reach", 3, randomization=cfg)
    env.reset(random_start=False)
    before = env.randomization["kp_scale"].clone()
    env._reset_ids(torch.tensor([1]))
    after = env.randomization["kp_scale"]
    assert torch.equal(after[[0, 2]], before[[0, 2]]) and not torch.equal(after[1], before[1])
    saved = env.state_dict()
    twin = env_with("arm-reach", 3, seed=99, randomization=cfg)  # other seed: other startup samples
    twin.load_state_dict(saved)
    assert torch.equal(twin.backend.model_field("actuator_gainprm"), env.backend.model_field("actuator_gainprm"))
    torch.testing.assert_close(rollout_from_here(twin), rollout_from_here(env), rtol=0, atol=0)
    env.close()
    twin.close()


def rollout_from_here(env, steps=10):
    gen = torch.Generator().manual_seed(5)
    return torch.stack([env.step(torch.randn(env.num_envs, env.action_dim, generator=gen))[0]["critic"].clone()
                        for _ in range(steps)])


def test_delayed_actions_queue():
    queue = torch.zeros(2, 3, 1)
    delay = torch.tensor([0, 2])
    applied = [delayed_actions(queue, torch.full((2, 1), float(t + 1)), delay)[:, 0].tolist() for t in range(4)]
    assert applied == [[1, 0], [2, 0], [3, 1], [4, 2]]


@pytest.mark.parametrize("k", [1, 3])
def test_latency_of_k_steps_shifts_the_applied_action_by_k_control_steps(k):
    env = env_with("arm-reach", 2, randomization=DomainRandConfig(action_latency_steps=(k, k)))
    env.reset(random_start=False)
    gen = torch.Generator().manual_seed(0)
    actions = [torch.randn(2, env.action_dim, generator=gen).clamp(-2.5, 2.5) for _ in range(8)]  # inside the clip
    applied = []
    for a in actions:
        env.step(a)
        applied.append(env.backend.ctrl[:, env.act_idx].to(torch.float32).clone())  # joint targets sent
        assert torch.equal(env.action, a)  # the policy's last_action is what it sent, as on the robot
    default, scale = env.default_joint_pos, env.cfg.action_scale
    for t in range(8):
        expected = default + scale * actions[t - k] if t >= k else default.expand(2, -1)
        torch.testing.assert_close(applied[t], expected)
    env.close()


def test_latency_is_drawn_per_world_within_its_range():
    env = env_with("arm-reach", 64, randomization=DomainRandConfig(action_latency_steps=(0, 2)))
    env.reset()
    assert set(env.action_delay.tolist()) == {0, 1, 2}
    env.close()


def test_pushes_change_the_base_velocity_at_their_interval():
    rand = DomainRandConfig(push_interval_s=0.2, push_velocity=1.0)
    pushed, calm = env_with("quadruped-walk-flat", 4, randomization=rand), env_with("quadruped-walk-flat", 4)
    for env in (pushed, calm):
        env.reset(random_start=False)
    zero = torch.zeros(4, 12)
    steps = round(0.2 / pushed.dt)
    for _ in range(steps - 1):
        pushed.step(zero)
        calm.step(zero)
    torch.testing.assert_close(pushed.backend.qvel, calm.backend.qvel)  # no push before the interval
    pushed.step(zero)
    calm.step(zero)
    jump = (pushed.backend.qvel[:, 0:2] - calm.backend.qvel[:, 0:2]).abs()
    assert (jump.max(dim=1).values > 0.05).all()  # every world was pushed
    with pytest.raises(ConfigError, match="no floating base"):
        env_with("arm-reach", 1, randomization=rand)
    for env in (pushed, calm):
        env.close()


def test_observation_noise_is_bounded_and_only_in_the_policy_group():
    width = 0.05
    env = env_with("arm-reach", 8, randomization=DomainRandConfig(obs_noise={"joint_vel": width}))
    obs = env.reset(random_start=False)
    policy, critic = obs["policy"], obs["critic"]
    assert policy.shape == critic.shape
    jv = slice(7, 14)  # joint_pos_rel (7), joint_vel (7), ...
    diff = policy[:, jv] - critic[:, jv]
    assert 0 < diff.abs().max() <= width
    others = torch.ones(policy.shape[1], dtype=torch.bool)
    others[jv] = False
    assert torch.equal(policy[:, others], critic[:, others])
    with pytest.raises(ConfigError, match="not a policy observation term"):
        env_with("arm-reach", 1, randomization=DomainRandConfig(obs_noise={"height_scan": 0.1}))
    env.close()


def test_history_stacks_past_values_oldest_first_and_refills_on_reset():
    env = env_with("arm-reach", 2, obs_history={"joint_pos_rel": 3})
    assert env.obs_dims["policy"] == 27 + 14 and env.contract.obs_dim == 41
    obs = env.reset(random_start=False)
    first = obs["critic"][:, :7].clone()
    torch.testing.assert_close(obs["policy"][:, :21], first.repeat(1, 3))  # filled at reset
    values = [first]
    for _ in range(3):
        obs, *_ = env.step(torch.ones(2, 7))
        values.append(obs["critic"][:, :7].clone())
        torch.testing.assert_close(obs["policy"][:, 14:21], values[-1])  # newest last
    torch.testing.assert_close(obs["policy"][:, :21], torch.cat(values[-3:], dim=1))
    env._reset_ids(torch.tensor([0]))
    obs, _ = env._observe(fill_ids=torch.tensor([0]))
    torch.testing.assert_close(obs["policy"][0, :21], obs["critic"][0, :7].repeat(3))
    with pytest.raises(ConfigError, match="obs_history.height_scan"):
        env_with("arm-reach", 1, obs_history={"height_scan": 2})
    env.close()


def test_history_parity_between_sim_and_deploy():
    env = env_with("arm-reach", 1, obs_history={"joint_pos_rel": 3, "last_action": 2})
    hw = load_hardware(REPO / "hardware" / "panda.yaml")
    builder = ObservationBuilder(env.contract, hw)
    obs = env.reset(random_start=False)
    gen = torch.Generator().manual_seed(0)
    worst = 0.0
    for step in range(30):
        if step:
            obs, *_ = env.step(0.5 * torch.randn(1, 7, generator=gen))
        deploy = builder.build(robot_state_of(env, 0, hw), commands={"target_pos": env.target[0].numpy()},
                               action=env.action[0].numpy())
        worst = max(worst, float(np.abs(deploy - obs["policy"][0].numpy()).max()))
    assert worst <= 1e-6
    builder.reset()
    env.close()


def test_motor_lag_is_a_first_order_filter_on_the_joint_targets():
    tau = 0.05
    lagged, direct = env_with("arm-reach", 1, motor_lag_s=tau), env_with("arm-reach", 1)
    assert lagged.backend.model.na == 7 and direct.backend.model.na == 0
    moves = []
    for env in (lagged, direct):
        env.reset(random_start=False)
        q0 = env.q.clone()
        start = env.backend.ctrl[0].clone()
        env.step(torch.full((1, 7), 1.0))
        moves.append((env.q - q0).abs().sum())
    act = lagged.backend.state[0, lagged.backend.slices["act"]]
    target = lagged.backend.ctrl[0]
    fraction = 1 - np.exp(-lagged.dt / tau)  # exact filter over the control step's physics steps
    torch.testing.assert_close(act, start + (target - start) * fraction)
    assert moves[0] < 0.75 * moves[1]  # the arm follows the lagged target
    for env in (lagged, direct):
        env.close()
