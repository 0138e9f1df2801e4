"""Reward and cost terms: pure functions of batched state returning (N,) tensors.

`reward_*` terms are positive goods, `cost_*` terms are penalties (given negative scales in the
task config). The task sums scale * term * dt.
"""

from __future__ import annotations

import torch
from torch import Tensor


def lin_vel_xy_error(lin_vel_b: Tensor, command: Tensor) -> Tensor:
    """Planar velocity tracking error cmd_xy - v_xy (N, 2), velocities in the base frame."""
    return command[:, :2] - lin_vel_b[:, :2]


def reward_track_lin_vel_xy_exp(error_xy: Tensor, *, sigma: float) -> Tensor:
    """exp(-|cmd_xy - v_xy|^2 / sigma^2) of the planar tracking error (N, 2) from `lin_vel_xy_error`."""
    return torch.exp(torch.linalg.vecdot(error_xy, error_xy).mul_(-1.0 / sigma**2))


def ang_vel_z_error(ang_vel_b: Tensor, command: Tensor) -> Tensor:
    """Yaw-rate tracking error cmd_yaw_rate - w_z (N,), angular velocity in the base frame."""
    return command[:, 2] - ang_vel_b[:, 2]


def reward_track_ang_vel_z_exp(error_z: Tensor, *, sigma: float) -> Tensor:
    """exp(-(cmd_yaw_rate - w_z)^2 / sigma^2) of the yaw-rate error (N,) from `ang_vel_z_error`."""
    return torch.exp(error_z.square().mul_(-1.0 / sigma**2))


def cost_lin_vel_z_l2(lin_vel_b: Tensor) -> Tensor:
    return lin_vel_b[:, 2].square()


def cost_ang_vel_xy_l2(ang_vel_b: Tensor) -> Tensor:
    xy = ang_vel_b[:, :2]
    return torch.linalg.vecdot(xy, xy)


def cost_flat_orientation_l2(projected_gravity: Tensor) -> Tensor:
    """Tilt: squared xy components of gravity seen from the base."""
    xy = projected_gravity[:, :2]
    return torch.linalg.vecdot(xy, xy)


def cost_joint_torques_l2(torque: Tensor) -> Tensor:
    return torch.linalg.vecdot(torque, torque)


def cost_joint_acc_l2(joint_vel: Tensor, prev_joint_vel: Tensor, *, dt: float) -> Tensor:
    dv = joint_vel - prev_joint_vel
    return torch.linalg.vecdot(dv, dv).mul_(1.0 / dt**2)


def cost_joint_vel_l2(joint_vel: Tensor) -> Tensor:
    return torch.linalg.vecdot(joint_vel, joint_vel)


def cost_action_rate_l2(action: Tensor, prev_action: Tensor) -> Tensor:
    rate = action - prev_action
    return torch.linalg.vecdot(rate, rate)


def cost_position_error_l2(pos: Tensor, target: Tensor) -> Tensor:
    """Euclidean distance |pos - target| (N,)."""
    return torch.linalg.vector_norm(pos - target, dim=-1)


def reward_distance_tanh(distance: Tensor, *, std: float) -> Tensor:
    """1 - tanh(distance / std) for distances (N,): a sharp bonus near a target."""
    return torch.tanh(distance * (1.0 / std)).neg_().add_(1.0)


def reward_feet_air_time(air_time: Tensor, first_contact: Tensor, moving: Tensor, *, threshold: float) -> Tensor:
    """Sum over feet touching down this step of (air time - threshold), only while motion is commanded.

    Args:
        air_time: (N, F) seconds each foot spent in the air before this step.
        first_contact: (N, F) bool, feet that touched down this step.
        moving: (N,) bool, true when the command asks for motion.
    """
    return ((air_time - threshold) * first_contact).sum(-1) * moving


def pd_torque(
    q_target: Tensor, q: Tensor, dq: Tensor, *, kp: Tensor, kd: Tensor, limit: Tensor
) -> Tensor:
    """Torque of a position actuator kp (q* - q) - kd dq, clipped to +-limit (N, J)."""
    return torch.addcmul(kp * (q_target - q), kd, dq, value=-1.0).clamp_(-limit, limit)
