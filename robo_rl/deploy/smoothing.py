"""Command smoothing for a robot whose controller takes 1 kHz setpoints and checks their derivatives (a Franka arm).

libfranka aborts a motion (a "reflex") when its 1 kHz joint setpoints leave q_min..q_max or their velocity,
acceleration or jerk, computed by backward differences 1 ms apart, exceed Franka's limits. A 50 Hz policy target held
for 20 ms is a step: at 1 kHz it is a velocity of 20 rad/s per 0.02 rad of change. So every tick goes out as
setpoint_rate_hz / control_rate_hz setpoints (20 at 50 Hz and 1 kHz) that follow the tick's target as closely as the
limits allow: `JerkLimitedInterpolator`, a pure class; `SmoothingRobot` applies it to whatever robot the deploy core
drives (wired in `PolicyRuntime.attach` when the hardware file has `controller.setpoint_rate_hz`).

The interpolator integrates a jerk per setpoint, j -> a -> v -> q, exactly as libfranka differentiates them back
(a_k = a_{k-1} + j h, v_k = v_{k-1} + a_k h, q_k = q_{k-1} + v_k h, h the setpoint period), so the limits it keeps are
the limits libfranka measures. Per setpoint and joint it chooses the acceleration a_k:

- hard bounds, always met: |j| <= jerk limit, |a| <= acceleration limit, and a velocity bound that keeps a state from
  which the acceleration can still return to 0 without passing the velocity limit (v + a|a| / 2J <= V, kept as an
  invariant: the velocity limit is never exceeded);
- inside them, the acceleration that tracks a desired velocity, itself the braking curve towards the target (and away
  from the position limits, planned with BRAKING_SHARE of the limits): fast far away, linear near it, no overshoot for
  a target that stays put.

Position limits are met through the braking curves (and the target is clamped inside them first); the property test
(tests/deploy/test_smoothing.py) checks all four limits on generated and adversarial target streams.

The model of the robot side (docs/deploy.md, Franka): the setpoints of a tick travel as one JointTrajectory (points
1 ms apart with positions, velocities and accelerations) to franka_ros2's joint_trajectory_controller on the position
command interface at update_rate 1000 Hz, which plays them one per cycle; each message continues the previous one, so
the stream is limit-safe when messages arrive one period apart.
"""

from __future__ import annotations

import dataclasses
import math
import threading

import numpy as np

from robo_rl.deploy.hardware import HardwareSpec, check_setpoint_rate
from robo_rl.deploy.robot import JointCommand, RobotInterface, RobotState, Setpoints
from robo_rl.deploy.safety import name_index

LIMIT_EPS = 1e-3
"""libfranka's kLimitEps: every limit is approached to within this (its rate_limiting.h does the same)."""
PACKETS_LOST = 3
"""libfranka's kTolNumberPacketsLost: its velocity limits leave room for this many lost setpoints at full
acceleration (kMaxJointVelocity = dq_max - kLimitEps - 3 ms * ddq_max); the interpolator's do too."""
BRAKING_SHARE = 0.7
"""The braking curves (towards the target and away from the position limits) are planned with this share of the
acceleration and jerk limits, so that the velocity, which follows its wish only as fast as the jerk allows, still
stops in time: with 1.0 the generated streams overshot the position limits by up to 0.01 rad, with 0.7 never
(tests/deploy/test_smoothing.py)."""


@dataclasses.dataclass(frozen=True)
class SetpointLimits:
    """Per joint (J,) bounds of a setpoint stream: positions (rad), velocity, acceleration, jerk (rad/s^k)."""

    lower: np.ndarray
    upper: np.ndarray
    velocity: np.ndarray
    acceleration: np.ndarray
    jerk: np.ndarray

    @classmethod
    def from_hardware(cls, hw: HardwareSpec) -> SetpointLimits:
        """The hardware file's limits as libfranka applies them (LIMIT_EPS inside each, the velocity also
        PACKETS_LOST setpoints of full acceleration inside); ValueError without controller.setpoint_rate_hz."""
        c = hw.controller
        if c.setpoint_rate_hz is None:
            raise ValueError(f"hardware {hw.robot!r} has no controller.setpoint_rate_hz: nothing to smooth for")
        h = 1.0 / c.setpoint_rate_hz
        return cls(lower=hw.joint_lower + LIMIT_EPS, upper=hw.joint_upper - LIMIT_EPS,
                   velocity=hw.velocity_limits - LIMIT_EPS - PACKETS_LOST * h * c.acceleration_limits,
                   acceleration=c.acceleration_limits - LIMIT_EPS, jerk=c.jerk_limits - LIMIT_EPS)


def braking_velocity(distance: np.ndarray, acceleration: np.ndarray, jerk: np.ndarray) -> np.ndarray:
    """(J,) largest speed from which a jerk-limited stop (acceleration 0 at both ends) covers at most `distance` (J,)
    (>= 0; the continuous S-curve: d = v^2 / 2A + v A / 2J above v = A^2 / J, d = v^1.5 / sqrt(J) below)."""
    d = np.maximum(distance, 0.0)
    a, j = acceleration, jerk
    long = -a * a / (2 * j) + np.sqrt((a * a / (2 * j)) ** 2 + 2 * a * d)  # trapezoidal deceleration
    short = np.cbrt(d * d * j)  # triangular deceleration (never reaches A)
    return np.where(d >= a**3 / (j * j), long, short)


class JerkLimitedInterpolator:
    """Setpoints at `rate_hz` that follow a target within position, velocity, acceleration and jerk limits.

    State: q, v, a (J,) of the last setpoint, or (N, J) for N robots at once (the simulation's worlds: every
    operation is per joint and broadcasts). `start(q)` puts it at rest at the measured q (libfranka requires the first
    setpoint to equal the measured pose, at rest); `restart(rows, q)` does so for some of N robots; `advance(target,
    n)` returns the next n setpoints towards `target`; `advance(None, n)` brakes to rest where it can. All arrays are
    in one joint order (the caller's).

    Args:
        limits: the bounds (SetpointLimits).
        rate_hz: setpoint rate (Hz).
        tracking_time_s: time constant of the linear region: near the target the velocity is error / this.
    """

    def __init__(self, limits: SetpointLimits, rate_hz: float, *, tracking_time_s: float = 0.02):
        if not (math.isfinite(rate_hz) and rate_hz > 0):
            raise ValueError(f"rate_hz = {rate_hz!r}: must be a finite number > 0")
        if not (math.isfinite(tracking_time_s) and tracking_time_s > 0):
            raise ValueError(f"tracking_time_s = {tracking_time_s!r}: must be a finite number > 0")
        self.limits = limits
        self.h = 1.0 / rate_hz
        # Linear regions: velocity = error / T, acceleration = velocity error * 4 / T (critically damped cascade).
        self._k_pos = 1.0 / tracking_time_s
        self._k_vel = 4.0 / tracking_time_s
        self._braking = (BRAKING_SHARE * limits.acceleration, BRAKING_SHARE * limits.jerk)
        self.q: np.ndarray | None = None
        self.v = np.zeros_like(limits.velocity)
        self.a = np.zeros_like(limits.velocity)

    @property
    def started(self) -> bool:
        return self.q is not None

    def start(self, q: np.ndarray) -> None:
        """Rest at q (J,) or (N, J), exactly (libfranka's first setpoint is the measured pose; one at or past a limit
        moves back inside, never further out)."""
        q = self._pose(q)
        self.q = q.copy()
        self.v = np.zeros_like(self.q)
        self.a = np.zeros_like(self.q)

    def restart(self, rows: np.ndarray, q: np.ndarray) -> None:
        """Rest at q (K, J) for rows `rows` (K,) of a started (N, J) state; the other rows move on."""
        if self.q is None or self.q.ndim != 2:
            raise ValueError("JerkLimitedInterpolator.restart needs a started (N, J) state")
        self.q[rows] = self._pose(q)
        self.v[rows] = 0.0
        self.a[rows] = 0.0

    def _pose(self, q: np.ndarray) -> np.ndarray:
        """q as float64 (..., J); ValueError unless it is finite with one position per joint."""
        q = np.asarray(q, dtype=np.float64)
        if q.shape[-1:] != self.limits.lower.shape or not np.all(np.isfinite(q)):
            raise ValueError(f"start pose of shape {q.shape} with non-finite values: {len(self.limits.lower)} finite "
                             "joint positions needed")
        return q

    def _acceleration(self, target: np.ndarray | None) -> np.ndarray:
        """The next setpoint's acceleration (J,): the tracking wish inside the hard bounds (module docstring)."""
        lim, h, q, v, a = self.limits, self.h, self.q, self.v, self.a
        acc, jerk, vel = lim.acceleration, lim.jerk, lim.velocity
        acc_b, jerk_b = self._braking  # (J,) each
        # Desired velocity: towards the target along its braking curve (linear near it), never faster than the stop
        # before a position limit allows; 0 when braking.
        v_hi = np.minimum(vel, braking_velocity(lim.upper - q, acc_b, jerk_b))  # (J,)
        v_lo = -np.minimum(vel, braking_velocity(q - lim.lower, acc_b, jerk_b))
        if target is None:
            v_want = np.zeros_like(q)
        else:
            e = target - q
            v_want = np.sign(e) * np.minimum(braking_velocity(np.abs(e), acc_b, jerk_b), np.abs(e) * self._k_pos)
        v_want = np.clip(v_want, v_lo, v_hi)
        # Desired acceleration: towards v_want, counting the velocity the current acceleration still adds while it
        # returns to 0 (a |a| / 2J); its own braking curve far away, linear near.
        dv = v_want - v - a * np.abs(a) / (2 * jerk)
        a_want = np.sign(dv) * np.minimum(np.sqrt(2 * jerk * np.abs(dv)), np.abs(dv) * self._k_vel)
        # Hard bounds: jerk, acceleration, and the velocity invariant v + a|a| / 2J <= V (for a >= 0; mirrored).
        a_vmax = jerk * (-h + np.sqrt(h * h + 2 * np.maximum(vel - v, 0.0) / jerk))
        a_vmin = -jerk * (-h + np.sqrt(h * h + 2 * np.maximum(vel + v, 0.0) / jerk))
        low = np.maximum(np.maximum(a - jerk * h, -acc), a_vmin)
        high = np.minimum(np.minimum(a + jerk * h, acc), a_vmax)
        return np.minimum(np.maximum(a_want, low), high)

    def advance(self, target: np.ndarray | None, steps: int) -> Setpoints:
        """The next `steps` setpoints (each (steps, J), or (steps, N, J)) towards `target` (J,) or (N, J) (clamped
        into the position limits), or braking to rest when it is None. `start` first."""
        if self.q is None:
            raise ValueError("JerkLimitedInterpolator.advance before start")
        lim = self.limits
        goal = None if target is None else np.clip(np.asarray(target, dtype=np.float64), lim.lower, lim.upper)
        shape = (steps, *self.q.shape)
        q_out, v_out, a_out = np.empty(shape), np.empty(shape), np.empty(shape)
        for k in range(steps):
            a = self._acceleration(goal)
            v = self.v + a * self.h
            self.q = self.q + v * self.h
            self.v, self.a = v, a
            q_out[k], v_out[k], a_out[k] = self.q, v, a
        return Setpoints(period=self.h, q=q_out, dq=v_out, ddq=a_out)


class SmoothingRobot:
    """A robot whose commands go out as jerk-limited setpoints (`command.setpoints`) at the controller's rate.

    Each command's target is followed by `rate / control rate` setpoints (JerkLimitedInterpolator); a command without
    stiffness (kp = 0 on every joint: PASSIVE, DAMP, ESTOP) brakes to rest instead, since a position-controlled arm has
    no limp mode: it stops within the limits and holds there. The interpolator starts at rest at the measured pose of
    the state read before the first command (libfranka's start condition). A gripper with its own controller
    (hardware `gripper`) keeps its target in every setpoint: franka_gripper, not the 1 kHz stream, moves it.
    Thread-safe.

    Args:
        robot: the robot as connected (a transport that sends `command.setpoints`: DDS joint_trajectory, the twin).
        hw: the robot (joint order, limits, controller.setpoint_rate_hz).
        control_dt: the policy period (s): a whole number of setpoint periods (`check_setpoint_rate`).
    """

    def __init__(self, robot: RobotInterface, hw: HardwareSpec, control_dt: float):
        rate = hw.controller.setpoint_rate_hz
        if rate is None:
            raise ValueError(f"hardware {hw.robot!r} has no controller.setpoint_rate_hz: nothing to smooth for")
        self.robot = robot
        self.hw = hw
        self.steps = round(control_dt * rate)
        self.interpolator = JerkLimitedInterpolator(SetpointLimits.from_hardware(hw), rate)
        self._measured: np.ndarray | None = None  # (J,) the last state's q, robot order
        self._gripper = None if hw.gripper is None else int(hw.index_of([hw.gripper.joint])[0])
        self._lock = threading.Lock()

    def read_state(self) -> RobotState:
        state = self.robot.read_state()
        if not self.interpolator.started:  # the pose the first setpoint must equal
            try:
                gather = name_index(tuple(state.joint_names), self.hw.joint_names)
            except ValueError:  # joints missing: the safety filter damps; the first command then starts it
                return state
            q = np.asarray(state.q, dtype=np.float64)
            with self._lock:
                self._measured = (q if gather is None else q[gather]).copy()  # (J,) robot order
        return state

    def send_command(self, command: JointCommand) -> None:
        n = len(self.hw.joint_names)
        with self._lock:
            idx = self.hw.index_of(command.joint_names)  # (J,) robot position of each command joint
            target = np.empty(n)
            target[idx] = command.q  # (J,) robot order
            if not self.interpolator.started:
                start = self._measured if self._measured is not None else target
                self.interpolator.start(np.where(np.isfinite(start), start, target))
            stiff = bool(np.any(np.asarray(command.kp) > 0))
            points = self.interpolator.advance(target if stiff else None, self.steps)  # (steps, J) robot order
        if self._gripper is not None:  # moved by its own controller (franka_gripper): its target as it is
            points.q[:, self._gripper], points.dq[:, self._gripper], points.ddq[:, self._gripper] = (
                target[self._gripper], 0.0, 0.0)
        setpoints = Setpoints(period=points.period, q=points.q[:, idx], dq=points.dq[:, idx], ddq=points.ddq[:, idx])
        self.robot.send_command(dataclasses.replace(command, setpoints=setpoints))  # q: still the tick's target

    def close(self) -> None:
        self.robot.close()

    def __str__(self) -> str:
        return str(self.robot)


def command_path(robot: RobotInterface, hw: HardwareSpec, control_dt: float) -> RobotInterface:
    """`robot`, or a `SmoothingRobot` over it when its controller takes setpoints (hardware
    controller.setpoint_rate_hz): how every command of the deploy core reaches the robot (PolicyRuntime.attach, replay).

    Raises:
        ValueError: one line: the control period is not a whole number of setpoint periods.
    """
    rate = hw.controller.setpoint_rate_hz
    if rate is None:
        return robot
    check_setpoint_rate(rate, 1.0 / control_dt, f"hardware {hw.robot!r} controller.setpoint_rate_hz")
    return SmoothingRobot(robot, hw, control_dt)
