"""What the robot reports and what it is sent: the RobotInterface contract of DESIGN.md."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np


@dataclass(frozen=True)
class RobotState:
    """One reading of the robot, joints in the robot's own order (map them by name, never by index).

    Attributes:
        stamp: time the robot measured this state (s, robot clock as sent in the message header).
        received: time this process received it (s, time.monotonic()).
        joint_names: (J,) names in the order of q, dq, tau.
        q, dq, tau: (J,) joint positions (rad), velocities (rad/s), measured torques (N m).
        imu_quat: (4,) base orientation (w, x, y, z) in the world, or None for fixed-base robots.
        imu_gyro: (3,) base angular velocity in the base frame (rad/s), or None.
        base_lin_vel: (3,) base linear velocity in the base frame if an estimator provides it.
        ee_pos: (3,) end-effector position in the robot base frame, for arms.
        object_pos: (3,) position of the object being manipulated in the robot base frame (from perception,
            or the sim twin's model), for arms that manipulate.
        images: camera name -> (H, W, 3) uint8 frame.
    """

    stamp: float
    received: float
    joint_names: tuple[str, ...]
    q: np.ndarray
    dq: np.ndarray
    tau: np.ndarray | None = None
    imu_quat: np.ndarray | None = None
    imu_gyro: np.ndarray | None = None
    base_lin_vel: np.ndarray | None = None
    ee_pos: np.ndarray | None = None
    object_pos: np.ndarray | None = None
    images: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass(frozen=True)
class JointCommand:
    """Low-level command in the robot's joint order: tau = kp (q - q_meas) + kd (dq - dq_meas) + tau_ff.

    Attributes:
        joint_names: (J,) names in the order of every array below.
        q, dq, kp, kd, tau: (J,) position target, velocity target, gains and feed-forward torque.
    """

    joint_names: tuple[str, ...]
    q: np.ndarray
    dq: np.ndarray
    kp: np.ndarray
    kd: np.ndarray
    tau: np.ndarray


class RobotInterface(Protocol):
    """A robot (real, DDS, ROS 2 node, or the MuJoCo twin) as the deploy core sees it."""

    def read_state(self) -> RobotState:
        """The newest state; may be stale if the robot stopped sending (the watchdog decides)."""
        ...

    def send_command(self, command: JointCommand) -> None:
        """Send one low-level command."""
        ...

    def close(self) -> None:
        ...
