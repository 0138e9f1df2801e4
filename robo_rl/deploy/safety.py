"""SafetyFilter: the last stage before any command reaches the robot (DESIGN.md section 4).

Checks every state (NaN/Inf, stale-state watchdog, missing joints, attitude) and makes every command
safe (NaN guard, joint-limit clamp with margin, per-tick rate limit, torque check, latched e-stop).
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

STATE_FAULTS = ("bad_state", "nan_state", "stale_state", "missing_joint", "missing_imu", "attitude")
"""Reasons `check_state` may return."""

INTERVENTIONS = ("estop", "invalid_state", "bad_command", "nan_command", "joint_limit", "rate_limit", "torque_limit")
"""Names `filter_command` may report."""


def all_finite(a: np.ndarray) -> bool:
    """True when no element of `a` is NaN or Inf.

    One reduction, no temporary array: any NaN or Inf makes the sum non-finite (finite joint values
    never sum past 1e308).
    """
    return math.isfinite(float(np.add.reduce(a, axis=None)))


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


def quat_roll_pitch(quat: np.ndarray, order: str = "wxyz") -> tuple[float, float]:
    """Roll and pitch (rad, ZYX Euler) of a base orientation quaternion; it need not be unit length.

    Args:
        quat: (4,) quaternion in `order`.
        order: "wxyz" or "xyzw".

    Returns:
        (roll, pitch); roll in (-pi, pi], pitch in [-pi/2, pi/2]. A base turned upside down shows up
        as |roll| near pi.
    """
    if order == "wxyz":
        w, x, y, z = (float(v) for v in quat)
    elif order == "xyzw":
        x, y, z, w = (float(v) for v in quat)
    else:
        raise ValueError(f"quaternion order {order!r}: allowed values are wxyz, xyzw")
    n = w * w + x * x + y * y + z * z
    # Both formulas are written scale-free (divided by |q|^2) so a slightly non-unit IMU quaternion works.
    roll = math.atan2(2.0 * (w * x + y * z), w * w - x * x - y * y + z * z)
    pitch = math.asin(max(-1.0, min(1.0, 2.0 * (w * y - x * z) / n)))
    return roll, pitch


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

    Call `check_state` once per tick before computing a command and `filter_command` on every command
    before it is sent. Stateful: remembers the previous filtered target (rate limit), the last stamp
    (frozen-clock watchdog), the last finite measured pose (damping target) and the latched e-stop.
    """

    def __init__(self, hw: HardwareSpec):
        self.hw = hw
        self.cfg = hw.safety
        n = len(hw.joint_names)
        self._lo = hw.joint_lower + self.cfg.joint_limit_margin  # (J,)
        self._hi = hw.joint_upper - self.cfg.joint_limit_margin  # (J,)
        # A margin wider than half the range would invert the bounds; the midpoint is the only safe target.
        mid = 0.5 * (hw.joint_lower + hw.joint_upper)
        inverted = self._lo > self._hi
        self._lo[inverted] = mid[inverted]
        self._hi[inverted] = mid[inverted]
        self._tau_max = self.cfg.torque_margin * hw.torque_limits  # (J,)
        self._damping_kd = np.full(n, self.cfg.damping_kd)  # (J,)
        self._zeros = np.zeros(n)  # (J,) read-only by convention
        self._state_names = _NameCache(hw.joint_names)
        self._cmd_names = _NameCache(hw.joint_names)
        # Scratch (J,) buffers, reused every tick.
        self._q = np.zeros(n)  # measured q, robot order
        self._dq = np.zeros(n)  # measured dq, robot order
        self._ref = np.zeros(n)
        self._tmp = np.zeros(n)
        self._tau = np.zeros(n)
        self._changed = np.zeros(n, dtype=bool)
        self._active = np.zeros(n, dtype=bool)  # kp > 0 in the command being filtered
        # Memory across ticks.
        self._q_known = np.clip(np.zeros(n), hw.joint_lower, hw.joint_upper)  # last finite measured q
        self._prev_q = np.zeros(n)  # previous filtered position target
        self._prev_active = np.zeros(n, dtype=bool)  # previous target had stiffness (kp > 0)
        self._last_stamp: float | None = None
        self._stamp_advanced_at = 0.0
        self._estopped = False

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
        ok, _ = self._state_names.lookup(state.joint_names)
        if not ok:
            return "missing_joint"
        if self.hw.kind == "legged" and self.cfg.max_tilt_rad is not None:
            if state.imu_quat is None:
                return "missing_imu"
            if not np.any(state.imu_quat):
                return "bad_state"
            roll, pitch = quat_roll_pitch(state.imu_quat, self.hw.quaternion_order)
            if abs(roll) > self.cfg.max_tilt_rad or abs(pitch) > self.cfg.max_tilt_rad:
                return "attitude"
        return None

    def joint_positions(self, state: RobotState) -> np.ndarray:
        """Measured q in robot order, (J,) fresh array; ValueError when the state cannot be mapped or is NaN."""
        if not all(self._load_state(state)):
            raise ValueError(f"state cannot be mapped onto {self.hw.robot!r} joints (missing joint, bad shape or NaN)")
        return self._q.copy()

    # ----------------------------------------------------------------------------------------------- commands

    def damping_command(self, state: RobotState | None) -> JointCommand:
        """Zero stiffness, `safety.damping_kd` damping, q = measured q, in robot order.

        Args:
            state: newest reading, or None when none could be read. Joints that are missing or NaN in it
                keep the last finite measured position (with kp = 0 the target exerts no torque anyway).
        """
        mapped = state is not None and self._load_state(state)[0]
        q = self._q_known.copy()  # (J,)
        if mapped:
            np.copyto(q, self._q, where=np.isfinite(self._q))
            np.copyto(self._q_known, q)
        return JointCommand(self.hw.joint_names, q, self._zeros.copy(), self._zeros.copy(), self._damping_kd.copy(),
                            self._zeros.copy())

    def _damp(self, state: RobotState | None, reason: str) -> tuple[JointCommand, list[str]]:
        self._prev_active[:] = False
        return self.damping_command(state), [reason]

    def _gather(self, a: np.ndarray, idx: np.ndarray | None) -> np.ndarray:
        """A fresh float64 (J,) copy of `a` in robot order."""
        return np.array(a, dtype=np.float64) if idx is None else np.asarray(a, dtype=np.float64)[idx]

    def filter_command(self, cmd: JointCommand, state: RobotState | None) -> tuple[JointCommand, list[str]]:
        """Make `cmd` safe to send.

        In order: latched e-stop -> damping ("estop"); unusable state -> damping ("invalid_state");
        command not covering the robot's joints, misshapen or with negative gains -> damping
        ("bad_command"); NaN/Inf anywhere -> damping ("nan_command"); position targets clamped to
        [lower + margin, upper - margin] ("joint_limit"); per-tick change limited to max_position_step
        from the previous filtered target, or from measured q where the previous target had kp = 0
        ("rate_limit"); targets whose PD torque kp (q* - q) + kd (dq* - dq) + tau_ff would exceed
        torque_margin * torque_limits moved so it sits exactly at the limit ("torque_limit").
        The torque check runs last: it is the actuator's hard bound. Clamping a target of a joint
        with kp = 0 has no physical effect and is not reported.

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
        active, changed, tmp = self._active, self._changed, self._tmp
        np.greater(kp, 0.0, out=active)

        np.clip(q, self._lo, self._hi, out=tmp)
        if self._replace(q, tmp):
            interventions.append("joint_limit")

        ref = self._ref  # rate-limit reference: previous target where it had stiffness, else measured q
        np.copyto(ref, self._q)
        np.copyto(ref, self._prev_q, where=self._prev_active)
        step = self.cfg.max_position_step
        np.clip(q, ref - step, ref + step, out=tmp)
        if self._replace(q, tmp):
            interventions.append("rate_limit")

        # tau = kp (q* - q) + kd (dq* - dq) + tau_ff, all (J,)
        tau_pd = self._tau
        np.subtract(q, self._q, out=tau_pd)
        tau_pd *= kp
        np.subtract(dq, self._dq, out=tmp)
        tmp *= kd
        tmp += tau
        tau_pd += tmp  # tmp keeps the part q* cannot change: kd (dq* - dq) + tau_ff
        np.greater(np.abs(tau_pd), self._tau_max, out=changed)
        changed &= active
        if changed.any():
            np.clip(tau_pd, -self._tau_max, self._tau_max, out=tau_pd)
            q[changed] = self._q[changed] + (tau_pd[changed] - tmp[changed]) / kp[changed]
            interventions.append("torque_limit")

        np.copyto(self._prev_q, q)
        np.copyto(self._prev_active, active)
        return JointCommand(self.hw.joint_names, q, dq, kp, kd, tau), interventions

    def _replace(self, q: np.ndarray, new: np.ndarray) -> bool:
        """q <- new everywhere; True when a joint with stiffness changed."""
        np.not_equal(q, new, out=self._changed)
        self._changed &= self._active
        np.copyto(q, new)
        return bool(self._changed.any())
