"""quadruped-walk-rough: the Go2 tracks velocity commands on generated terrain with a curriculum.

The flat task (`quadruped_walk.py`) on a heightfield of slopes, stairs, rough ground and obstacles
(`terrain.py`) in rows of rising difficulty. Each world keeps one terrain column and a level that
follows a legged_gym-style curriculum (`curriculum.py`): at every reset it moves up after walking
out of its cell and down after walking less than half of what it was asked. Robots start at the
centre of their cell, are pushed now and then (a random planar base velocity), and follow heading
commands (the yaw-rate command steers toward a random heading), so they walk straight out of their
cell. The critic also sees a height scan around the base; the policy's observations are the flat
task's, so the deployed policy stays blind. Episodes end when the base drops below `min_base_height`
above the ground under it, or tips over.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from robo_rl.core.assets import find_asset
from robo_rl.core.config import ConfigError, _f
from robo_rl.core.contract import ObsTerm
from robo_rl.sim.mujoco_cpu import mujoco  # the backend picks a headless MUJOCO_GL before importing mujoco
from robo_rl.tasks.curriculum import initial_terrain_levels, next_terrain_levels, spawn_origins, terrain_columns
from robo_rl.tasks.events import DomainRandConfig
from robo_rl.tasks.heightmap import ground_height, height_scan, scan_offsets, scan_size, yaw_from_quat
from robo_rl.tasks.mjcf import add_motor_lag, check_model_file
from robo_rl.tasks.quadruped_walk import QuadrupedWalkConfig, QuadrupedWalkEnv
from robo_rl.tasks.task_registry import TASKS, TaskEntry
from robo_rl.tasks.terrain import Terrain, TerrainConfig, generate_terrain, size_hfield, write_hfield
from robo_rl.terms import ObservationTermRecord, register_observation
from robo_rl.terms.base_motion import identity

TERRAIN_NAME = "terrain"
"""Name of the scene's hfield asset and of the geom that shows it."""


@dataclass(frozen=True, kw_only=True)
class QuadrupedWalkRoughConfig(QuadrupedWalkConfig):
    """quadruped-walk-rough task parameters: the flat task's, on generated terrain with a curriculum.

    `min_base_height` is measured from the ground under the base.
    """

    model: str = "envs/go2_rough.xml"
    """MJCF scene with an hfield and a geom named `terrain` (filled from `terrain` at load time)."""
    terrain: TerrainConfig = field(default_factory=TerrainConfig)
    """The generated heightfield."""
    curriculum: bool = True
    """Move robots between levels at reset by how far they walked (False: levels stay as they started)."""
    init_level_range: tuple[int, ...] = _f((0, 0), ge=0)
    """[low, high]: robots start on levels drawn uniformly from low..high."""
    heading_command: bool = True
    """Steer toward a random heading: the yaw-rate command becomes heading_stiffness * heading error,
    clipped to `ang_vel_z` (the policy still sees a yaw-rate command)."""
    heading_stiffness: float = _f(0.5, gt=0.0)
    """Yaw-rate command per radian of heading error (1/s)."""
    randomization: DomainRandConfig = field(
        default_factory=lambda: DomainRandConfig(push_interval_s=15.0, push_velocity=1.0)
    )
    """Domain randomisation (robo_rl.tasks.events); push recovery on by default: every 15 s from a world's reset,
    a planar base velocity uniform in +-1 m/s per axis (an `env.randomization` section overrides single fields)."""
    spawn_clearance: float = _f(0.08, ge=0.0, le=1.0)
    """Robots start this much higher above their cell's ground than the keyframe stands (m). The randomised
    start pose can reach up to ~7 cm below the keyframe's feet, and a foot that starts deep inside a
    heightfield is pulled in rather than pushed out (MuJoCo's hfield prisms), so robots drop in from above."""
    height_scan_size: tuple[float, ...] = _f((1.6, 1.0), ge=0.0)
    """Length (along the heading) and width of the critic's height-scan grid (m)."""
    height_scan_resolution: float = _f(0.1, gt=0.0)
    """Distance between height-scan points (m)."""

    def validate(self) -> None:
        super().validate()
        self.terrain.validate()
        lo_hi = self.init_level_range
        if len(lo_hi) != 2 or lo_hi[0] > lo_hi[1] or lo_hi[1] >= self.terrain.num_levels:
            raise ConfigError(
                f"config error: env.init_level_range = {list(lo_hi)!r}: expected [low, high] with "
                f"0 <= low <= high < env.terrain.num_levels = {self.terrain.num_levels}"
            )
        if len(self.height_scan_size) != 2:
            raise ConfigError(
                f"config error: env.height_scan_size = {list(self.height_scan_size)!r}: expected [length, width]"
            )


def load_terrain_scene(model: str, terrain: Terrain, *, motor_lag_s: float = 0.0,
                       lag_actuators: tuple[str, ...] = ()) -> Any:
    """Compile the MJCF scene `model` with its `terrain` hfield sized for and filled with `terrain`
    (and `add_motor_lag` applied).

    Raises:
        ConfigError: one line when the file is missing, MuJoCo cannot compile it or it has no terrain hfield.
    """
    check_model_file(model)
    try:
        spec = mujoco.MjSpec.from_file(str(find_asset(model)))
        size_hfield(spec, terrain, hfield=TERRAIN_NAME, geom=TERRAIN_NAME)
        add_motor_lag(spec, lag_actuators, motor_lag_s)
        compiled = spec.compile()
    except ValueError as exc:  # XML and compile errors, and a scene without the terrain hfield
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"config error: env.model = {model!r}: cannot load it as a terrain scene: {first}") from None
    write_hfield(compiled, mujoco.mj_name2id(compiled, mujoco.mjtObj.mjOBJ_HFIELD, TERRAIN_NAME), terrain)
    return compiled


def heading_yaw_rate(heading: Tensor, yaw: Tensor, *, stiffness: float, low: float, high: float) -> Tensor:
    """Yaw-rate command (N,) that turns a base with yaw (N,) toward `heading` (N,): stiffness * wrapped error."""
    error = torch.atan2(torch.sin(heading - yaw), torch.cos(heading - yaw))  # (N,) in (-pi, pi]
    return (stiffness * error).clamp(low, high)


def _critic_terms(scan_points: int) -> tuple[ObsTerm, ...]:
    """Privileged terms after the policy's: base velocity and the height scan (critic only, never deployed)."""
    return ObsTerm(name="base_lin_vel", dim=3), ObsTerm(name="height_scan", dim=scan_points)


register_observation(ObservationTermRecord(
    name="height_scan", inputs=("height_scan",), torch=identity, numpy=None, dim=None,  # sim only: the critic's
))
"""Terrain heights below points around the base (P,), relative to the base; privileged, never deployed."""


class QuadrupedWalkRoughEnv(QuadrupedWalkEnv):
    description = (
        "Unitree Go2 tracks velocity commands on generated terrain (slopes, stairs, rough, obstacles) with a "
        "level curriculum and pushes; blind policy, height scan for the critic"
    )
    critic_extra_terms = _critic_terms(scan_size(1.6, 1.0, 0.1))
    """The default config's critic terms (`robo-rl tasks`); an instance sizes the scan from its config."""

    def __init__(self, cfg: QuadrupedWalkRoughConfig, num_envs: int, **options: Any):
        self.terrain = generate_terrain(cfg.terrain)
        self._heights = torch.tensor(self.terrain.heights)  # (R, C) on the default (the env's) device
        self._origins = torch.tensor(self.terrain.origins, dtype=torch.float64)  # (L, J, 3)
        self._scan = scan_offsets(*cfg.height_scan_size, cfg.height_scan_resolution)  # (P, 2)
        self.critic_extra_terms = _critic_terms(len(self._scan))
        super().__init__(cfg, num_envs, **options)  # seed, backend, device, ...: see TaskEnv
        t = self.terrain
        self.terrain_level = initial_terrain_levels(num_envs, *cfg.init_level_range, generator=self.generator)  # (N,)
        self.terrain_column = terrain_columns(num_envs, len(t.column_types))  # (N,) fixed per world
        self.spawn_xy = self.base_pos[:, :2].clone()  # (N, 2) where the episode started
        self.spawn_ground = self.ground_z.clone()  # (N,) ground height there
        self.commanded_distance = torch.zeros(num_envs)  # (N,) m asked for by the commands this episode
        self.ground_gain = torch.zeros(num_envs)  # (N,) highest ground under the base above the spawn ground (m)
        self.heading = torch.zeros(num_envs)  # (N,) target heading (rad)
        lift = float(self._init_qpos[2]) + cfg.spawn_clearance
        self._lift = torch.tensor([0.0, 0.0, lift], dtype=torch.float64)  # base height above the spawn ground

    def _load_model(self, cfg: QuadrupedWalkRoughConfig) -> Any:
        return load_terrain_scene(cfg.model, self.terrain, motor_lag_s=cfg.motor_lag_s, lag_actuators=self.joint_names)

    # ------------------------------------------------------------------ state, once per step
    def _refresh(self) -> None:
        super()._refresh()
        self.base_yaw = yaw_from_quat(self.base_quat)  # (N,)
        self.ground_z = ground_height(self.base_pos[:, :2], self._heights, spacing=self.terrain.spacing)  # (N,)

    # ------------------------------------------------------------------ task hooks
    def _post_physics(self) -> None:
        self.commanded_distance += torch.linalg.vector_norm(self.command[:, :2], dim=-1) * self.dt
        super()._post_physics()
        torch.maximum(self.ground_gain, self.ground_z - self.spawn_ground, out=self.ground_gain)
        if self.cfg.heading_command:
            self.command[:, 2] = self._steer(self.heading, self.base_yaw)

    def _steer(self, heading: Tensor, yaw: Tensor) -> Tensor:
        """Yaw-rate commands (K,) toward headings (K,) from yaws (K,)."""
        c = self.cfg
        return heading_yaw_rate(heading, yaw, stiffness=c.heading_stiffness, low=c.ang_vel_z[0], high=c.ang_vel_z[1])

    def _obs_sources(self) -> dict[str, Tensor]:
        scan = height_scan(self.base_pos, self.base_yaw, self._heights, offsets=self._scan,
                           spacing=self.terrain.spacing)  # (N, P)
        return {**super()._obs_sources(), "height_scan": scan}

    def _terminated(self) -> Tensor:
        fallen = self.base_pos[:, 2] - self.ground_z < self.cfg.min_base_height
        tipped = self.gravity_b[:, 2] > -self.cfg.max_tilt_cos
        return fallen | tipped

    def _reset_worlds(self, ids: Tensor) -> None:
        if self.cfg.curriculum:
            walked = torch.linalg.vector_norm(self.base_pos[ids, :2] - self.spawn_xy[ids], dim=-1)  # (K,)
            self.terrain_level[ids] = next_terrain_levels(
                self.terrain_level[ids],
                walked,
                self.commanded_distance[ids],
                move_up_distance=self.terrain.sub_terrain_size / 2,
                num_levels=self.terrain.num_levels,
                generator=self.generator,
            )
        super()._reset_worlds(ids)  # places the bases with _spawn_positions
        origin = spawn_origins(self._origins, self.terrain_level[ids], self.terrain_column[ids])  # (K, 3)
        self.spawn_xy[ids] = origin[:, :2].to(torch.float32)
        self.spawn_ground[ids] = origin[:, 2].to(torch.float32)
        for buf in (self.commanded_distance, self.ground_gain):
            buf.index_fill_(0, ids, 0.0)
        if self.cfg.heading_command:  # the new episode's command turns from the new yaw
            yaw = yaw_from_quat(self.backend.qpos[ids, 3:7].to(torch.float32))  # (K,)
            self.command[ids, 2] = self._steer(self.heading[ids], yaw)

    def _spawn_positions(self, ids: Tensor) -> Tensor:
        """Centre of each world's (level, column) cell, the keyframe's height plus `spawn_clearance` above ground."""
        return spawn_origins(self._origins, self.terrain_level[ids], self.terrain_column[ids]) + self._lift

    def _resample_commands(self, ids: Tensor) -> None:
        super()._resample_commands(ids)
        if self.cfg.heading_command:
            self.heading[ids] = torch.rand(ids.numel(), generator=self.generator).mul_(2 * math.pi).sub_(math.pi)

    def _episode_metrics(self, ids: Tensor) -> dict[str, Tensor]:
        """The flat task's metric; the level the episode ran on, how far the robot got from its spawn point (m)
        and the highest ground under it above the spawn ground (m)."""
        return {
            **super()._episode_metrics(ids),
            "terrain_level": self.terrain_level[ids].to(torch.float32),
            "walked": torch.linalg.vector_norm(self.base_pos[ids, :2] - self.spawn_xy[ids], dim=-1),
            "ground_gain": self.ground_gain[ids].clone(),
        }

    def _episode_log(self, ids: Tensor, terminated: Tensor, metrics: dict[str, Tensor]) -> dict[str, float]:
        """The base class's means, with `Metrics/terrain_level` the mean level of all worlds (not only those ending)."""
        log = super()._episode_log(ids, terminated, metrics)
        log["Metrics/terrain_level"] = self.terrain_level.to(torch.float32).mean().item()
        return log

    def _task_buffers(self) -> dict[str, Tensor]:
        return {
            **super()._task_buffers(),
            "terrain_level": self.terrain_level,
            "spawn_xy": self.spawn_xy,
            "spawn_ground": self.spawn_ground,
            "commanded_distance": self.commanded_distance,
            "ground_gain": self.ground_gain,
            "heading": self.heading,
        }


TASKS.register("quadruped-walk-rough", TaskEntry(QuadrupedWalkRoughEnv, QuadrupedWalkRoughConfig))
