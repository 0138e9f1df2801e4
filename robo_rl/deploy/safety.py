"""SafetyFilter: the last stage before any command reaches the robot (DESIGN.md section 4).

Checks every state (NaN/Inf, stale-state watchdog, missing joints, overspeed, attitude, and before RAMP
that the IMU's gravity points down) and makes every command safe (NaN guard, gain bounds, velocity-target
limit, joint-limit clamp with margin, per-tick rate limit, torque budget, latched e-stop; the targets of a policy
trained through a setpoint controller's jerk-limited stream reach the robot through it, which bounds their steps
and torques instead).
Runs every tick at 50-500 Hz: scratch buffers are allocated once; only the arrays of the command it
returns are fresh each tick, because a transport may keep a command it was handed (a queue, a log).

Joint identity is by name: states and commands may list joints in any order; the filter maps them
onto `hw.joint_names` and always returns commands in that (the robot's) order.
"""

from __future__ import annotations

import math

import numpy as np

from robo_rl.deploy.hardware import HardwareSpec
from robo_rl.deploy.robot import JointCommand, RobotState

STATE_FAULTS = ("bad_state", "nan_state", "stale_state", "missing_joint", "overspeed", "missing_imu", "attitude")
"""Reasons `check_state` may return. (The Controller reports an "attitude" before POLICY, and a failed
gravity check before RAMP raises the gains, as "imu_check" with the reason in `last_error`.)"""

INTERVENTIONS = (
    "estop",  # e-stop latched: damping command
    "invalid_state",  # state unusable (unmapped, NaN): damping command
    "bad_command",  # command misshapen, joints missing or negative gains: damping command
    "nan_command",  # NaN/Inf in the command: damping command
    "gain_limit",  # kp or kd above the hardware's kp_max / kd_max: clipped
    "velocity_limit",  # velocity target beyond +-velocity_limits: clipped
    "joint_limit",  # position target outside [lower + margin, upper - margin]: clamped
    "rate_limit",  # position target moved more than the per-tick step: limited
    "feedforward_limit",  # |tau_ff| above the torque budget: clipped
    "damping_limit",  # kd (dq* - dq) + tau_ff above the budget: kd lowered (the motor would saturate)
    "torque_limit",  # PD + feed-forward torque above the budget: position target moved toward measured q
    "stiffness_limit",  # no in-limit target keeps the torque in budget: kp lowered
)
"""Names `filter_command` may report, in the order the filter applies them."""

STILL_GYRO_RAD_S = 0.2
"""The base counts as still (for the gravity check before RAMP) while |gyro| is below this (rad/s)."""


def all_finite(a: np.ndarray) -> bool:
    """True when no element of `a` is NaN or Inf (huge finite values included: no sum that could overflow)."""
    return bool(np.isfinite(a).all())


def name_index(source: tuple[str, ...], target: tuple[str, ...]) -> np.ndarray | None:
    """Where each `target` name sits in `source`.

    Args:
        source: names in the order of the data, e.g. a state's joint_names.
        target: names wanted, e.g. hw.joint_names.

    Returns:
        (len(target),) int64 indices so that data[idx] is in target order, or None when the orders
        are identical (no gather needed).

    Raises:
        ValueError: naming the target joints missing from `source`.
    """
    if source == target:
        return None
    lookup = {n: i for i, n in enumerate(source)}
    missing = [n for n in target if n not in lookup]
    if missing:
        raise ValueError(f"joint(s) {', '.join(missing)} missing (present: {', '.join(source)})")
    return np.array([lookup[n] for n in target], dtype=np.int64)


def quat_wxyz(quat: np.ndarray, order: str) -> tuple[float, float, float, float]:
    """(w, x, y, z) as floats of a (4,) quaternion given in `order` ("wxyz" or "xyzw")."""
    if order == "wxyz":
        w, x, y, z = (float(v) for v in quat)
    elif order == "xyzw":
        x, y, z, w = (float(v) for v in quat)
    else:
        raise ValueError(f"quaternion order {order!r}: allowed values are wxyz, xyzw")
    return w, x, y, z


def quat_roll_pitch(quat: np.ndarray, order: str = "wxyz") -> tuple[float, float]:
    """Roll and pitch (rad, ZYX Euler) of a base orientation quaternion; it need not be unit length.

    Args:
        quat: (4,) quaternion in `order`.
        order: "wxyz" or "xyzw".

    Returns:
        (roll, pitch); roll in (-pi, pi], pitch in [-pi/2, pi/2]. A base turned upside down shows up
        as |roll| near pi.
    """
    w, x, y, z = quat_wxyz(quat, order)
    n = w * w + x * x + y * y + z * z
    # Both formulas are written scale-free (divided by |q|^2) so a slightly non-unit IMU quaternion works.
    roll = math.atan2(2.0 * (w * x + y * z), w * w - x * x - y * y + z * z)
    pitch = math.asin(max(-1.0, min(1.0, 2.0 * (w * y - x * z) / n)))
    return roll, pitch


def gravity_tilt(quat: np.ndarray, order: str = "wxyz") -> float:
    """Angle (rad, [0, pi]) between the base's -z axis and gravity for a base orientation quaternion.

    0 when the base is level, pi when upside down; yaw does not matter. The quaternion need not be
    unit length. Computed from the z row of the rotation matrix: cos(tilt) = (w^2 + z^2 - x^2 - y^2) / |q|^2.
    """
    w, x, y, z = quat_wxyz(quat, order)
    n = w * w + x * x + y * y + z * z
    return math.acos(max(-1.0, min(1.0, (w * w + z * z - x * x - y * y) / n)))


def upright_problem(quat: np.ndarray, order: str, max_tilt: float) -> str | None:
    """Why an IMU quaternion read in `order` does not show a base standing level, or None.

    Used before RAMP while the base is still: gravity must point down within `max_tilt`. When the
    same four numbers read in the other order would point down, the message says quaternion_order
    looks wrong. Physics limit: for a level base the misread quaternion shows a tilt equal to the
    heading's distance from a blind heading, |yaw| for xyzw data read as wxyz and |180 deg - yaw| for
    wxyz data read as xyzw (at the blind heading it is a pure 180 deg yaw: same gravity). So a robot
    standing within max_tilt of that heading passes; at any other heading (e.g. 90 deg) it is caught.
    """
    if not np.any(quat):
        return "IMU quaternion is all zeros"
    tilt = gravity_tilt(quat, order)
    if tilt <= max_tilt:
        return None
    msg = (f"IMU gravity points {math.degrees(tilt):.0f} deg from straight down in quaternion_order {order} "
           f"(limit {math.degrees(max_tilt):.0f} deg) while the base is still")
    other = "xyzw" if order == "wxyz" else "wxyz"
    if gravity_tilt(quat, other) <= max_tilt:
        msg += f"; read as {other} it points down: quaternion_order looks wrong"
    return msg


def target_bounds(hw: HardwareSpec) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi), (J,) each: the position targets the filter sends, [lower + margin, upper - margin]; a margin wider
    than half a joint's range would invert its bounds, and its midpoint is then the only target."""
    margin = np.asarray(hw.safety.joint_limit_margin, dtype=np.float64)  # () or (J,) per joint
    lo, hi = hw.joint_lower + margin, hw.joint_upper - margin  # (J,)
    mid = 0.5 * (hw.joint_lower + hw.joint_upper)
    inverted = lo > hi
    lo[inverted] = mid[inverted]
    hi[inverted] = mid[inverted]
    return lo, hi


def _clip(a: np.ndarray, lo: np.ndarray, hi: np.ndarray, out: np.ndarray) -> np.ndarray:
    """np.clip(a, lo, hi, out=out) for lo <= hi, at a third of its per-call overhead on small arrays."""
    return np.minimum(np.maximum(a, lo, out=out), hi, out=out)


class _NameCache:
    """Remembers the last name order seen, so mapping costs one tuple comparison per tick."""

    def __init__(self, target: tuple[str, ...]):
        self.target = target
        self._names: tuple[str, ...] | None = None
        self._index: np.ndarray | None = None
        self._missing: bool = False

    def lookup(self, names: tuple[str, ...]) -> tuple[bool, np.ndarray | None]:
        """(ok, index) for `names`; ok is False when a target joint is missing."""
        if names is not self._names and names != self._names:
            self._names = names
            try:
                self._index, self._missing = name_index(names, self.target), False
            except ValueError:
                self._index, self._missing = None, True
        return not self._missing, self._index


class SafetyFilter:
    """State checks and command filtering for one robot.

    Args:
        hw: the robot's description; its `safety` section sets every margin.
        control_dt: control period (s) the filter runs at, for the velocity-based step limit
            (default 1 / hw.control_rate_hz); settable later through `control_dt`.
        trained_through_stream: the policy was trained through this robot's setpoint stream (its contract's
            `setpoint_rate_hz`): on a setpoint controller its targets go to the stream as trained (`filter_command`).

    Call `check_state` once per tick before computing a command and `filter_command` on every command
    before it is sent. Stateful: remembers the previous filtered target (rate limit), the last stamp
    (frozen-clock watchdog), the last finite measured pose (damping target) and the latched e-stop.
    """

    def __init__(self, hw: HardwareSpec, control_dt: float | None = None, trained_through_stream: bool = False):
        self.hw = hw
        self.cfg = hw.safety
        n = len(hw.joint_names)
        self._lo, self._hi = target_bounds(hw)  # (J,) each
        # A setpoint controller tracks the jerk-limited stream towards the target, not the target (see filter_command).
        self._streamed = trained_through_stream and hw.controller.setpoint_rate_hz is not None
        self._tau_max = self.cfg.torque_margin * hw.torque_limits  # (J,) torque budget
        # The filter aims a hair inside the budget so float rounding can never land a torque outside it.
        self._tau_aim = self._tau_max * (1.0 - 1e-9)  # (J,)
        self._kp_max = np.asarray(hw.kp_max, dtype=np.float64)  # (J,)
        self._kd_max = np.asarray(hw.kd_max, dtype=np.float64)  # (J,)
        self._vel_max = np.asarray(hw.velocity_limits, dtype=np.float64)  # (J,)
        self._neg_vel_max = -self._vel_max  # (J,)
        self._overspeed = self.cfg.overspeed_factor * self._vel_max  # (J,) measured |dq| beyond: fault
        if hw.gripper is not None:
            # A gripper with its own controller (franka_gripper) moves at the speed it is given and no faster; its
            # joint is not driven by these commands, and a measured speed past its limit is the hand pushed from
            # outside (or a simulated finger's servo snapping shut when a grasped cube slips), not a runaway.
            self._overspeed[hw.index_of([hw.gripper.joint])] = np.inf
        self._damping_kd = np.minimum(self.cfg.damping_kd, self._kd_max)  # (J,)
        self._step = np.zeros(n)  # (J,) per-tick position step, set by control_dt
        self.control_dt = 1.0 / hw.control_rate_hz if control_dt is None else control_dt
        self._zeros = np.zeros(n)  # (J,) read-only by convention
        self._state_names = _NameCache(hw.joint_names)
        self._cmd_names = _NameCache(hw.joint_names)
        # Scratch (J,) buffers, reused every tick.
        self._q = np.zeros(n)  # measured q, robot order
        self._dq = np.zeros(n)  # measured dq, robot order
        self._ref = np.zeros(n)
        self._tmp = np.zeros(n)
        self._tau = np.zeros(n)
        self._fixed = np.zeros(n)  # kd (dq* - dq) + tau_ff: the torque q* cannot change
        self._changed = np.zeros(n, dtype=bool)
        self._active = np.zeros(n, dtype=bool)  # kp > 0 in the command being filtered
        self._damped = np.zeros(n, dtype=bool)  # kd > 0 in the command being filtered
        # Memory across ticks.
        self._q_known = np.clip(np.zeros(n), hw.joint_lower, hw.joint_upper)  # last finite measured q
        self._prev_q = np.zeros(n)  # previous filtered position target
        self._prev_active = np.zeros(n, dtype=bool)  # previous target had stiffness (kp > 0)
        self._last_stamp: float | None = None
        self._stamp_advanced_at = 0.0
        self._estopped = False

    @property
    def control_dt(self) -> float:
        """Control period (s); the position step per tick is min(max_position_step, velocity_limit * dt)."""
        return self._dt

    @control_dt.setter
    def control_dt(self, dt: float) -> None:
        if not (isinstance(dt, (int, float)) and math.isfinite(dt) and dt > 0):
            raise ValueError(f"control_dt = {dt!r}: must be a finite number > 0 (s)")
        self._dt = float(dt)
        np.minimum(self.cfg.max_position_step, self._vel_max * self._dt, out=self._step)

    # ----------------------------------------------------------------------------------------------- e-stop

    @property
    def estopped(self) -> bool:
        """True while the e-stop is latched."""
        return self._estopped

    def estop(self) -> None:
        """Latch the e-stop: every later `filter_command` returns the damping command."""
        self._estopped = True

    def reset_estop(self) -> None:
        """Release the e-stop (an explicit operator action)."""
        self._estopped = False

    # ----------------------------------------------------------------------------------------------- state

    def _load_state(self, state: RobotState) -> tuple[bool, bool]:
        """Copy the state's q and dq into robot order (self._q, self._dq).

        Returns:
            (mapped, finite): mapped is False when a joint is missing or the arrays do not match
            joint_names (self._q untouched); finite is True when the mapped q and dq hold no NaN/Inf.
        """
        n_names = len(state.joint_names)
        if np.shape(state.q) != (n_names,) or np.shape(state.dq) != (n_names,):
            return False, False
        ok, idx = self._state_names.lookup(state.joint_names)
        if not ok:
            return False, False
        if idx is None:
            np.copyto(self._q, state.q)
            np.copyto(self._dq, state.dq)
        else:
            # Gather then cast: robots often report float32, which np.take(out=float64) refuses.
            np.copyto(self._q, np.asarray(state.q)[idx])
            np.copyto(self._dq, np.asarray(state.dq)[idx])
        finite = all_finite(self._q) and all_finite(self._dq)
        if finite:
            np.copyto(self._q_known, self._q)
        return True, finite

    def check_state(self, state: RobotState, now: float) -> str | None:
        """Why this state must not be acted on, or None when it is fine.

        Args:
            state: the newest reading.
            now: current time on the clock of `state.received` (s).

        Returns:
            One of STATE_FAULTS or None: "bad_state" (arrays do not match joint_names), "nan_state",
            "stale_state" (received too long ago, or the robot's stamp frozen too long), "missing_joint",
            "overspeed" (a measured |dq| above overspeed_factor * velocity limit; a gripper with its own
            controller, hardware `gripper`, excepted),
            "missing_imu" / "attitude" (legged robots with `safety.max_tilt_rad` set).
        """
        timeout = self.cfg.state_timeout_s
        stamp, received = float(state.stamp), float(state.received)
        if not (math.isfinite(stamp) and math.isfinite(received)):
            return "nan_state"
        # The robot's own clock must advance: a bridge may keep republishing its last message.
        if self._last_stamp is None or stamp > self._last_stamp:
            self._stamp_advanced_at = now
        self._last_stamp = stamp
        if now - received > timeout or now - self._stamp_advanced_at > timeout:
            return "stale_state"
        n_names = len(state.joint_names)
        if np.shape(state.q) != (n_names,) or np.shape(state.dq) != (n_names,):
            return "bad_state"
        if not (all_finite(state.q) and all_finite(state.dq)):
            return "nan_state"
        for extra, shape in ((state.imu_quat, (4,)), (state.imu_gyro, (3,))):
            if extra is not None:
                if np.shape(extra) != shape:
                    return "bad_state"
                if not all_finite(extra):
                    return "nan_state"
        ok, idx = self._state_names.lookup(state.joint_names)
        if not ok:
            return "missing_joint"
        dq = np.abs(state.dq if idx is None else np.asarray(state.dq)[idx])  # (J,) robot order
        if (dq > self._overspeed).any():
            return "overspeed"
        if self.hw.kind == "legged" and self.cfg.max_tilt_rad is not None:
            if state.imu_quat is None:
                return "missing_imu"
            if not np.any(state.imu_quat):
                return "bad_state"
            roll, pitch = quat_roll_pitch(state.imu_quat, self.hw.quaternion_order)
            if abs(roll) > self.cfg.max_tilt_rad or abs(pitch) > self.cfg.max_tilt_rad:
                return "attitude"
        return None

    def overspeed_detail(self, state: RobotState) -> str:
        """One line naming the fastest joint relative to its limit (for the operator after "overspeed")."""
        ok, idx = self._state_names.lookup(state.joint_names)
        if not ok or np.shape(state.dq) != (len(state.joint_names),):
            return "overspeed"
        dq = np.abs(state.dq if idx is None else np.asarray(state.dq)[idx])  # (J,)
        i = int(np.argmax(dq / self._vel_max))
        return (f"{self.hw.joint_names[i]} measured |dq| = {dq[i]:.3g} rad/s above {self.cfg.overspeed_factor:g} x "
                f"velocity limit {self._vel_max[i]:g} rad/s")

    def upright_detail(self, state: RobotState) -> str:
        """One line on the IMU's gravity direction (for the operator after "attitude" before POLICY)."""
        if self.cfg.max_tilt_rad is None or state.imu_quat is None:
            return "no IMU attitude to report"
        problem = upright_problem(np.asarray(state.imu_quat), self.hw.quaternion_order, self.cfg.max_tilt_rad)
        return problem or f"roll or pitch beyond safety.max_tilt_rad = {self.cfg.max_tilt_rad:g} rad"

    def check_upright(self, state: RobotState) -> tuple[bool, str | None]:
        """Gravity check before RAMP on legged robots: (still, problem).

        `still` is False while the gyro reads STILL_GYRO_RAD_S or more (the check cannot judge yet); once
        still, `problem` is a one-line reason (see `upright_problem`) or None. Robots without an IMU or
        of kind `arm` are always (True, None).
        """
        if self.hw.kind != "legged" or state.imu_quat is None or self.cfg.max_tilt_rad is None:
            return True, None
        if state.imu_gyro is not None and float(np.linalg.norm(state.imu_gyro)) >= STILL_GYRO_RAD_S:
            return False, None
        return True, upright_problem(np.asarray(state.imu_quat), self.hw.quaternion_order, self.cfg.max_tilt_rad)

    def joint_positions(self, state: RobotState) -> np.ndarray:
        """Measured q in robot order, (J,) fresh array; ValueError when the state cannot be mapped or is NaN."""
        if not all(self._load_state(state)):
            raise ValueError(f"state cannot be mapped onto {self.hw.robot!r} joints (missing joint, bad shape or NaN)")
        return self._q.copy()

    # ----------------------------------------------------------------------------------------------- commands

    def damping_command(self, state: RobotState | None) -> JointCommand:
        """Zero stiffness, `safety.damping_kd` damping, q = measured q (clamped to the limits), robot order.

        Where the measured speed is so high that damping_kd |dq| would exceed the torque budget, that
        joint's kd is lowered to budget / |dq| (the motor would saturate there anyway), so even the
        damping command keeps its torque within the budget.

        Args:
            state: newest reading, or None when none could be read. Joints that are missing or NaN in it
                keep the last finite measured position (with kp = 0 the target exerts no torque anyway).
        """
        return self._damping(state)[0]

    def _damping(self, state: RobotState | None) -> tuple[JointCommand, bool]:
        """(damping command, True when a joint's damping was lowered to keep it within the budget)."""
        mapped = state is not None and self._load_state(state)[0]
        q = self._q_known.copy()  # (J,)
        kd = self._damping_kd.copy()  # (J,)
        limited = False
        if mapped:
            np.copyto(q, self._q, where=np.isfinite(self._q))
            np.copyto(self._q_known, q)
            np.clip(q, self._lo, self._hi, out=q)  # no effect with kp = 0, but keeps every q* inside the limits
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                speed = np.abs(self._dq)  # (J,)
                fast = np.isfinite(speed) & (kd * speed > self._tau_aim)
                if fast.any():
                    kd[fast] = self._tau_aim[fast] / speed[fast]
                    limited = True
        return JointCommand(self.hw.joint_names, q, self._zeros.copy(), self._zeros.copy(), kd,
                            self._zeros.copy()), limited

    def _damp(self, state: RobotState | None, reason: str) -> tuple[JointCommand, list[str]]:
        self._prev_active[:] = False
        cmd, limited = self._damping(state)
        return cmd, [reason, "damping_limit"] if limited else [reason]

    def _gather(self, a: np.ndarray, idx: np.ndarray | None) -> np.ndarray:
        """A fresh float64 (J,) copy of `a` in robot order."""
        return np.array(a, dtype=np.float64) if idx is None else np.asarray(a, dtype=np.float64)[idx]

    def filter_command(self, cmd: JointCommand, state: RobotState | None) -> tuple[JointCommand, list[str]]:
        """Make `cmd` safe to send.

        Guarantees, for every joint and every input, of the command returned: kp, kd finite, in
        [0, kp_max] / [0, kd_max]; |dq*| <= velocity_limits; q* inside [lower + margin, upper - margin];
        |kp (q* - q) + kd (dq* - dq) + tau_ff| <= torque_margin * torque_limits at the measured (q, dq).
        The damping commands returned on a refusal meet them too (q clamped, kd lowered where the
        measured speed would need more than the budget). tests/deploy/test_deploy_properties.py checks all of
        this on generated inputs.

        In order: latched e-stop -> damping ("estop"); unusable state -> damping ("invalid_state");
        command not covering the robot's joints, misshapen or with negative gains -> damping
        ("bad_command"); NaN/Inf anywhere -> damping ("nan_command"). Then, each reported when it
        changed something: gains clipped to kp_max / kd_max ("gain_limit"); velocity target clipped to
        +-velocity_limits ("velocity_limit"); position target clamped to the limits ("joint_limit");
        per-tick change limited to min(max_position_step, velocity_limit * control_dt) from the previous
        filtered target, or from measured q where the previous target had kp = 0 ("rate_limit"), and
        clamped to the limits again (a measured q outside them must not drag the target out). Last the
        torque budget B = torque_margin * torque_limits, which wins over the rate limit (it is the
        actuator's hard bound): tau_ff clipped to +-B ("feedforward_limit"); where kd (dq* - dq) + tau_ff
        still exceeds B, kd lowered until it fits ("damping_limit"); where kp (q* - q) adds too much, q*
        moved toward the measured q, staying inside the limits ("torque_limit"); where no in-limit q*
        can fit (measured q far outside the limits with a large kp), q* set to the nearest limit and kp
        lowered until it fits ("stiffness_limit"). Clamping a target that has no physical effect (q* of
        a joint with kp = 0, dq* of one with kd = 0) is done but not reported.

        A setpoint controller (hardware `controller.setpoint_rate_hz`: a Franka) does not track the target: it tracks
        the jerk-limited setpoints the deploy core streams towards it (robo_rl.deploy.smoothing), each within the
        robot's velocity, acceleration and jerk limits, with the robot's own torque limits and reflexes. For a policy
        trained through that stream (`trained_through_stream`) the target is clamped to the limits and its
        feed-forward to the budget, and the per-tick step and the PD budget on the target are left to the stream and
        the robot: they bound a servo that steps to its target at the tick, and on a streamed target they made a robot
        other than the one trained (the Panda's wrist budget, 12 N m at kp 2000, left 6 mrad of lead a tick: the
        pick-and-place expert placed 11 % of the cubes through them, 100 % without; docs/vla.md). Its guarantees are
        then the others above; the stream's bounds are checked in tests/deploy/test_smoothing.py. A policy trained on
        targets that step in at the tick keeps both: they hold it nearer what it trained on (a flow-BC reach policy
        reached 0.375 of its targets on the twin without them, 0.72 in simulation; tests/deploy/test_flow_deploy.py).

        Args:
            cmd: the wanted command, joints in any order (mapped by name).
            state: the newest reading, used for measured q and dq; None when none could be read.

        Returns:
            (safe command in robot order, interventions applied), interventions from INTERVENTIONS.
        """
        if self._estopped:
            return self._damp(state, "estop")
        if state is None or not all(self._load_state(state)):
            return self._damp(state, "invalid_state")
        n_cmd = len(cmd.joint_names)
        ok, idx = self._cmd_names.lookup(cmd.joint_names)
        arrays = (cmd.q, cmd.dq, cmd.kp, cmd.kd, cmd.tau)
        if not ok or any(np.shape(a) != (n_cmd,) for a in arrays):
            return self._damp(state, "bad_command")
        q, dq, kp, kd, tau = (self._gather(a, idx) for a in arrays)  # (J,) each, fresh
        if not (all_finite(q) and all_finite(dq) and all_finite(kp) and all_finite(kd) and all_finite(tau)):
            return self._damp(state, "nan_command")
        if kp.min() < 0 or kd.min() < 0:
            return self._damp(state, "bad_command")

        interventions: list[str] = []
        active, damped, tmp = self._active, self._damped, self._tmp

        # Gains within what the hardware accepts.
        if (kp > self._kp_max).any() or (kd > self._kd_max).any():
            np.minimum(kp, self._kp_max, out=kp)
            np.minimum(kd, self._kd_max, out=kd)
            interventions.append("gain_limit")
        np.greater(kp, 0.0, out=active)
        np.greater(kd, 0.0, out=damped)

        # Velocity target within the joint's velocity limit.
        _clip(dq, self._neg_vel_max, self._vel_max, tmp)
        if self._replace(dq, tmp, damped):
            interventions.append("velocity_limit")

        # Position target: clamp, rate limit, clamp again (the limits win over the rate limit).
        _clip(q, self._lo, self._hi, tmp)
        clamped = self._replace(q, tmp, active)  # (the clamp before the rate limit; reported below)
        if self._streamed:
            if clamped:
                interventions.append("joint_limit")
            self._feedforward_limit(tau, interventions)
        else:
            ref = self._ref  # rate-limit reference: previous target where it had stiffness, else measured q
            np.copyto(ref, self._q)
            np.copyto(ref, self._prev_q, where=self._prev_active)
            np.subtract(ref, self._step, out=tmp)
            np.maximum(q, tmp, out=tmp)
            np.add(ref, self._step, out=ref)
            np.minimum(tmp, ref, out=tmp)
            rated = self._replace(q, tmp, active)
            _clip(q, self._lo, self._hi, tmp)
            if self._replace(q, tmp, active) or clamped:
                interventions.append("joint_limit")
            if rated:
                interventions.append("rate_limit")
            self._torque_budget(q, dq, kp, kd, tau, interventions)
        np.copyto(self._prev_q, q)
        np.greater(kp, 0.0, out=self._prev_active)
        return JointCommand(self.hw.joint_names, q, dq, kp, kd, tau), interventions

    def _feedforward_limit(self, tau: np.ndarray, interventions: list[str]) -> None:
        """tau_ff alone within the budget (in place): all of it a streamed target gets, the first step otherwise."""
        if (np.abs(tau) > self._tau_aim).any():
            _clip(tau, -self._tau_aim, self._tau_aim, tau)
            interventions.append("feedforward_limit")

    def _torque_budget(self, q: np.ndarray, dq: np.ndarray, kp: np.ndarray, kd: np.ndarray, tau: np.ndarray,
                       interventions: list[str]) -> None:
        """Fit kp (q* - q) + kd (dq* - dq) + tau_ff within the budget at the measured state; edits in place.

        All (J,). Works against the aim `_tau_aim` (the budget less 1e-9 of it) so rounding stays inside
        the budget. Huge measured values may overflow to inf in intermediate products; every such case
        is clipped to the budget, so the warnings are silenced here.
        """
        budget, qm = self._tau_aim, self._q
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            self._feedforward_limit(tau, interventions)
            # The part q* cannot change: kd (dq* - dq) + tau_ff.
            fixed, vel_err = self._fixed, self._tau
            np.subtract(dq, self._dq, out=vel_err)
            np.multiply(kd, vel_err, out=fixed)
            fixed += tau
            over = np.abs(fixed) > budget
            if over.any():
                # |tau_ff| <= B, so [-B - tau_ff, B - tau_ff] holds 0: the lowered kd keeps its sign (>= 0).
                v, t, b = vel_err[over], tau[over], budget[over]
                kd[over] = np.clip(kd[over] * v, -b - t, b - t) / v
                fixed[over] = kd[over] * v + t
                interventions.append("damping_limit")
            # The whole torque at the measured state.
            total = self._tmp
            np.subtract(q, qm, out=total)
            total *= kp
            total += fixed
            over = np.abs(total) > budget
            over &= self._active  # kp = 0: total = fixed, in budget already (up to rounding, within the margin)
            if not over.any():
                return
            k, f, b, m = kp[over], fixed[over], budget[over], qm[over]
            lo, hi = self._lo[over], self._hi[over]
            # Targets keeping the torque in budget: q* in [m + (-b - f) / k, m + (b - f) / k] (k > 0 here:
            # a joint with kp = 0 has total = fixed, already in budget), intersected with the limits.
            w_lo = np.maximum(m + (-b - f) / k, lo)
            w_hi = np.minimum(m + (b - f) / k, hi)
            fits = w_lo <= w_hi
            target = np.where(fits, np.clip(q[over], w_lo, np.maximum(w_lo, w_hi)), np.clip(m - f / k, lo, hi))
            q[over] = target
            interventions.append("torque_limit")
            if not fits.all():
                # Nearest limit, and kp lowered so that kp (q* - q) + fixed = the edge of the budget.
                stiff = ~fits
                e = target[stiff] - m[stiff]  # != 0: q itself would otherwise fit inside the limits
                k_new = np.clip(k[stiff] * e, -b[stiff] - f[stiff], b[stiff] - f[stiff]) / e
                # Only ever lowered: when rounding leaves the fixed part a hair past the aim, the interval
                # misses 0 and bound / e (e tiny) would be huge.
                k[stiff] = np.where(np.isfinite(k_new), np.clip(k_new, 0.0, k[stiff]), 0.0)
                kp[over] = k
                interventions.append("stiffness_limit")

    def _replace(self, a: np.ndarray, new: np.ndarray, effective: np.ndarray) -> bool:
        """a <- new everywhere; True when an entry that has a physical effect (`effective`) changed."""
        np.not_equal(a, new, out=self._changed)
        self._changed &= effective
        np.copyto(a, new)
        return bool(self._changed.any())
