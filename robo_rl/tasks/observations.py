"""Observation terms: small pure functions of batched state, named as in the deploy contract.

The deploy side (`robo_rl.deploy`) has numpy functions with the same names; a parity test feeds
both the same states. All inputs are (N, ...) tensors; quaternions are (w, x, y, z).
"""

from __future__ import annotations

import torch
from torch import Tensor

from robo_rl.tasks.rotations import quat_rotate_inverse


def base_ang_vel(ang_vel_b: Tensor) -> Tensor:
    """Base angular velocity in the base frame (N, 3); a free joint's qvel[3:6] is already body-frame."""
    return ang_vel_b


def base_lin_vel(base_quat: Tensor, lin_vel_w: Tensor) -> Tensor:
    """Base linear velocity in the base frame (N, 3) from the world-frame velocity (free joint qvel[0:3])."""
    return quat_rotate_inverse(base_quat, lin_vel_w)


def projected_gravity(base_quat: Tensor) -> Tensor:
    """Unit gravity direction in the base frame (N, 3); (0, 0, -1) when level."""
    return quat_rotate_inverse(base_quat, _down(base_quat.device))


_DOWN: dict[torch.device, Tensor] = {}


def _down(device: torch.device) -> Tensor:
    """The world's down direction (3,), one constant per device."""
    if device not in _DOWN:
        _DOWN[device] = torch.tensor([0.0, 0.0, -1.0], device=device)
    return _DOWN[device]


def velocity_command(command: Tensor) -> Tensor:
    """Commanded (v_x, v_y, yaw rate) in the base frame (N, 3)."""
    return command


def joint_pos_rel(joint_pos: Tensor, default_joint_pos: Tensor) -> Tensor:
    """Joint positions relative to the default pose (N, J), policy joint order."""
    return joint_pos - default_joint_pos


def joint_vel(joint_vel_: Tensor) -> Tensor:
    """Joint velocities (N, J)."""
    return joint_vel_


def last_action(action: Tensor) -> Tensor:
    """The previous raw policy action (N, A)."""
    return action


def ee_pos(ee_pos_w: Tensor, base_pos_w: Tensor) -> Tensor:
    """End-effector position relative to the robot base (N, 3) (fixed-base arms: base frame = world axes)."""
    return ee_pos_w - base_pos_w


def target_pos(target_pos_w: Tensor, base_pos_w: Tensor) -> Tensor:
    """Reach target relative to the robot base (N, 3)."""
    return target_pos_w - base_pos_w


def object_pos(object_pos_w: Tensor, base_pos_w: Tensor) -> Tensor:
    """Position of the object to manipulate relative to the robot base (N, 3)."""
    return object_pos_w - base_pos_w
