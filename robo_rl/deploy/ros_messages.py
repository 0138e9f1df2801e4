"""ROS 2 message adapters: RobotState / JointCommand <-> sensor_msgs, geometry_msgs, std_msgs, trajectory_msgs.

Numpy only. The adapters read and build messages by their ROS 2 field names, which are the same in
every binding: rclpy's generated classes (the node in ros_ws), `rosbags`' dataclasses (the tests) and
the Cyclone DDS IDL structs of `transports/dds.py`. Each binding hands in its classes as a
`MessageTypes`; nothing here imports any of them.

Joints are matched by name: a JointState may list them in any order and may carry extra joints.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from robo_rl.deploy.hardware import HardwareSpec
from robo_rl.deploy.robot import RobotState


def _as_list(values: np.ndarray) -> list[float]:
    return [float(v) for v in np.asarray(values).reshape(-1)]


@dataclass(frozen=True)
class MessageTypes:
    """The message classes of one ROS 2 binding, by ROS name (constructed with keyword arguments).

    `float64_array` / `float32_array` turn a numpy array into what the binding stores in a float64[] /
    float32[] field (a list for the DDS structs, an ndarray for rosbags, either for rclpy).
    """

    Time: Any
    Duration: Any
    Header: Any
    JointState: Any
    Imu: Any
    Quaternion: Any
    Vector3: Any
    Twist: Any
    Point: Any
    PointStamped: Any
    Pose: Any
    PoseStamped: Any
    MultiArrayDimension: Any
    MultiArrayLayout: Any
    Float64MultiArray: Any
    Float32MultiArray: Any
    JointTrajectory: Any
    JointTrajectoryPoint: Any
    Bool: Any
    String: Any
    KeyValue: Any
    DiagnosticStatus: Any
    DiagnosticArray: Any
    float64_array: Callable[[np.ndarray], Any] = _as_list
    float32_array: Callable[[np.ndarray], Any] = _as_list
    byte_value: Callable[[int], Any] = int
    """What a `byte` field holds: an int here and in rosbags, bytes of length 1 in rclpy."""


# ---------------------------------------------------------------------------------------------- time
def stamp_seconds(stamp: Any) -> float:
    """builtin_interfaces/Time (sec, nanosec) -> seconds."""
    return float(stamp.sec) + 1e-9 * float(stamp.nanosec)


def time_fields(seconds: float) -> tuple[int, int]:
    """Seconds -> (sec, nanosec) with 0 <= nanosec < 1e9 (ROS 2's convention, also for negative times).

    Raises:
        ValueError: a non-finite time.
    """
    if not math.isfinite(seconds):
        raise ValueError(f"time {seconds!r}: must be finite")
    total = round(seconds * 1e9)
    sec, nanosec = divmod(total, 1_000_000_000)
    return int(sec), int(nanosec)


def make_time(types: MessageTypes, seconds: float) -> Any:
    sec, nanosec = time_fields(seconds)
    return types.Time(sec=sec, nanosec=nanosec)


def make_duration(types: MessageTypes, seconds: float) -> Any:
    sec, nanosec = time_fields(seconds)
    return types.Duration(sec=sec, nanosec=nanosec)


def make_header(types: MessageTypes, seconds: float, frame_id: str = "") -> Any:
    return types.Header(stamp=make_time(types, seconds), frame_id=frame_id)


# ---------------------------------------------------------------------------------------------- state
def joint_state_message(types: MessageTypes, names: Sequence[str], q: np.ndarray, dq: np.ndarray,
                        tau: np.ndarray | None, stamp: float) -> Any:
    """sensor_msgs/JointState with name, position, velocity and effort (empty when tau is None)."""
    return types.JointState(
        header=make_header(types, stamp),
        name=list(names),
        position=types.float64_array(np.asarray(q, dtype=np.float64)),
        velocity=types.float64_array(np.asarray(dq, dtype=np.float64)),
        effort=types.float64_array(np.zeros(0) if tau is None else np.asarray(tau, dtype=np.float64)),
    )


def read_joint_state(msg: Any) -> tuple[tuple[str, ...], np.ndarray, np.ndarray, np.ndarray | None, float]:
    """(names, q (J,), dq (J,), tau (J,) or None, stamp) of a JointState.

    Raises:
        ValueError: position or velocity does not hold one value per name (ROS allows empty velocity;
            the safety filter needs it, so it is refused), or effort is neither empty nor one per name.
    """
    names = tuple(str(n) for n in msg.name)
    q = np.asarray(msg.position, dtype=np.float64)
    dq = np.asarray(msg.velocity, dtype=np.float64)
    tau = np.asarray(msg.effort, dtype=np.float64)
    n = len(names)
    if q.shape != (n,) or dq.shape != (n,):
        raise ValueError(f"joint_states: {q.size} positions and {dq.size} velocities for {n} names "
                         f"(one per name needed)")
    if tau.size not in (0, n):
        raise ValueError(f"joint_states: {tau.size} efforts for {n} names (0 or one per name allowed)")
    return names, q, dq, (tau if tau.size else None), stamp_seconds(msg.header.stamp)


def imu_message(types: MessageTypes, quat_wxyz: np.ndarray, gyro: np.ndarray, stamp: float,
                frame_id: str = "base") -> Any:
    """sensor_msgs/Imu with orientation and angular velocity; linear acceleration marked unknown.

    The covariances follow sensor_msgs' convention: zeros = unknown; element 0 = -1 = not provided
    (for the acceleration, which the twin does not report).
    """
    w, x, y, z = (float(v) for v in quat_wxyz)
    unknown = np.zeros(9)
    missing = np.zeros(9)
    missing[0] = -1.0
    return types.Imu(
        header=make_header(types, stamp, frame_id),
        orientation=types.Quaternion(x=x, y=y, z=z, w=w),
        orientation_covariance=types.float64_array(unknown),
        angular_velocity=types.Vector3(x=float(gyro[0]), y=float(gyro[1]), z=float(gyro[2])),
        angular_velocity_covariance=types.float64_array(unknown),
        linear_acceleration=types.Vector3(x=0.0, y=0.0, z=0.0),
        linear_acceleration_covariance=types.float64_array(missing),
    )


def read_imu(msg: Any, order: str) -> tuple[np.ndarray, np.ndarray, float]:
    """(quaternion (4,) in `order` ("wxyz" or "xyzw"), angular velocity (3,) rad/s, stamp) of an Imu."""
    o = msg.orientation
    quat = (o.w, o.x, o.y, o.z) if order == "wxyz" else (o.x, o.y, o.z, o.w)
    g = msg.angular_velocity
    return (np.array(quat, dtype=np.float64), np.array((g.x, g.y, g.z), dtype=np.float64),
            stamp_seconds(msg.header.stamp))


def point_stamped_message(types: MessageTypes, position: np.ndarray, stamp: float, frame_id: str = "base") -> Any:
    return types.PointStamped(header=make_header(types, stamp, frame_id),
                              point=types.Point(x=float(position[0]), y=float(position[1]), z=float(position[2])))


def read_point(msg: Any) -> np.ndarray:
    """(3,) position of a PointStamped (its `point`) or a PoseStamped (its `pose.position`)."""
    p = msg.point if hasattr(msg, "point") else msg.pose.position
    return np.array((p.x, p.y, p.z), dtype=np.float64)


# ---------------------------------------------------------------------------------------------- operator inputs
def twist_message(types: MessageTypes, linear: np.ndarray, angular: np.ndarray) -> Any:
    return types.Twist(linear=types.Vector3(x=float(linear[0]), y=float(linear[1]), z=float(linear[2])),
                       angular=types.Vector3(x=float(angular[0]), y=float(angular[1]), z=float(angular[2])))


def read_twist(msg: Any) -> tuple[np.ndarray, np.ndarray]:
    """(linear (3,), angular (3,)) of a Twist."""
    lin, ang = msg.linear, msg.angular
    return np.array((lin.x, lin.y, lin.z), dtype=np.float64), np.array((ang.x, ang.y, ang.z), dtype=np.float64)


def velocity_command(msg: Any) -> np.ndarray:
    """(3,) velocity command (v_x, v_y, yaw rate) of a cmd_vel Twist, as the policies' velocity_command."""
    lin, ang = read_twist(msg)
    return np.array((lin[0], lin[1], ang[2]))


def pose_stamped_message(types: MessageTypes, position: np.ndarray, quat_wxyz: np.ndarray, stamp: float,
                         frame_id: str = "base") -> Any:
    w, x, y, z = (float(v) for v in quat_wxyz)
    return types.PoseStamped(
        header=make_header(types, stamp, frame_id),
        pose=types.Pose(position=types.Point(x=float(position[0]), y=float(position[1]), z=float(position[2])),
                        orientation=types.Quaternion(x=x, y=y, z=z, w=w)),
    )


def bool_message(types: MessageTypes, value: bool) -> Any:
    return types.Bool(data=bool(value))


def string_message(types: MessageTypes, text: str) -> Any:
    return types.String(data=str(text))


# ---------------------------------------------------------------------------------------------- arrays
def multi_array_message(types: MessageTypes, values: np.ndarray, labels: Sequence[str], *,
                        float32: bool = False) -> Any:
    """Float64MultiArray (or Float32MultiArray) of a row-major array, one labelled dim per axis."""
    arr = np.asarray(values, dtype=np.float32 if float32 else np.float64)
    if arr.ndim != len(labels):
        raise ValueError(f"multi-array of shape {arr.shape} needs {arr.ndim} labels, got {len(labels)}")
    dims = []
    for axis, label in enumerate(labels):
        stride = int(np.prod(arr.shape[axis:]))
        dims.append(types.MultiArrayDimension(label=label, size=int(arr.shape[axis]), stride=stride))
    layout = types.MultiArrayLayout(dim=dims, data_offset=0)
    if float32:
        return types.Float32MultiArray(layout=layout, data=types.float32_array(arr.reshape(-1)))
    return types.Float64MultiArray(layout=layout, data=types.float64_array(arr.reshape(-1)))


POLICY_STEP_LABEL = "obs+action+outcome"
"""The one dimension's label of a ~/policy_step message."""
OUTCOME_SIZE = 4
"""reward, done, terminated, success: the values a ~/policy_step carries after the observation and the actions."""


@dataclass(frozen=True)
class StepOutcome:
    """What the robot-side reward modules made of the command sent one tick before a ~/policy_step (the names of
    `robo-rl record`'s next.* features)."""

    reward: float
    done: bool
    terminated: bool
    success: bool


def policy_step_message(types: MessageTypes, observation: np.ndarray, action: np.ndarray,
                        outcome: Any | None = None) -> Any:
    """~/policy_step: Float32MultiArray of the observation (O,), the raw actions (A,) and the outcome the reward
    modules scored this tick (a RewardStep: reward, done, terminal, success; four NaN when none was scored)."""
    scored = ([np.nan] * OUTCOME_SIZE if outcome is None else
              [outcome.reward, float(outcome.done), float(outcome.terminal), float(outcome.success)])
    values = np.concatenate([np.asarray(observation, np.float32).reshape(-1),
                             np.asarray(action, np.float32).reshape(-1), np.asarray(scored, np.float32)])
    return multi_array_message(types, values, (POLICY_STEP_LABEL,), float32=True)


def read_policy_step(msg: Any, obs_dim: int, action_dim: int) -> tuple[np.ndarray, np.ndarray, StepOutcome | None]:
    """(observation (O,), raw actions (A,)) float32 and the scored outcome (None: none) of a ~/policy_step message;
    ValueError (one line) when it is not one of O + A + 4 values (another policy's)."""
    labels, values = read_multi_array(msg)
    if labels not in ((), (POLICY_STEP_LABEL,)) or values.size != obs_dim + action_dim + OUTCOME_SIZE:
        raise ValueError(f"policy_step of {values.size} values {labels}: expected {obs_dim} observation + "
                         f"{action_dim} action + {OUTCOME_SIZE} outcome values (another policy than the recorder's?)")
    values = values.astype(np.float32)
    o = values[obs_dim + action_dim:]
    outcome = None if np.isnan(o).any() else StepOutcome(float(o[0]), bool(o[1]), bool(o[2]), bool(o[3]))
    return values[:obs_dim], values[obs_dim:obs_dim + action_dim], outcome


def read_multi_array(msg: Any) -> tuple[tuple[str, ...], np.ndarray]:
    """(dim labels, data reshaped to the layout's sizes) of a Float64/Float32MultiArray.

    Raises:
        ValueError: the data length does not match the layout (an empty layout means a flat array).
    """
    data = np.asarray(msg.data, dtype=np.float64)
    dims = list(msg.layout.dim)
    if not dims:
        return (), data
    shape = tuple(int(d.size) for d in dims)
    offset = int(msg.layout.data_offset)
    if data.size != offset + int(np.prod(shape)):
        raise ValueError(f"multi-array layout {shape} (offset {offset}) does not match {data.size} values")
    return tuple(str(d.label) for d in dims), data[offset:].reshape(shape)


# ---------------------------------------------------------------------------------------------- diagnostics
DIAGNOSTIC_LEVELS = {"ok": 0, "warn": 1, "error": 2, "stale": 3}
"""diagnostic_msgs/DiagnosticStatus levels (bytes 0-3)."""


def diagnostic_array_message(types: MessageTypes, stamp: float, name: str, level: str, message: str,
                             values: Mapping[str, object], hardware_id: str = "") -> Any:
    """A DiagnosticArray holding one DiagnosticStatus with `values` as key-value strings."""
    status = types.DiagnosticStatus(
        level=types.byte_value(DIAGNOSTIC_LEVELS[level]),
        name=name, message=message, hardware_id=hardware_id,
        values=[types.KeyValue(key=str(k), value=str(v)) for k, v in values.items()],
    )
    return types.DiagnosticArray(header=make_header(types, stamp), status=[status])


def read_diagnostics(msg: Any) -> dict[str, str]:
    """Key-value pairs of every status in a DiagnosticArray (later statuses win on equal keys)."""
    out: dict[str, str] = {}
    for status in msg.status:
        out.update({str(kv.key): str(kv.value) for kv in status.values})
    return out


# ---------------------------------------------------------------------------------------------- a twin's state
def twin_state_messages(types: MessageTypes, state: RobotState, hw: HardwareSpec) -> dict[str, Any]:
    """What a robot (or its twin) publishes for one state, by role: "joints" (JointState), "imu" (Imu, when the
    state has an IMU), "ee" (PointStamped, when it has an end-effector position)."""
    out = {"joints": joint_state_message(types, state.joint_names, state.q, state.dq, state.tau, state.stamp)}
    if state.imu_quat is not None and state.imu_gyro is not None:
        q = np.asarray(state.imu_quat)
        wxyz = q if hw.quaternion_order == "wxyz" else np.array([q[3], q[0], q[1], q[2]])
        out["imu"] = imu_message(types, wxyz, state.imu_gyro, state.stamp)
    if state.ee_pos is not None:
        out["ee"] = point_stamped_message(types, state.ee_pos, state.stamp)
    return out


# ---------------------------------------------------------------------------------------------- assembling state
class StateAssembler:
    """The newest joint_states, imu and ee_position messages as one RobotState; thread-safe.

    Subscription callbacks (rclpy, Cyclone DDS listeners) feed messages in; the control loop calls
    `latest`. The state's `received` is the receive time of its oldest required part, so a silent IMU
    makes the whole state stale and trips the watchdog. A malformed message is dropped and counted in
    `rejected` (the state then ages until the watchdog acts). A gripper with its own node (franka_gripper) reports
    its fingers on a joint_states of its own: `on_gripper_state` adds them to the arm's joints (their age does not
    age the state: the gripper reports at 50 Hz and is not the arm's controller).

    Args:
        hw: the robot (quaternion order).
        needs_imu: the state is incomplete (None) until an IMU message arrived.
        needs_ee: the state is incomplete until an ee_position message arrived.
        clock: receive-time source (s); time.monotonic like the Controller's.
    """

    def __init__(self, hw: HardwareSpec, *, needs_imu: bool, needs_ee: bool,
                 clock: Callable[[], float] = time.monotonic):
        self.hw = hw
        self.needs_imu = needs_imu
        self.needs_ee = needs_ee
        self._clock = clock
        self._lock = threading.Lock()
        self._joints: tuple | None = None  # (names, q, dq, tau, stamp, received)
        self._imu: tuple | None = None  # (quat, gyro, received, acc or None)
        self._foot_force: np.ndarray | None = None  # (F,) with the joints (a vendor's low-level state)
        self._ee: tuple | None = None  # (position, received)
        self._gripper: tuple | None = None  # (names, q, dq) of a gripper's own joint_states
        self.needs_gripper = hw.gripper is not None
        self.received_count: Counter[str] = Counter()
        self.rejected: Counter[str] = Counter()
        self.last_error: str | None = None

    def _reject(self, what: str, exc: Exception) -> None:
        with self._lock:
            self.rejected[what] += 1
            self.last_error = f"{what}: {exc}"

    def set_joints(self, names: tuple[str, ...], q: np.ndarray, dq: np.ndarray, tau: np.ndarray | None,
                   stamp: float, received: float | None = None) -> None:
        """Store a joint reading (already decoded, e.g. from a vendor message)."""
        with self._lock:
            self._joints = (names, q, dq, tau, stamp, self._clock() if received is None else received)
            self.received_count["joint_states"] += 1

    def set_imu(self, quat: np.ndarray, gyro: np.ndarray, received: float | None = None, *,
                acc: np.ndarray | None = None) -> None:
        """Store an IMU reading: quaternion (4,) in the hardware's order, gyro (3,) and accelerometer (3,) (if the
        robot reports it) in the base frame."""
        with self._lock:
            self._imu = (quat, gyro, self._clock() if received is None else received, acc)
            self.received_count["imu"] += 1

    def set_foot_force(self, force: np.ndarray) -> None:
        """Store the foot contact forces (F,) that came with the joints (hardware `feet` order)."""
        with self._lock:
            self._foot_force = force

    def on_joint_state(self, msg: Any, received: float | None = None) -> None:
        try:
            names, q, dq, tau, stamp = read_joint_state(msg)
        except (ValueError, TypeError, AttributeError) as exc:
            self._reject("joint_states", exc)
            return
        self.set_joints(names, q, dq, tau, stamp, received)

    def on_imu(self, msg: Any, received: float | None = None) -> None:
        try:
            quat, gyro, _ = read_imu(msg, self.hw.quaternion_order)
        except (ValueError, TypeError, AttributeError) as exc:
            self._reject("imu", exc)
            return
        self.set_imu(quat, gyro, received)

    def on_gripper_state(self, msg: Any, received: float | None = None) -> None:
        """A gripper node's joint_states (franka_gripper: both fingers at width / 2, velocities 0)."""
        try:
            names, q, dq, _, _ = read_joint_state(msg)
        except (ValueError, TypeError, AttributeError) as exc:
            self._reject("gripper joint_states", exc)
            return
        with self._lock:
            self._gripper = (names, q, dq)
            self.received_count["gripper_joint_states"] += 1

    def on_ee_position(self, msg: Any, received: float | None = None) -> None:
        try:
            pos = read_point(msg)
        except (ValueError, TypeError, AttributeError) as exc:
            self._reject("ee_position", exc)
            return
        with self._lock:
            self._ee = (pos, self._clock() if received is None else received)
            self.received_count["ee_position"] += 1

    def latest(self) -> RobotState | None:
        """The newest complete state, or None until every required part has arrived once."""
        with self._lock:
            joints, imu, ee, foot_force, gripper = self._joints, self._imu, self._ee, self._foot_force, self._gripper
        if joints is None or (self.needs_imu and imu is None) or (self.needs_ee and ee is None) or \
                (self.needs_gripper and gripper is None):
            return None
        names, q, dq, tau, stamp, received = joints
        if gripper is not None:  # the fingers the arm's joint_states lack, appended
            extra = [i for i, n in enumerate(gripper[0]) if n not in names]
            names = names + tuple(gripper[0][i] for i in extra)
            q, dq = np.concatenate([q, gripper[1][extra]]), np.concatenate([dq, gripper[2][extra]])
            tau = None if tau is None else np.concatenate([tau, np.zeros(len(extra))])
        if imu is not None:
            received = min(received, imu[2]) if self.needs_imu else received
        if ee is not None and self.needs_ee:
            received = min(received, ee[1])
        return RobotState(
            stamp=stamp, received=received, joint_names=names, q=q, dq=dq, tau=tau,
            imu_quat=None if imu is None else imu[0], imu_gyro=None if imu is None else imu[1],
            imu_acc=None if imu is None else imu[3], foot_force=foot_force,
            ee_pos=None if ee is None else ee[0],
        )
