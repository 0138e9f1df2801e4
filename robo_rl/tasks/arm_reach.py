"""arm-reach: a 7-DoF Franka Panda moves its end-effector to random targets.

Joint-position-offset actions (q* = q_default + scale * a) drive the arm's position actuators;
the robot's own gravity compensation is modelled with MJCF `gravcomp`. One target per episode;
the metric is the end-effector distance at the end of the episode.
"""

from __future__ import annotations

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

PANDA_JOINTS = tuple(f"joint{i}" for i in range(1, 8))


@dataclass(frozen=True, kw_only=True)
class ArmReachConfig(TaskConfig):
    """arm-reach task parameters."""

    model: str = "envs/panda.xml"
    """MJCF scene (relative to the repository root or absolute)."""
    physics_dt: float = _f(0.005, gt=0.0, le=0.02)
    """Physics time step in seconds."""
    decimation: int = _f(4, ge=1)
    """Physics steps per policy step (policy_dt = physics_dt * decimation)."""
    episode_length_s: float = _f(3.0, gt=0.0)
    """Episode length; one target per episode."""
    action_scale: float = _f(0.5, gt=0.0)
    """Joint offset in rad per unit of action."""
    action_clip: float = _f(3.0, gt=0.0)
    """Raw actions are clipped to +-action_clip before scaling."""
    init_joint_noise: float = _f(0.3, ge=0.0)
    """Initial joints are the home pose plus uniform noise of this half-width (rad)."""
    target_low: tuple[float, ...] = _f((0.35, -0.25, 0.15))
    """Lower corner of the target box in the base frame (m)."""
    target_high: tuple[float, ...] = _f((0.65, 0.25, 0.55))
    """Upper corner of the target box in the base frame (m)."""
    success_distance: float = _f(0.03, gt=0.0)
    """An episode succeeds when its final end-effector distance is below this (m)."""
    tanh_std: float = _f(0.05, gt=0.0)
    """Length scale of the sharp near-target bonus (m)."""
    rewards: dict[str, float] = _f(
        {"position_error": -1.0, "position_error_tanh": 1.0, "action_rate": -0.005, "joint_vel": -0.001}
    )
    """Scale of each reward term (sum of scale * term * dt)."""

    def validate(self) -> None:
        check_model_file(self.model)
        check_reward_names(self.rewards, ArmReachEnv.reward_terms)
        for name in ("target_low", "target_high"):
            if len(getattr(self, name)) != 3:
                raise ConfigError(
                    f"config error: env.{name} = {list(getattr(self, name))!r}: expected 3 numbers (x, y, z)"
                )
        if any(lo > hi for lo, hi in zip(self.target_low, self.target_high, strict=True)):
            raise ConfigError(
                f"config error: env.target_low = {list(self.target_low)!r}: must not exceed "
                f"env.target_high = {list(self.target_high)!r} in any axis"
            )


class ArmReachEnv(TaskEnv):
    description = "7-DoF Franka Panda reaches random end-effector targets (joint-position-offset actions)"
    joint_names = PANDA_JOINTS
    keyframe = "home"
    reward_terms = ("position_error", "position_error_tanh", "action_rate", "joint_vel")
    policy_terms = (
        ObsTerm(name="joint_pos_rel", dim=7),
        ObsTerm(name="joint_vel", dim=7),
        ObsTerm(name="ee_pos", dim=3),
        ObsTerm(name="target_pos", dim=3),
        ObsTerm(name="last_action", dim=7),
    )
    critic_extra_terms = ()

    def __init__(self, cfg: ArmReachConfig, num_envs: int, **options: Any):
        self.target = torch.zeros(num_envs, 3)  # (N, 3) world frame; read by _refresh
        super().__init__(cfg, num_envs, **options)  # seed, backend, device, ...: see TaskEnv
        self.ee_pos_w = self.sensors32[:, self.backend.sensor_slice("ee_pos")]  # (N, 3) view, refreshed in place
        self.base_pos = torch.zeros(3)  # the arm's base sits at the world origin
        # One uniform draw per reset: joint noise (J) then the target (3).
        noise = torch.full((self.action_dim,), cfg.init_joint_noise)
        self._reset_low = torch.cat([-noise, torch.tensor(cfg.target_low)])  # (J + 3,)
        self._reset_range = torch.cat([noise, torch.tensor(cfg.target_high)]) - self._reset_low  # (J + 3,)
        self._refresh()

    def _refresh(self) -> None:
        super()._refresh()
        self.ee_distance = rew.cost_position_error_l2(self.ee_pos_w, self.target)  # (N,)

    def _obs_sources(self) -> dict[str, Tensor]:
        return {**super()._obs_sources(), "ee_pos": self.ee_pos_w, "target_pos": self.target,
                "base_pos": self.base_pos}

    def _reward_terms(self) -> dict[str, Tensor]:
        return {
            "position_error": self.ee_distance,
            "position_error_tanh": rew.reward_distance_tanh(self.ee_distance, std=self.cfg.tanh_std),
            "action_rate": rew.cost_action_rate_l2(self.action, self.prev_action),
            "joint_vel": rew.cost_joint_vel_l2(self.dq),
        }

    def _reset_worlds(self, ids: Tensor) -> None:
        k = ids.numel()
        sample = self._uniform(k, self._reset_low, self._reset_range)  # (K, J + 3)
        q = (self.default_joint_pos + sample[:, : self.action_dim]).clamp(self.ctrl_low, self.ctrl_high)  # (K, J)
        qpos = self.backend.qpos[ids]  # (K, nq) a copy; velocities restart from the keyframe's (zero)
        qpos[:, self.q_idx] = q.to(torch.float64)
        self._set_joint_targets(q, ids)  # hold the reset pose until the first action arrives
        target = self.base_pos + sample[:, self.action_dim :]  # (K, 3)
        self.target[ids] = target
        self.backend.mocap_pos[ids, 0] = target.to(self.backend.mocap_pos.dtype)
        self.action.index_fill_(0, ids, 0.0)
        self.prev_action.index_fill_(0, ids, 0.0)
        self.backend.reset(ids, qpos=qpos)

    def _episode_metrics(self, ids: Tensor) -> dict[str, Tensor]:
        dist = self.ee_distance[ids]
        return {"ee_distance_final": dist, "success": (dist < self.cfg.success_distance).to(torch.float32)}

    def _task_buffers(self) -> dict[str, Tensor]:
        return {"target": self.target, "action": self.action, "prev_action": self.prev_action}

    @property
    def contract(self) -> DeployContract:
        return self._make_contract(
            "panda",
            {"target_low": list(self.cfg.target_low), "target_high": list(self.cfg.target_high)},
        )


TASKS.register("arm-reach", TaskEntry(ArmReachEnv, ArmReachConfig))
