"""Observation terms of a floating base (legged robots): IMU readings, base velocity, the velocity command.

The robot side needs `kind: legged` hardware (an IMU); quaternions are (w, x, y, z).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from robo_rl.terms.command_ranges import Range, interval
from robo_rl.terms.records import ObservationTermRecord, register_observation
from robo_rl.terms.rotations import quat_rotate_inverse, quat_rotate_inverse_np

DOWN = (0.0, 0.0, -1.0)
"""The world's down direction."""
_DOWN = np.array(DOWN)


def identity(value: Any) -> Any:
    """A source observed as it is (both sides)."""
    return value


def projected_gravity(base_quat: Any) -> Any:
    """Unit gravity direction in the base frame (N, 3); (0, 0, -1) when level."""
    return quat_rotate_inverse(base_quat, base_quat.new_tensor(DOWN))


def projected_gravity_np(base_quat: np.ndarray) -> np.ndarray:
    """Unit gravity direction in the base frame (3,)."""
    return quat_rotate_inverse_np(base_quat, _DOWN)


def base_lin_vel_b(base_quat: Any, lin_vel_w: Any) -> Any:
    """Base linear velocity in the base frame (N, 3) from the world-frame velocity (a free joint's qvel[0:3]):
    the `base_lin_vel_b` source of a simulated floating base."""
    return quat_rotate_inverse(base_quat, lin_vel_w)


_VELOCITY_KEYS = ("lin_vel_x", "lin_vel_y", "ang_vel_z")


def velocity_command_range(extra: dict[str, Any]) -> Range | None:
    """Trained range of (v_x, v_y, yaw rate) from extra `lin_vel_x`, `lin_vel_y`, `ang_vel_z` ([low, high] each)."""
    if not all(k in extra for k in _VELOCITY_KEYS):
        return None
    intervals = [interval(extra, key) for key in _VELOCITY_KEYS]
    return tuple(lo for lo, _ in intervals), tuple(hi for _, hi in intervals)


def velocity_command_neutral(trained: Range | None) -> np.ndarray:
    """Stand still (zero velocity), clamped into the trained range."""
    neutral = np.zeros(3)
    return neutral if trained is None else np.clip(neutral, trained[0], trained[1])


register_observation(ObservationTermRecord(
    name="base_ang_vel", inputs=("base_ang_vel_b",), torch=identity, numpy=identity, dim=3,
    framework_names=("base_ang_vel",),
))
register_observation(ObservationTermRecord(
    name="base_lin_vel", inputs=("base_lin_vel_b",), torch=identity, numpy=identity, dim=3,
    framework_names=("base_lin_vel",),
))
register_observation(ObservationTermRecord(
    name="projected_gravity", inputs=("base_quat",), torch=projected_gravity, numpy=projected_gravity_np, dim=3,
    framework_names=("projected_gravity",),
))
register_observation(ObservationTermRecord(
    name="velocity_command", inputs=("velocity_command",), torch=identity, numpy=identity, dim=3, command=True,
    command_range=velocity_command_range, command_neutral=velocity_command_neutral,
    framework_names=("generated_commands",),  # when the command is a 3-D twist (its size is checked)
))
