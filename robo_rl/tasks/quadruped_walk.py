"""quadruped-walk-flat: a 12-DoF Unitree Go2 tracks random base velocity commands on flat ground.

PD position actuators (q* = q_default + scale * a), observations in the deploy vocabulary, and
legged-gym-style rewards (velocity tracking kernels, regularisers, feet air time). A foot is in
contact when its MJCF touch sensor reads more than `foot_contact_force`, on any ground shape.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from robo_rl.core.config import ConfigError, _f
from robo_rl.core.contract import DeployContract, ObsTerm
from robo_rl.tasks import rewards as rew
from robo_rl.tasks.mjcf import check_model_file
from robo_rl.tasks.task_config import TaskConfig
from robo_rl.tasks.task_env import TaskEnv, check_reward_names
from robo_rl.tasks.task_registry import TASKS, TaskEntry
from robo_rl.terms.base_motion import base_lin_vel_b, projected_gravity
from robo_rl.terms.rotations import quat_rotate, yaw_quat

GO2_LEGS = ("FL", "FR", "RL", "RR")
GO2_JOINTS = tuple(f"{leg}_{part}_joint" for leg in GO2_LEGS for part in ("hip", "thigh", "calf"))


@dataclass(frozen=True, kw_only=True)
class QuadrupedWalkConfig(TaskConfig):
    """quadruped-walk-flat task parameters."""

    model: str = "envs/go2.xml"
    """MJCF scene (relative to the repository root or absolute)."""
    physics_dt: float = _f(0.005, gt=0.0, le=0.01)
    """Physics time step in seconds."""
    decimation: int = _f(4, ge=1)
    """Physics steps per policy step (policy_dt = physics_dt * decimation)."""
    episode_length_s: float = _f(20.0, gt=0.0)
    """Episode length (time-out)."""
    action_scale: float = _f(0.25, gt=0.0)
    """Joint offset in rad per unit of action."""
    action_clip: float = _f(10.0, gt=0.0)
    """Raw actions are clipped to +-action_clip before scaling."""
    lin_vel_x: tuple[float, ...] = _f((-1.0, 1.0))
    """Range of commanded forward velocity (m/s)."""
    lin_vel_y: tuple[float, ...] = _f((-0.5, 0.5))
    """Range of commanded lateral velocity (m/s)."""
    ang_vel_z: tuple[float, ...] = _f((-1.0, 1.0))
    """Range of commanded yaw rate (rad/s)."""
    command_resample_s: float = _f(10.0, gt=0.0)
    """Commands are resampled this often."""
    standing_fraction: float = _f(0.05, ge=0.0, le=1.0)
    """Fraction of commands that are zero (stand still)."""
    tracking_sigma: float = _f(0.5, gt=0.0)
    """Width of the velocity tracking kernels (exp(-err^2 / sigma^2))."""
    feet_air_time_threshold: float = _f(0.4, ge=0.0)
    """Steps longer than this are rewarded by feet_air_time (s)."""
    foot_contact_force: float = _f(1.0, gt=0.0)
    """A foot touches the ground when its touch sensor reads more than this normal force (N)."""
    min_base_height: float = _f(0.15, ge=0.0)
    """Episodes end when the base drops below this height (m)."""
    max_tilt_cos: float = _f(0.3, ge=-1.0, le=1.0)
    """Episodes end when gravity's z component in the base frame exceeds -max_tilt_cos (tipped over)."""
    rewards: dict[str, float] = _f(
        {
            "track_lin_vel_xy": 1.0,
            "track_ang_vel_z": 0.5,
            "lin_vel_z": -2.0,
            "ang_vel_xy": -0.05,
            "flat_orientation": -2.5,
            "joint_torques": -2e-4,
            "joint_acc": -2.5e-7,
            "action_rate": -0.01,
            "feet_air_time": 0.25,
        }
    )
    """Scale of each reward term (sum of scale * term * dt)."""

    def validate(self) -> None:
        check_model_file(self.model)
        check_reward_names(self.rewards, QuadrupedWalkEnv.reward_terms)
        for name in ("lin_vel_x", "lin_vel_y", "ang_vel_z"):
            lo_hi = getattr(self, name)
            if len(lo_hi) != 2 or lo_hi[0] > lo_hi[1]:
                raise ConfigError(
                    f"config error: env.{name} = {list(lo_hi)!r}: expected [low, high] with low <= high"
                )


class QuadrupedWalkEnv(TaskEnv):
    description = "12-DoF Unitree Go2 tracks random base velocity commands on flat ground (PD position actions)"
    joint_names = GO2_JOINTS
    keyframe = "home"
    base_joint = "base"
    reward_terms = (
        "track_lin_vel_xy",
        "track_ang_vel_z",
        "lin_vel_z",
        "ang_vel_xy",
        "flat_orientation",
        "joint_torques",
        "joint_acc",
        "action_rate",
        "feet_air_time",
    )
    policy_terms = (
        ObsTerm(name="base_ang_vel", dim=3),
        ObsTerm(name="projected_gravity", dim=3),
        ObsTerm(name="velocity_command", dim=3),
        ObsTerm(name="joint_pos_rel", dim=12),
        ObsTerm(name="joint_vel", dim=12),
        ObsTerm(name="last_action", dim=12),
    )
    critic_extra_terms = (ObsTerm(name="base_lin_vel", dim=3),)

    def __init__(self, cfg: QuadrupedWalkConfig, num_envs: int, **options: Any):
        super().__init__(cfg, num_envs, **options)  # seed, backend, device, ...: see TaskEnv
        b = self.backend
        self._feet_touch_idx = torch.tensor([b.sensor_slice(f"{leg}_foot_touch").start for leg in GO2_LEGS])
        # Views of the float32 state, refreshed in place by the base class.
        self.base_pos = self.qpos32[:, 0:3]  # (N, 3)
        self.base_quat = self.qpos32[:, 3:7]  # (N, 4) wxyz
        self.ang_vel_b = self.qvel32[:, 3:6]  # (N, 3) a free joint's angular velocity is body-frame
        self._init_qpos = b.init_state[b.slices["qpos"]].clone()  # (nq,)
        self.command = torch.zeros(num_envs, 3)  # (N, 3) v_x, v_y, yaw rate
        self.command_time = torch.zeros(num_envs)  # (N,) seconds until resampling
        self.prev_joint_vel = torch.zeros(num_envs, self.action_dim)
        self.air_time = torch.zeros(num_envs, 4)  # (N, F)
        self._first_contact = torch.zeros(num_envs, 4, dtype=torch.bool)
        self._air_time_at_touchdown = torch.zeros(num_envs, 4)
        self.lin_vel_error_sum = torch.zeros(num_envs)  # (N,) for the episode-mean tracking error
        c = cfg
        # Command draws (4,): v_x, v_y, yaw rate, and a uniform [0, 1) number that picks standing commands.
        self._command_low = torch.tensor([c.lin_vel_x[0], c.lin_vel_y[0], c.ang_vel_z[0], 0.0])
        self._command_range = torch.tensor([c.lin_vel_x[1], c.lin_vel_y[1], c.ang_vel_z[1], 1.0]) - self._command_low
        j = self.action_dim
        self._reset_low = torch.tensor([-math.pi] + [0.5] * j + [-0.3] * 6)  # (1 + J + 6,)
        self._reset_range = torch.tensor([2 * math.pi] + [1.0] * j + [0.6] * 6)
        self._refresh()

    # ------------------------------------------------------------------ state, once per step
    def _refresh(self) -> None:
        super()._refresh()
        self.lin_vel_b = base_lin_vel_b(self.base_quat, self.qvel32[:, 0:3])  # (N, 3) base frame
        self.gravity_b = projected_gravity(self.base_quat)  # (N, 3)
        self.feet_force = self.sensors32[:, self._feet_touch_idx]  # (N, F) normal force on each foot (N)

    # ------------------------------------------------------------------ task hooks
    def _apply_action(self, action: Tensor) -> None:
        self.prev_joint_vel.copy_(self.dq)
        super()._apply_action(action)

    def _post_physics(self) -> None:
        contact = self.feet_force > self.cfg.foot_contact_force  # (N, F)
        self._first_contact = (self.air_time > 0) & contact
        self._air_time_at_touchdown = self.air_time * self._first_contact
        self.air_time = torch.where(contact, 0.0, self.air_time + self.dt)
        # Tracking terms judge the command the policy acted on: computed before any resampling below.
        self._lin_vel_error = rew.lin_vel_xy_error(self.lin_vel_b, self.command)  # (N, 2)
        self._ang_vel_error = rew.ang_vel_z_error(self.ang_vel_b, self.command)  # (N,)
        self._moving = torch.linalg.vector_norm(self.command[:, :2], dim=-1) > 0.1  # (N,) bool
        self.lin_vel_error_sum += torch.linalg.vector_norm(self._lin_vel_error, dim=-1)
        self.command_time -= self.dt
        resample = (self.command_time <= 0).nonzero().squeeze(-1)
        if resample.numel() > 0:
            self._resample_commands(resample)

    def _obs_sources(self) -> dict[str, Tensor]:
        return {**super()._obs_sources(), "base_quat": self.base_quat, "base_ang_vel_b": self.ang_vel_b,
                "base_lin_vel_b": self.lin_vel_b, "velocity_command": self.command}

    def _reward_terms(self) -> dict[str, Tensor]:
        lin_vel_b, ang_vel_b = self.lin_vel_b, self.ang_vel_b
        dq, q = self.dq, self.q
        q_target = self.backend.ctrl[:, self.act_idx].to(torch.float32)
        torque = rew.pd_torque(q_target, q, dq, kp=self.kp, kd=self.kd, limit=self.torque_limit)
        sigma = self.cfg.tracking_sigma
        return {
            "track_lin_vel_xy": rew.reward_track_lin_vel_xy_exp(self._lin_vel_error, sigma=sigma),
            "track_ang_vel_z": rew.reward_track_ang_vel_z_exp(self._ang_vel_error, sigma=sigma),
            "lin_vel_z": rew.cost_lin_vel_z_l2(lin_vel_b),
            "ang_vel_xy": rew.cost_ang_vel_xy_l2(ang_vel_b),
            "flat_orientation": rew.cost_flat_orientation_l2(self.gravity_b),
            "joint_torques": rew.cost_joint_torques_l2(torque),
            "joint_acc": rew.cost_joint_acc_l2(dq, self.prev_joint_vel, dt=self.dt),
            "action_rate": rew.cost_action_rate_l2(self.action, self.prev_action),
            "feet_air_time": rew.reward_feet_air_time(
                self._air_time_at_touchdown,
                self._first_contact,
                self._moving,
                threshold=self.cfg.feet_air_time_threshold,
            ),
        }

    def _terminated(self) -> Tensor:
        fallen = self.base_pos[:, 2] < self.cfg.min_base_height
        tipped = self.gravity_b[:, 2] > -self.cfg.max_tilt_cos
        return fallen | tipped

    def _reset_worlds(self, ids: Tensor) -> None:
        k, j = ids.numel(), self.action_dim
        # One uniform draw per reset (K, 1 + J + 6): yaw, joint scale (J), base velocity in the base frame (6).
        sample = self._uniform(k, self._reset_low, self._reset_range)
        yaw_q = yaw_quat(sample[:, 0])  # (K, 4)
        q = (self.default_joint_pos * sample[:, 1 : 1 + j]).clamp(self.ctrl_low, self.ctrl_high)  # (K, J)
        qpos = self._init_qpos.repeat(k, 1)  # (K, nq)
        qpos[:, 0:3] = self._spawn_positions(ids)
        qpos[:, 3:7] = yaw_q
        qpos[:, self.q_idx] = q.to(torch.float64)
        qvel = torch.zeros(k, self.backend.model.nv, dtype=torch.float64)
        qvel[:, 0:3] = quat_rotate(yaw_q, sample[:, 1 + j : 4 + j])  # world-frame linear velocity
        qvel[:, 3:6] = sample[:, 4 + j :]  # body-frame angular velocity
        self._set_joint_targets(q, ids)
        for buf in (self.action, self.prev_action, self.prev_joint_vel, self.air_time, self._first_contact,
                    self._air_time_at_touchdown, self.lin_vel_error_sum):
            buf.index_fill_(0, ids, 0)
        self._resample_commands(ids)
        self.backend.reset(ids, qpos=qpos, qvel=qvel)

    def _spawn_positions(self, ids: Tensor) -> Tensor:
        """Base positions (K, 3) float64 that worlds `ids` start from: the keyframe's on flat ground."""
        return self._init_qpos[0:3].expand(ids.numel(), 3)

    def _resample_commands(self, ids: Tensor) -> None:
        """New commands for worlds ids: uniform in the configured ranges, zero for a standing fraction."""
        sample = self._uniform(ids.numel(), self._command_low, self._command_range)  # (K, 4)
        standing = sample[:, 3:] < self.cfg.standing_fraction  # (K, 1)
        self.command[ids] = torch.where(standing, 0.0, sample[:, :3])
        self.command_time.index_fill_(0, ids, self.cfg.command_resample_s)

    def _episode_metrics(self, ids: Tensor) -> dict[str, Tensor]:
        """Mean planar velocity tracking error over the episode (m/s)."""
        steps = self.episode_steps[ids].clamp(min=1).to(torch.float32)
        return {"lin_vel_error": self.lin_vel_error_sum[ids] / steps}

    def _task_buffers(self) -> dict[str, Tensor]:
        return {
            "command": self.command,
            "command_time": self.command_time,
            "action": self.action,
            "prev_action": self.prev_action,
            "prev_joint_vel": self.prev_joint_vel,
            "air_time": self.air_time,
            "first_contact": self._first_contact,
            "air_time_at_touchdown": self._air_time_at_touchdown,
            "lin_vel_error_sum": self.lin_vel_error_sum,
        }

    @property
    def contract(self) -> DeployContract:
        c = self.cfg
        return self._make_contract(
            "go2",
            {"lin_vel_x": list(c.lin_vel_x), "lin_vel_y": list(c.lin_vel_y), "ang_vel_z": list(c.ang_vel_z)},
        )


TASKS.register("quadruped-walk-flat", TaskEntry(QuadrupedWalkEnv, QuadrupedWalkConfig))
