"""Groups of worlds with shared initial states (`env.reset_group_size`, robo_rl.tasks.reset_groups)."""

import dataclasses

import pytest
import torch

from robo_rl.core.config import ConfigError, build
from robo_rl.tasks.arm_pick_place import ArmPickPlaceConfig, ArmPickPlaceVisionConfig
from robo_rl.tasks.events import DomainRandConfig
from robo_rl.tasks.reset_groups import split_groups
from robo_rl.tasks.task_registry import make_env

RANDOM = DomainRandConfig(mode="reset", friction_scale=(0.5, 1.5), mass_scale=(0.8, 1.2), kp_scale=(0.8, 1.2),
                          action_latency_steps=(0, 3))
"""Physics drawn at every reset, and an action delay drawn per reset."""


def grouped(task_cfg, num_envs=6, seed=0, **fields):
    cfg = dataclasses.replace(task_cfg, reset_group_size=3, **fields)
    return make_env("arm-pick-place-vision" if isinstance(cfg, ArmPickPlaceVisionConfig) else "arm-pick-place",
                    num_envs, cfg=cfg, seed=seed)


def initial_state(env) -> dict[str, torch.Tensor]:
    """What a reset draws, per world: arm and cube poses, target, goal cube, instruction, physics and latency."""
    out = {"qpos": env.backend.qpos.clone(), "target": env.target.clone(), "goal": env.goal.clone(),
           "action_delay": env.action_delay.clone(), **{k: v.clone() for k, v in env.randomization.items()}}
    if hasattr(env, "instruction"):
        out["instruction"] = env.instruction.clone()
    return out


def assert_groups_share(state: dict[str, torch.Tensor], m: int, differ: tuple[str, ...] = ("qpos", "target")):
    for key, value in state.items():
        rows = value.reshape(-1, m, *value.shape[1:])  # (G, M, ...)
        assert torch.equal(rows, rows[:, :1].expand_as(rows)), key
    for key in differ:  # groups draw independently
        assert not torch.equal(state[key][0], state[key][m]), key


def test_split_groups_finds_whole_groups_and_the_rest():
    leaders, rest = split_groups(torch.tensor([7, 0, 2, 1, 6, 8, 4]), 3, 12)
    assert leaders.tolist() == [0, 6] and rest.tolist() == [4]
    leaders, rest = split_groups(torch.arange(4), 1, 4)
    assert leaders.tolist() == [0, 1, 2, 3] and rest.numel() == 0


def test_a_groups_worlds_share_their_initial_state_and_groups_differ():
    env = grouped(ArmPickPlaceVisionConfig(randomization=RANDOM))
    try:
        obs = env.reset(random_start=False)
        assert_groups_share(initial_state(env), 3, differ=("qpos", "target", "friction_scale", "kp_scale"))
        image = obs["image"].reshape(2, 3, *obs["image"].shape[1:])
        assert torch.equal(image[:, 1:], image[:, :1].expand(-1, 2, -1, -1, -1))  # the same scene, rendered
        assert not torch.equal(image[0, 0], image[1, 0])
        gain = env.backend.model_field("actuator_gainprm").reshape(2, 3, -1)
        assert torch.equal(gain[:, 1:], gain[:, :1].expand(-1, 2, -1)) and not torch.equal(gain[0, 0], gain[1, 0])
        assert torch.equal(obs["text"], env.instruction)
    finally:
        env.close()


def test_a_group_times_out_together_and_draws_its_next_state_together():
    env = grouped(ArmPickPlaceConfig(), episode_length_s=0.2)  # 10 steps
    try:
        env.reset()  # random starts: one per group
        clocks = env.episode_length.reshape(2, 3)
        assert torch.equal(clocks, clocks[:, :1].expand(-1, 3))
        before = initial_state(env)
        actions = torch.randn(6, env.action_dim, generator=torch.Generator().manual_seed(0))
        ended = torch.zeros(6, dtype=torch.bool)
        for _ in range(env.max_episode_length):
            _, _, terminated, truncated, info = env.step(actions)
            done = (terminated | truncated).reshape(2, 3)
            assert torch.equal(done, done[:, :1].expand(-1, 3))  # a group ends together
            ended |= done.flatten()
        assert ended.all()
        after = initial_state(env)
        assert_groups_share(after, 3)
        assert not torch.equal(after["target"], before["target"])  # new draws
    finally:
        env.close()


def fail(env, world: int) -> None:
    """Drop world's goal cube below the table: its episode ends by failure on the next step."""
    z = env._cubes[0][env.goal[world], 2]
    env.backend.qpos[world, z] = -1.0


def test_a_world_that_fails_replays_its_groups_initial_state_and_keeps_the_groups_clock():
    env = grouped(ArmPickPlaceVisionConfig(randomization=RANDOM), episode_length_s=0.2)
    twin = grouped(ArmPickPlaceVisionConfig(randomization=RANDOM), seed=7, episode_length_s=0.2)
    try:
        env.reset(random_start=False)
        start = initial_state(env)
        zero = torch.zeros(6, env.action_dim)
        for _ in range(3):
            env.step(zero)
        twin.reset()
        twin.load_state_dict(env.state_dict())  # the groups' initial states travel with the env's state
        for e in (env, twin):
            fail(e, 4)
            obs, _, terminated, truncated, info = e.step(zero)
            assert terminated.tolist() == [False] * 4 + [True, False] and not truncated.any()
            now = initial_state(e)
            for key, value in start.items():  # world 4 starts again from its group's state, drawing nothing
                assert torch.equal(now[key][4], value[4]), key
            assert e.episode_steps[4] == 0 and e.episode_length[4] == e.episode_length[3] == 4
            assert not torch.equal(obs["image"][4], info["final_obs"]["image"][4])  # rendered again
        torch.testing.assert_close(twin.backend.qpos, env.backend.qpos, rtol=0, atol=0)
        for _ in range(env.max_episode_length - 5):
            env.step(zero)
        _, _, terminated, truncated, _ = env.step(zero)
        assert truncated.all()  # the whole group, the replayed world too, times out on the same step
        assert_groups_share(initial_state(env), 3)
    finally:
        env.close()
        twin.close()


def test_group_size_must_divide_the_worlds():
    with pytest.raises(ConfigError, match=r"env.reset_group_size = 3: the number of worlds \(4, sim.num_envs\) must "
                                          "be a multiple of it"):
        grouped(ArmPickPlaceConfig(), num_envs=4)
    with pytest.raises(ConfigError, match="env.reset_group_size"):
        build(ArmPickPlaceConfig, {"reset_group_size": 0}, "env")
