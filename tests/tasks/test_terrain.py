"""quadruped-walk-rough: terrain generator, hfield in MuJoCo, height scan, curriculum, foot touch sensors, task."""

import dataclasses
import math

import numpy as np
import pytest
import torch

from robo_rl.core.config import ConfigError
from robo_rl.learn.train_config import resolve_train_config
from robo_rl.sim.mujoco_cpu import mujoco  # sets a headless MUJOCO_GL before mujoco loads
from robo_rl.tasks.curriculum import next_terrain_levels, spawn_origins, terrain_columns
from robo_rl.tasks.events import DomainRandConfig
from robo_rl.tasks.heightmap import ground_height, height_scan, scan_offsets, yaw_from_quat
from robo_rl.tasks.quadruped_rough import (
    QuadrupedWalkRoughConfig,
    heading_yaw_rate,
    load_terrain_scene,
)
from robo_rl.tasks.task_registry import make_env, task_config_class
from robo_rl.tasks.terrain import (
    TERRAIN_TYPES,
    TerrainConfig,
    column_types,
    generate_terrain,
    hfield_layout,
    write_hfield,
)
from tests.conftest import REPO, load_script

SMALL = TerrainConfig(num_levels=4, num_columns=6, sub_terrain_size=4.0, border=1.0, platform_size=1.0,
                      proportions={t: 1.0 for t in TERRAIN_TYPES})
"""A small field with one column of every type (fast to generate and compile)."""


def cell(terrain, cfg, level, col):
    """Heights (S, S) of sub-terrain (level, col)."""
    s = round(cfg.sub_terrain_size / cfg.horizontal_scale)
    b = round(cfg.border / cfg.horizontal_scale)
    return terrain.heights[b + level * s : b + (level + 1) * s, b + col * s : b + (col + 1) * s]


# ---------------------------------------------------------------------------------------------- generator
def test_terrain_shapes_types_and_origins():
    t = generate_terrain(SMALL)
    side = round((2 * 1.0 + 4 * 4.0) / 0.05) + 1, round((2 * 1.0 + 6 * 4.0) / 0.05) + 1
    assert t.heights.shape == side and t.heights.dtype == np.float32
    assert t.origins.shape == (4, 6, 3) and t.difficulty_values.shape == (4, 6)
    assert t.column_types == TERRAIN_TYPES  # six columns at equal shares: one of each
    # Origins sit at the centre of their cells, on the ground there.
    np.testing.assert_allclose(t.origins[2, 3, :2], [1.0 + 3.5 * 4.0, 1.0 + 2.5 * 4.0], atol=0.05)
    r, c = np.round(t.origins[..., 1] / 0.05).astype(int), np.round(t.origins[..., 0] / 0.05).astype(int)
    assert np.all(t.origins[..., 2] >= t.heights[r, c] - 1e-6)


def test_column_types_follow_the_proportions():
    kinds = column_types({"stairs_up": 0.5, "rough": 0.25, "obstacles": 0.25}, 8)
    assert kinds == ("stairs_up",) * 4 + ("rough",) * 2 + ("obstacles",) * 2
    assert column_types({"slope_up": 1.0, "rough": 0.0}, 3) == ("slope_up",) * 3


def test_terrain_is_reproducible_from_its_seed():
    a, b = generate_terrain(SMALL), generate_terrain(SMALL)
    c = generate_terrain(dataclasses.replace(SMALL, seed=1))
    assert np.array_equal(a.heights, b.heights) and np.array_equal(a.origins, b.origins)
    assert not np.array_equal(a.heights, c.heights)  # rough ground and boxes are random


def test_border_is_flat():
    t = generate_terrain(SMALL)
    b = round(SMALL.border / SMALL.horizontal_scale)
    for strip in (t.heights[:b], t.heights[-b:], t.heights[:, :b], t.heights[:, -b:]):
        assert np.all(strip == 0.0)


def test_difficulty_grows_with_level():
    cfg = dataclasses.replace(SMALL, num_levels=5)
    t = generate_terrain(cfg)
    kinds = t.column_types

    def per_level(kind, measure):
        return [measure(cell(t, cfg, lvl, kinds.index(kind))) for lvl in range(cfg.num_levels)]

    def max_step(h):
        return max(np.abs(np.diff(h, axis=0)).max(), np.abs(np.diff(h, axis=1)).max())

    for kind in ("stairs_up", "stairs_down", "obstacles"):
        steps = per_level(kind, max_step)
        assert all(b > a for a, b in zip(steps, steps[1:], strict=False)), (kind, steps)
    for kind in ("slope_up", "slope_down", "rough"):
        relief = per_level(kind, lambda h: float(np.abs(h).max()))
        assert all(b > a for a, b in zip(relief[1:], relief[2:], strict=False)), (kind, relief)  # slope 0 at level 0
    # The stairs' steps are exactly the configured height; "up" is a pit, "down" a pyramid.
    step = cfg.step_height[0] + 0.5 * (cfg.step_height[1] - cfg.step_height[0])  # level 2 of 5: difficulty 0.5
    up = cell(t, cfg, 2, kinds.index("stairs_up"))
    down = cell(t, cfg, 2, kinds.index("stairs_down"))
    steps = math.floor((cfg.sub_terrain_size - cfg.platform_size) / 2 / cfg.step_width)
    np.testing.assert_allclose(np.unique(down), np.arange(steps + 1) * step, atol=1e-6)
    np.testing.assert_allclose(up, -down, atol=1e-6)
    assert t.origins[2, kinds.index("stairs_up"), 2] == pytest.approx(-steps * step, abs=1e-6)


@pytest.mark.parametrize(
    "override, message",
    [
        ({"proportions": {"stairs": 1.0}}, "unknown terrain type"),
        ({"proportions": {t: 0.0 for t in TERRAIN_TYPES}}, "at least one must be > 0"),
        ({"step_height": (0.2, 0.1)}, "low <= high"),
        ({"sub_terrain_size": 4.03}, "multiple of horizontal_scale"),
        ({"platform_size": 9.0}, "must be <= env.terrain.sub_terrain_size"),
    ],
)
def test_bad_terrain_config_is_one_line_error(override, message):
    with pytest.raises(ConfigError, match=message) as err:
        resolve_train_config({"task": "quadruped-walk-rough", "env": {"terrain": override}},
                             env_config_cls=task_config_class)
    assert "\n" not in str(err.value) and "env.terrain." in str(err.value)


def test_init_levels_must_exist():
    with pytest.raises(ConfigError, match=r"env.init_level_range = \[0, 10\]"):
        resolve_train_config({"task": "quadruped-walk-rough"}, ["env.init_level_range=[0, 10]"],
                             env_config_cls=task_config_class)


# ---------------------------------------------------------------------------------------------- MuJoCo hfield
@pytest.fixture(scope="module")
def small_scene():
    terrain = generate_terrain(SMALL)
    model = load_terrain_scene("envs/go2_rough.xml", terrain)
    return terrain, model


def test_hfield_in_the_model_matches_the_heights(small_scene):
    """Rays cast down onto the compiled model hit the generator's heights (at samples, where the surfaces agree)."""
    terrain, model = small_scene
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    hf_geom = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, "terrain")
    rng = np.random.default_rng(0)
    rows, cols = terrain.heights.shape
    geom_id = np.zeros(1, np.int32)
    for r, c in zip(rng.integers(0, rows, 200), rng.integers(0, cols, 200), strict=True):
        start = np.array([c * terrain.spacing, r * terrain.spacing, 5.0])
        dist = mujoco.mj_ray(model, data, start, np.array([0.0, 0.0, -1.0]), None, 1, -1, geom_id)
        assert geom_id[0] == hf_geom
        assert 5.0 - dist == pytest.approx(float(terrain.heights[r, c]), abs=1e-4)


def test_default_scene_file_matches_the_default_config():
    """go2_rough.xml on its own has the hfield the default terrain needs (the task resizes it for others)."""
    model = mujoco.MjModel.from_xml_path(str(REPO / "envs" / "go2_rough.xml"))
    layout = hfield_layout(generate_terrain(TerrainConfig()))
    assert (model.hfield_nrow[0], model.hfield_ncol[0]) == (layout["nrow"], layout["ncol"])
    np.testing.assert_allclose(model.hfield_size[0], layout["size"], rtol=1e-6)
    np.testing.assert_allclose(model.geom_pos[mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, "terrain")],
                               layout["geom_pos"], rtol=1e-6)


def test_write_hfield_refuses_a_model_compiled_for_another_field():
    model = mujoco.MjModel.from_xml_path(str(REPO / "envs" / "go2_rough.xml"))  # sized for the default field
    with pytest.raises(ValueError, match="samples"):
        write_hfield(model, 0, generate_terrain(SMALL))


def test_scene_without_terrain_is_a_config_error():
    with pytest.raises(ConfigError, match="no hfield 'terrain'"):
        load_terrain_scene("envs/go2.xml", generate_terrain(SMALL))


def test_robot_stands_on_the_terrain():
    """Robots on the top platforms of the hardest stairs and in the deepest pits stay on the surface."""
    stairs = dataclasses.replace(SMALL, num_columns=2, proportions={"stairs_up": 1.0, "stairs_down": 1.0})
    cfg = QuadrupedWalkRoughConfig(terrain=stairs, init_level_range=(3, 3), curriculum=False,
                                   randomization=DomainRandConfig())
    env = make_env("quadruped-walk-rough", 12, seed=0, cfg=cfg)
    env.reset(random_start=False)
    for _ in range(75):  # 1.5 s
        _, _, terminated, _, _ = env.step(torch.zeros(12, env.action_dim))
        assert not terminated.any()
    ground = spawn_origins(torch.from_numpy(env.terrain.origins), env.terrain_level, env.terrain_column)[:, 2]
    assert ground.max() > 0.3 and ground.min() < -0.3  # stair tops and pits
    np.testing.assert_array_less(np.full(12, 0.2), (env.base_pos[:, 2] - ground).numpy())
    np.testing.assert_array_less((env.base_pos[:, 2] - ground).numpy(), np.full(12, 0.4))
    env.close()


# ---------------------------------------------------------------------------------------------- height scan
def test_ground_height_is_bilinear_and_clamped():
    heights = torch.tensor([[0.0, 0.0, 0.0], [0.0, 1.0, 2.0]])  # (R, C) row = y, column = x
    pts = torch.tensor([[1.0, 0.5], [0.5, 0.5], [1.5, 1.0], [-3.0, -3.0], [9.0, 9.0], [2.0, 1.0]])
    expected = torch.tensor([0.5, 0.25, 1.5, 0.0, 2.0, 2.0])  # hand-computed; outside: the nearest edge
    torch.testing.assert_close(ground_height(pts * 0.5, heights, spacing=0.5), expected)


def test_height_scan_against_hand_computed_values():
    heights = torch.arange(9.0).reshape(3, 3)  # h(x, y) = x + 3 y on a 1 m grid: bilinear is exact
    offsets = torch.tensor([[0.0, 0.0], [0.5, 0.0], [0.0, 0.5]])  # (P, 2) in the yaw frame
    base = torch.tensor([[1.0, 1.0, 10.0], [1.0, 1.0, 10.0]])
    yaw = torch.tensor([0.0, math.pi / 2])
    scan = height_scan(base, yaw, heights, offsets=offsets, spacing=1.0)  # (N, P)
    # yaw 0: ground 4, 4.5, 5.5; yaw 90 deg: forward is +y (ground 5.5), left is -x (ground 3.5)
    torch.testing.assert_close(scan, torch.tensor([[6.0, 5.5, 4.5], [6.0, 4.5, 6.5]]))


def test_scan_offsets_and_yaw():
    pts = scan_offsets(1.6, 1.0, 0.1)
    assert pts.shape == (17 * 11, 2)
    torch.testing.assert_close(pts[0], torch.tensor([-0.8, -0.5]))
    torch.testing.assert_close(pts[-1], torch.tensor([0.8, 0.5]))
    yaw = torch.tensor([0.3, -2.0, 3.0])
    quat = torch.stack([torch.cos(yaw / 2), 0 * yaw, 0 * yaw, torch.sin(yaw / 2)], dim=-1)
    torch.testing.assert_close(yaw_from_quat(quat), yaw)


# ---------------------------------------------------------------------------------------------- curriculum
def test_curriculum_moves_up_down_and_wraps():
    gen = torch.Generator().manual_seed(0)
    levels = torch.tensor([2, 2, 2, 0, 2, 4])
    walked = torch.tensor([3.5, 1.0, 2.0, 0.0, 2.0, 5.0])
    commanded = torch.tensor([10.0, 4.0, 4.0, 10.0, 0.0, 10.0])
    new = next_terrain_levels(levels, walked, commanded, move_up_distance=3.0, num_levels=5, generator=gen)
    # far -> up; < half commanded -> down; exactly half -> stays; down at 0 stays 0; standing -> stays
    assert new[:5].tolist() == [3, 1, 2, 0, 2]
    many = next_terrain_levels(torch.full((400,), 4), torch.full((400,), 5.0), torch.zeros(400),
                               move_up_distance=3.0, num_levels=5, generator=gen)
    assert set(many.tolist()) == {0, 1, 2, 3, 4}  # solved the top level: sent to a random level
    assert 0 <= int(new[5]) < 5


def test_worlds_spread_over_columns():
    cols = terrain_columns(10, 4)
    assert cols.tolist() == [0, 0, 0, 1, 1, 2, 2, 2, 3, 3]


def test_curriculum_in_the_env_promotes_walkers_and_demotes_stragglers():
    cfg = QuadrupedWalkRoughConfig(terrain=SMALL, init_level_range=(1, 1), randomization=DomainRandConfig())
    env = make_env("quadruped-walk-rough", 3, seed=0, cfg=cfg)
    env.reset(random_start=False)
    half = env.terrain.sub_terrain_size / 2
    env.base_pos[:, :2] = env.spawn_xy + torch.tensor([[half + 0.1, 0.0], [0.1, 0.0], [0.0, 0.1]])
    env.commanded_distance[:] = torch.tensor([5.0, 5.0, 0.0])
    env._reset_ids(torch.arange(3))
    assert env.terrain_level.tolist() == [2, 0, 1]
    expected = spawn_origins(torch.from_numpy(env.terrain.origins), env.terrain_level, env.terrain_column)
    torch.testing.assert_close(env.base_pos[:, :2], expected[:, :2])  # respawned on the new cells
    env.close()


# ---------------------------------------------------------------------------------------------- touch sensors
@pytest.mark.parametrize("task", ["quadruped-walk-flat", "quadruped-walk-rough"])
def test_foot_touch_sensors_see_standing_and_lifted_feet(task):
    cfg = task_config_class(task)()
    env = make_env(task, 2, seed=0, cfg=cfg)
    env.reset(random_start=False)
    for _ in range(50):
        env.step(torch.zeros(2, env.action_dim))
    assert (env.feet_force > env.cfg.foot_contact_force).all()  # all four feet stand
    b = env.backend
    qpos = b.qpos.clone()
    qpos[0, 2] += 0.15  # world 0: lifted clear of the ground
    calf = b.joint_qpos_index(["FL_calf_joint", "FL_thigh_joint"])
    qpos[1, calf] = torch.tensor([-2.7, 1.6], dtype=qpos.dtype)  # world 1: front-left leg folded up
    b.reset(torch.arange(2), qpos=qpos, qvel=torch.zeros(2, b.model.nv))
    env._refresh()
    contact = env.feet_force > env.cfg.foot_contact_force  # (N, F) FL, FR, RL, RR
    assert contact.tolist() == [[False] * 4, [False, True, True, True]]
    env.close()


# ---------------------------------------------------------------------------------------------- task
def test_rough_task_steps_with_contract_shapes_and_logs_every_term():
    cfg = QuadrupedWalkRoughConfig(terrain=SMALL, episode_length_s=1.0,
                                   randomization=DomainRandConfig(push_interval_s=0.5, push_velocity=1.0))
    env = make_env("quadruped-walk-rough", 4, seed=0, cfg=cfg)
    contract = env.contract
    flat = make_env("quadruped-walk-flat", 1).contract
    assert contract.observation == flat.observation  # the deployed policy stays blind
    assert env.obs_dims["critic"] == contract.obs_dim + 3 + 17 * 11
    obs = env.reset()
    gen = torch.Generator().manual_seed(0)
    logged = set()
    for _ in range(200):
        obs, reward, terminated, truncated, info = env.step(torch.randn(4, env.action_dim, generator=gen))
        assert obs["policy"].shape == (4, contract.obs_dim)
        assert obs["critic"].shape == (4, env.obs_dims["critic"])
        assert all(torch.isfinite(g).all() for g in obs.values()) and torch.isfinite(reward).all()
        logged |= set(info["log"])
    assert {f"Episode_Reward/{t}" for t in env.reward_terms} <= logged
    assert {"Metrics/terrain_level", "Metrics/ground_gain", "Metrics/lin_vel_error"} <= logged
    env.close()


def test_heading_yaw_rate():
    rate = heading_yaw_rate(torch.tensor([math.pi - 0.1, 1.0, 0.0]), torch.tensor([-math.pi + 0.1, 0.0, 3.0]),
                            stiffness=0.5, low=-1.0, high=0.4)
    torch.testing.assert_close(rate, torch.tensor([-0.1, 0.4, -1.0]))  # wrapped across +-pi; clipped


def test_rough_task_resumes_bit_for_bit():
    cfg = QuadrupedWalkRoughConfig(terrain=SMALL, episode_length_s=0.5)
    a = make_env("quadruped-walk-rough", 4, seed=2, cfg=cfg)
    a.reset()
    gen = torch.Generator().manual_seed(0)
    for _ in range(30):
        a.step(torch.randn(4, 12, generator=gen))
    b = make_env("quadruped-walk-rough", 4, seed=9, cfg=cfg)
    b.load_state_dict(a.state_dict())
    actions = torch.randn(20, 4, 12, generator=gen)
    out_a = [a.step(x)[0]["critic"] for x in actions]
    out_b = [b.step(x)[0]["critic"] for x in actions]
    assert torch.equal(torch.stack(out_a), torch.stack(out_b))
    assert torch.equal(a.terrain_level, b.terrain_level)


def test_stairs_evaluation_config_is_up_stairs_at_one_level_without_pushes():
    """scripts/eval_rough_stairs.py's config: every column stairs_up, one level, no curriculum or pushes."""
    script = load_script("eval_rough_stairs")
    cfg = resolve_train_config({"task": "quadruped-walk-rough"}, [], env_config_cls=task_config_class)
    assert cfg.env.randomization.push_interval_s > 0  # the preset pushes; the evaluation must not
    env = script.stairs_config(cfg, 2, 0.5).env
    assert env.terrain.proportions == {t: float(t == "stairs_up") for t in TERRAIN_TYPES}
    assert env.init_level_range == (2, 2) and not env.curriculum and env.randomization.push_interval_s == 0.0
    assert env.lin_vel_x == (0.5, 0.5) and env.lin_vel_y == (0.0, 0.0) and env.standing_fraction == 0.0
    env.validate()
