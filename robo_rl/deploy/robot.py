"""What the robot reports and what it is sent (the RobotInterface contract of DESIGN.md), and how it is reached:
the open registry of transports."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from robo_rl.core.registry import Registry
from robo_rl.deploy.hardware import HardwareSpec


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
        imu_acc: (3,) accelerometer reading in the base frame (m/s^2): the specific force, acceleration minus
            gravity (a robot at rest reads about +9.81 along the base's up axis), or None if the robot reports none.
        foot_force: (F,) contact normal force of each foot (N; the robot's own units on hardware whose foot sensors
            are uncalibrated) in the hardware file's `feet` order, or None if the robot reports none.
        base_lin_vel: (3,) base linear velocity in the base frame if the robot or an estimator provides it
            (`robo_rl.deploy.estimation` fills it from imu_acc, foot_force and the leg kinematics).
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
    imu_acc: np.ndarray | None = None
    foot_force: np.ndarray | None = None
    base_lin_vel: np.ndarray | None = None
    ee_pos: np.ndarray | None = None
    object_pos: np.ndarray | None = None
    images: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass(frozen=True)
class Setpoints:
    """The setpoints a controller that takes them faster than the policy ticks plays, one per `period`, from the moment
    the command arrives (robo_rl.deploy.smoothing); the command's joint order.

    Attributes:
        period: time between two setpoints (s).
        q, dq, ddq: (N, J) positions, velocities and accelerations, the first one period after arrival.
    """

    period: float
    q: np.ndarray
    dq: np.ndarray
    ddq: np.ndarray


@dataclass(frozen=True)
class JointCommand:
    """Low-level command in the robot's joint order: tau = kp (q - q_meas) + kd (dq - dq_meas) + tau_ff.

    Attributes:
        joint_names: (J,) names in the order of every array below.
        q, dq, kp, kd, tau: (J,) position target, velocity target, gains and feed-forward torque.
        setpoints: for a controller that takes setpoints (hardware controller.setpoint_rate_hz): the smoothed path
            to q, played one setpoint per period; None: q applies at once.
    """

    joint_names: tuple[str, ...]
    q: np.ndarray
    dq: np.ndarray
    kp: np.ndarray
    kd: np.ndarray
    tau: np.ndarray
    setpoints: Setpoints | None = None


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


class RobotWrapper:
    """A robot whose states something fills in on the way (an estimate, the forward kinematics): commands, `close`
    and its name pass through to the wrapped `robot`; subclasses define `read_state`."""

    def __init__(self, robot: RobotInterface):
        self.robot = robot

    def send_command(self, command: JointCommand) -> None:
        self.robot.send_command(command)

    def close(self) -> None:
        self.robot.close()

    def __str__(self) -> str:
        return str(self.robot)


def take_control(robot: RobotInterface) -> None:
    """Ask the robot's own controller to hand the motors over, if it has one (Unitree's sport mode); before the
    first command of a session that sends commands (never in a dry run). ValueError (one line) when it refuses.

    A transport's robot offers this as an optional `take_control()` method; robots without one need nothing.
    """
    hand_over = getattr(robot, "take_control", None)
    if hand_over is not None:
        hand_over()


# ---------------------------------------------------------------------------------------------- transports
@dataclass(frozen=True, kw_only=True)
class ConnectOptions:
    """What a transport may use to connect (each transport reads the fields it knows; see Transport.options)."""

    control_dt: float
    """Control period (s): the policy's."""
    realtime: bool = True
    """False: the robot advances one control period per command (the sim twin's fast-forward rehearsal)."""
    physics_dt: float | None = None
    """The contract's physics time step (s): a simulated twin uses it, as training did."""
    latency_s: float = 0.0
    """Simulated command latency (s)."""
    noise_std: float = 0.0
    """Simulated sensor noise std."""
    seed: int = 0
    """Seed of simulated noise."""
    domain_id: int = 0
    """DDS domain (ROS_DOMAIN_ID)."""
    command_interface: str | None = None
    """ROS 2 command interface (forward_position, joint_trajectory, pd_targets); None: the hardware file's."""
    needs_ee: bool = False
    """The policy observes the end-effector position: wait for it too."""
    cameras: tuple[tuple[str, int, int], ...] = ()
    """(name, height, width) of each camera the policy reads (contract inputs `image:<camera>`): a simulated twin
    renders them; a real robot's transport brings the frames of its cameras."""
    render: Mapping[str, Any] | None = None
    """How training drew the policy's images (contract extra.render), for a simulated twin to draw them alike."""
    scene: str | None = None
    """A simulated twin's MJCF instead of the hardware file's transport.sim.model (e.g. a task's own scene)."""


class OperatorLink(Protocol):
    """A transport's own operator channel (e.g. DDS topics): words in, diagnostics and events out."""

    hint: str
    """One line saying how the operator reaches the robot through it (printed at start)."""

    def requests(self) -> list[str]:
        """Operator words received since the last call, oldest first."""
        ...

    def publish_diagnostics(self, stamp: float, level: str, message: str, values: Mapping[str, object]) -> None: ...

    def publish_event(self, text: str) -> None: ...

    def publish_record(self, observation: np.ndarray | None, action: np.ndarray, command: JointCommand,
                       outcome: Any | None = None) -> None: ...


@dataclass(frozen=True, kw_only=True)
class Transport:
    """How the deploy core reaches a robot: registered in TRANSPORTS under its name, where it is defined."""

    connect: Callable[[HardwareSpec, ConnectOptions], RobotInterface]
    """Open the connection (ValueError, one line, for a bad option or setting)."""
    rehearsal: bool = False
    """True for a twin only: POLICY may start on its own once READY, and realtime=False (fast-forward) is allowed.
    False (a real robot): POLICY starts only on the operator's explicit `start`."""
    options: frozenset[str] = frozenset()
    """ConnectOptions / command-line options it uses beyond control_dt, realtime, physics_dt and needs_ee."""
    operator_link: Callable[[RobotInterface, Any], OperatorLink] | None = None
    """(robot as connected, PolicyRuntime) -> the transport's operator channel; None: stdin only."""
    serve_twin: Callable[..., int] | None = None
    """`robo-rl twin --transport NAME`: serve the MuJoCo twin of a hardware file on this transport."""
    help: str = ""
    """One line for `--help` and messages."""


TRANSPORTS: Registry[Transport] = Registry("transport", field="--transport", entry_type=Transport)
"""Transports by name. A built-in one (robo_rl.deploy.transports.<name>) registers itself when its module is
imported, which `robo_rl.deploy.session.transport` does only when that name is chosen (the twin needs mujoco,
DDS cyclonedds); others register from anywhere (a test, a user's script) before they are chosen."""
