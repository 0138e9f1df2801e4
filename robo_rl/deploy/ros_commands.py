"""ROS 2 command messages: a (filtered) JointCommand on each command interface, and back.

`encode_command` / `CommandEncoder` build the message of a command interface (`forward_position`,
`joint_trajectory` with velocities, or setpoints for a controller that takes them; `pd_targets`' rows);
`decode_command` reads one into a JointCommand in the robot's joint order (a twin, a recorder). Numpy only, by ROS
field names in any binding (`MessageTypes`, as in `robo_rl.deploy.ros_messages`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from robo_rl.deploy.hardware import HardwareSpec
from robo_rl.deploy.robot import JointCommand, Setpoints
from robo_rl.deploy.ros_interface import COMMAND_INTERFACES, PD_TARGET_ROWS
from robo_rl.deploy.ros_messages import (
    MessageTypes,
    make_duration,
    make_header,
    multi_array_message,
    read_multi_array,
    stamp_seconds,
)


def check_command_interface(interface: str) -> str:
    """`interface` if it is one of COMMAND_INTERFACES; ValueError naming the allowed ones otherwise."""
    if interface not in COMMAND_INTERFACES:
        raise ValueError(f"command_interface {interface!r}: allowed values are {', '.join(COMMAND_INTERFACES)}")
    return interface


def trajectory_velocities(cmd: JointCommand, previous_q: np.ndarray | None, period: float) -> np.ndarray:
    """(J,) velocities of the joint_trajectory point of `cmd`, reached `period` s from now.

    A zero velocity at every point would make a joint trajectory controller bring the arm to rest each tick, so:
    the command's own `dq` when it has one; else the targets' rate of change since the previous command
    ((q - previous_q) / period); zero for a command with no stiffness (PASSIVE, DAMP, ESTOP hold the measured pose:
    come to rest there) and for the first command of a stream.
    """
    q = np.asarray(cmd.q, dtype=np.float64)
    if not np.any(cmd.kp):
        return np.zeros_like(q)
    if np.any(cmd.dq):
        return np.asarray(cmd.dq, dtype=np.float64).copy()
    if previous_q is None or np.shape(previous_q) != q.shape:
        return np.zeros_like(q)
    return (q - previous_q) / period


def encode_command(types: MessageTypes, interface: str, cmd: JointCommand, period: float, *,
                   previous_q: np.ndarray | None = None) -> Any:
    """The message carrying a (filtered) command on `interface`.

    Args:
        types: message classes of the binding.
        interface: one of COMMAND_INTERFACES.
        cmd: command in the robot's joint order (what `SafetyFilter.filter_command` returns).
        period: control period (s), the contract's policy_dt: a joint_trajectory point is reached one period later
            (`time_from_start`), so the controller moves on to the next point without stopping.
        previous_q: (J,) the previous command's targets, for the point's velocities (`trajectory_velocities`);
            `CommandEncoder` keeps it for a stream of commands.

    A command with setpoints (robo_rl.deploy.smoothing) goes out on joint_trajectory as one point per setpoint
    (positions, velocities, accelerations; time_from_start one setpoint period apart); the other interfaces carry its
    target `q` (the last setpoint).
    """
    check_command_interface(interface)
    if interface == "forward_position":
        return multi_array_message(types, cmd.q, ("joints",))
    if interface == "pd_targets":
        rows = np.stack([cmd.q, cmd.dq, cmd.kp, cmd.kd, cmd.tau])  # (5, J)
        return multi_array_message(types, rows, ("command", "joints"))
    if cmd.setpoints is not None:  # a smoothed command: its setpoints, their velocities and accelerations
        sp = cmd.setpoints
        points = [trajectory_point(types, sp.q[i], sp.dq[i], (i + 1) * sp.period, sp.ddq[i]) for i in range(len(sp.q))]
    else:
        points = [trajectory_point(types, cmd.q, trajectory_velocities(cmd, previous_q, period), period)]
    # A zero header stamp means "start now" to joint_trajectory_controller.
    return types.JointTrajectory(header=make_header(types, 0.0), joint_names=list(cmd.joint_names), points=points)


def trajectory_point(types: MessageTypes, q: np.ndarray, dq: np.ndarray, time_from_start: float,
                     ddq: np.ndarray | None = None) -> Any:
    """A JointTrajectoryPoint with positions, velocities, accelerations (empty when None), no effort."""
    return types.JointTrajectoryPoint(
        positions=types.float64_array(np.asarray(q, dtype=np.float64)),
        velocities=types.float64_array(np.asarray(dq, dtype=np.float64)),
        accelerations=types.float64_array(np.zeros(0) if ddq is None else np.asarray(ddq, dtype=np.float64)),
        effort=types.float64_array(np.zeros(0)),
        time_from_start=make_duration(types, time_from_start),
    )


class CommandEncoder:
    """`encode_command` for a stream of commands (one transport's), remembering the previous targets.

    Args:
        types: message classes of the binding.
        interface: one of COMMAND_INTERFACES.
        period: control period (s).
        velocity_limits: (J,) rad/s; joint_trajectory velocities are clipped to them (a rate-limited step can ask
            for more than the joint can do). None: not clipped.
        joint_names: (J,) the joints of `velocity_limits`; a command for some of them (an arm's without the gripper
            that franka_gripper moves) is clipped to its joints' limits. None: commands carry all J, in this order.
    """

    def __init__(self, types: MessageTypes, interface: str, period: float,
                 velocity_limits: np.ndarray | None = None, joint_names: Sequence[str] | None = None):
        self.types = types
        self.interface = check_command_interface(interface)
        self.period = float(period)
        self.velocity_limits = None if velocity_limits is None else np.asarray(velocity_limits, dtype=np.float64)
        self.joint_names = None if joint_names is None else tuple(joint_names)
        self._previous_q: np.ndarray | None = None

    def _limits(self, names: Sequence[str]) -> np.ndarray:
        if self.joint_names is None or tuple(names) == self.joint_names:
            return self.velocity_limits
        return self.velocity_limits[[self.joint_names.index(n) for n in names]]

    def __call__(self, cmd: JointCommand) -> Any:
        msg = encode_command(self.types, self.interface, cmd, self.period, previous_q=self._previous_q)
        if self.interface == "joint_trajectory" and self.velocity_limits is not None and cmd.setpoints is None:
            point = msg.points[0]
            limits = self._limits(cmd.joint_names)
            v = np.clip(np.asarray(point.velocities, dtype=np.float64), -limits, limits)
            point.velocities = self.types.float64_array(v)
        self._previous_q = np.array(cmd.q, dtype=np.float64) if np.any(cmd.kp) else None
        return msg


def decode_command(msg: Any, interface: str, hw: HardwareSpec) -> JointCommand:
    """A command message as a JointCommand, what a driver (here the sim twin) would apply.

    forward_position and joint_trajectory carry positions for the robot's own position loop, which applies them
    with its own gains; the twin's loop is the training's actuator (the hardware file's hw.kp, hw.kd, damping towards
    rest), so a trajectory point's velocities (how the path moves on, for a trajectory controller's interpolation)
    are checked but not applied: the training's PD with MuJoCo gains and a velocity target would drive the arm
    harder than the policy ever saw.
    A joint_trajectory of several points, evenly spaced in time from one period after arrival, is a command with
    setpoints (played one per period, as joint_trajectory_controller samples them).

    Raises:
        ValueError: the message does not match the interface or the robot's joints (one line).
    """
    check_command_interface(interface)
    n = len(hw.joint_names)
    zeros = np.zeros(n)
    if interface == "joint_trajectory":
        return _decode_trajectory(msg, hw)
    labels, data = read_multi_array(msg)
    if interface == "forward_position":
        if data.shape != (n,):
            raise ValueError(f"forward_position: {data.size} values for {n} joints")
        return JointCommand(hw.joint_names, data.copy(), zeros.copy(), hw.kp.copy(), hw.kd.copy(), zeros.copy())
    if data.shape != (len(PD_TARGET_ROWS), n):
        raise ValueError(f"pd_targets: shape {data.shape}, expected ({len(PD_TARGET_ROWS)}, {n}) "
                         f"(rows {', '.join(PD_TARGET_ROWS)})")
    q, dq, kp, kd, tau = (row.copy() for row in data)
    return JointCommand(hw.joint_names, q, dq, kp, kd, tau)


def command_subset(cmd: JointCommand, keep: np.ndarray) -> JointCommand:
    """`cmd` for its joints at positions `keep` (K,) only (every array, setpoints included)."""
    sp = cmd.setpoints
    setpoints = None if sp is None else Setpoints(period=sp.period, q=sp.q[:, keep], dq=sp.dq[:, keep],
                                                  ddq=sp.ddq[:, keep])
    return JointCommand(tuple(cmd.joint_names[i] for i in keep), *(np.asarray(a)[keep] for a in
                                                                  (cmd.q, cmd.dq, cmd.kp, cmd.kd, cmd.tau)),
                        setpoints=setpoints)


def _decode_trajectory(msg: Any, hw: HardwareSpec) -> JointCommand:
    """decode_command for joint_trajectory: (N, J) points in the robot's joint order (ValueError, one line)."""
    names = tuple(str(j) for j in msg.joint_names)
    m, count = len(names), len(msg.points)
    if count == 0:
        raise ValueError("joint_trajectory: no points")
    times = np.array([stamp_seconds(p.time_from_start) for p in msg.points])  # (N,)
    rows = {key: [np.asarray(getattr(p, key), dtype=np.float64) for p in msg.points]
            for key in ("positions", "velocities", "accelerations")}
    for key, allowed in (("positions", (m,)), ("velocities", (0, m)), ("accelerations", (0, m))):
        sizes = {r.size for r in rows[key]}
        if not sizes <= set(allowed) or len(sizes) > 1:
            raise ValueError(f"joint_trajectory: {key} of sizes {sorted(sizes)} for {m} joints")
    period = float(times[0])
    if not period > 0 or (count > 1 and not np.allclose(np.diff(times), period, rtol=1e-6, atol=1e-9)):
        raise ValueError(f"joint_trajectory: points at {times[:3].round(6).tolist()}... s: the twin plays points "
                         "evenly spaced from one period after arrival")
    n = len(hw.joint_names)
    idx = hw.index_of(names)

    def robot_order(key: str, fill: float) -> np.ndarray:  # (N, J); joints left out stay `fill`
        out = np.full((count, n), fill)
        if rows[key][0].size:
            out[:, idx] = np.stack(rows[key])
        return out

    q, dq, ddq = robot_order("positions", np.nan), robot_order("velocities", 0.0), robot_order("accelerations", 0.0)
    setpoints = Setpoints(period=period, q=q, dq=dq, ddq=ddq) if count > 1 else None
    # one point: its velocities say how the path moves on (a trajectory controller's interpolation), not a velocity
    # target for the twin's servo (the training's PD with a velocity target would drive harder than the policy saw)
    target_dq = dq[-1].copy() if count > 1 else np.zeros(n)
    return JointCommand(hw.joint_names, q[-1].copy(), target_dq, hw.kp.copy(), hw.kd.copy(), np.zeros(n),
                        setpoints=setpoints)
