"""The fixed-rate deploy loop: read state -> check -> command for the mode -> filter -> send.

Deadlines sit on an absolute grid t_k = t0 + k * period, so sleep jitter never accumulates. After an
overrun the missed deadlines are skipped and counted (never run back to back to catch up: a burst of
stale commands is worse than a late one). Nothing reaches the robot without `SafetyFilter.filter_command`.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Protocol

import numpy as np

from robo_rl.deploy.hardware import HardwareSpec
from robo_rl.deploy.robot import JointCommand, RobotInterface, RobotState
from robo_rl.deploy.safety import STILL_GYRO_RAD_S, SafetyFilter
from robo_rl.deploy.state_machine import Mode, StateMachine, ramp_command

_COMMAND_FAULTS = ("invalid_state", "bad_command", "nan_command")
"""Filter interventions that mean the wanted command was unusable: the loop goes to DAMP."""

SPIN_S = 0.002
"""The real-time loop busy-waits this long before each deadline (capped at a quarter of the period).

Measured on the 2-core dev VM (idle): a plain time.sleep to a 50 Hz deadline wakes p99 0.9-1.1 ms late
(max 3 ms); sleeping to 2 ms before it and spinning the rest, p99 0.008-0.06 ms. The price is the spin's
CPU time, 10 % of one core at 50 Hz. docs/benchmarks.md (bench_deploy) has the runs."""

REALTIME_PRIORITY = 50
"""SCHED_FIFO priority the deploy loop asks for on a real-time clock (ros2_control's default thread priority).

With it, ticks started p99 0.03-0.17 ms late over DDS in bench_deploy on the 2-core dev VM, against
0.11-1.4 ms at normal priority (the twin and DDS threads sharing the cores preempt a normal thread)."""

STILL_TIMEOUT_S = 5.0
"""RAMP waits (limp) at most this long for a still base before the gravity check; then it faults."""


class PolicyStep(Protocol):
    """A policy as the loop sees it: state in, position targets out, in the robot's joint order.

    Optional: `trained_through_stream` (bool, default False), the policy was trained through the robot's setpoint
    stream; the safety filter then leaves its targets' step and torque to the stream (SafetyFilter)."""

    kp: np.ndarray
    """(J,) stiffness used in POLICY mode, robot order."""
    kd: np.ndarray
    """(J,) damping used in POLICY mode, robot order."""

    def __call__(self, state: RobotState) -> np.ndarray:
        """(J,) position targets in the robot's joint order (hw.joint_names)."""
        ...

    def reset(self) -> None:
        """Clear history (observation stack, last action) before POLICY starts."""
        ...


def timing_summary(x: np.ndarray, prefix: str) -> dict[str, float]:
    """mean, std, p50, p99 and max of the samples `x` (s), keys prefixed; NaN when empty."""
    if x.size == 0:
        return {f"{prefix}_{k}": math.nan for k in ("mean", "std", "p50", "p99", "max")}
    p50, p99 = np.percentile(x, (50, 99))
    return {
        f"{prefix}_mean": float(x.mean()),
        f"{prefix}_std": float(x.std()),
        f"{prefix}_p50": float(p50),
        f"{prefix}_p99": float(p99),
        f"{prefix}_max": float(x.max()),
    }


def _gains(name: str, value: np.ndarray, n: int) -> np.ndarray:
    arr = np.asarray(value, dtype=np.float64)
    if arr.shape != (n,) or not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError(f"{name} must be {n} finite non-negative numbers (robot joint order), got shape {arr.shape}")
    return arr


def precise_sleep(spin_s: float) -> Callable[[float], None]:
    """A sleep function that sleeps until `spin_s` before the end, then busy-waits the rest.

    OS timer wake-ups are late by up to milliseconds on a loaded or virtual machine; a thread already
    running at the deadline is not. With spin_s = 0 it is time.sleep.
    """
    if spin_s <= 0:
        return time.sleep

    def sleep(seconds: float) -> None:
        end = time.perf_counter() + seconds
        if seconds > spin_s:
            time.sleep(seconds - spin_s)
        while time.perf_counter() < end:
            pass

    return sleep


def check_realtime_priority(priority: object) -> int:
    """`priority` if it is an integer in [0, 99] (0: normal scheduling); ValueError (one line) otherwise."""
    if isinstance(priority, bool) or not isinstance(priority, int) or not 0 <= priority <= 99:
        raise ValueError(f"realtime_priority = {priority!r}: must be an integer in [0, 99] (0: normal scheduling)")
    return priority


def enter_realtime(priority: int) -> tuple[Callable[[], None], str | None]:
    """Put the calling thread under SCHED_FIFO at `priority` (1-99; 0 does nothing).

    Returns (undo, note): `undo()` restores the thread's previous policy; `note` is one line saying why
    the request was refused (no permission: run as root, give the user an rtprio limit in
    /etc/security/limits.conf, or CAP_SYS_NICE), else None. A refusal leaves the thread as it was.
    """
    if priority == 0:
        return (lambda: None), None
    if not hasattr(os, "sched_setscheduler"):
        return (lambda: None), "real-time priority: not available on this OS; running at normal priority"
    before_policy, before_param = os.sched_getscheduler(0), os.sched_getparam(0)
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
    except OSError as exc:
        return (lambda: None), (f"real-time priority {priority} refused ({exc.strerror}); running at normal "
                                f"priority, ticks may start late (README: Deploy)")

    def undo() -> None:
        with contextlib.suppress(OSError):
            os.sched_setscheduler(0, before_policy, before_param)

    return undo, None


class Controller:
    """Runs one robot at a fixed rate through the mode state machine and the safety filter.

    Args:
        robot: the robot (real, DDS, ROS 2 node or MuJoCo twin).
        hw: its description; margins, gains for RAMP/READY and the default rate.
        policy: used in POLICY mode; None allows every mode but POLICY.
        default_q: (J,) pose RAMP moves to and READY holds, robot order.
        rate_hz: loop rate; defaults to hw.control_rate_hz.
        clock: monotonic time source (s); injectable for tests.
        sleep: sleep function (s); injectable for tests. Default: `precise_sleep` spinning the last
            min(SPIN_S, period / 4) of every wait, so a tick starts within microseconds of its deadline.
        stats_window: how many recent periods the timing statistics cover.
        realtime_priority: 1-99: the thread running `run` asks for SCHED_FIFO at this priority (refused
            without permission: `realtime_note` says so and the loop runs at normal priority); 0: normal
            scheduling. Only for a real-time clock: a loop that never sleeps would hog its core.

    Mode requests (`request_ramp`, `start_policy`, `stop`, `estop`, `reset`) may come from another
    thread (keyboard, joystick); they take effect on the next tick, at most one period later.

    READY holds `default_q`, or the trajectory given to `hold` (reset modules move the robot that way,
    through the same filter). `on_tick`, when set, is called at the end of every tick with (now, state
    read, command sent), from the control thread (recording, rewards, diagnostics); an exception in it is
    counted in `hook_errors` and never stops the loop.

    Legged robots: RAMP starts limp and waits until the gyro is quiet, then checks that the IMU's
    gravity points down in the hardware's quaternion order (`SafetyFilter.check_upright`); only then
    do the gains rise. A failed check faults ("imu_check") with the reason in `last_error`.
    """

    def __init__(
        self,
        robot: RobotInterface,
        hw: HardwareSpec,
        policy: PolicyStep | None,
        default_q: np.ndarray,
        rate_hz: float | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] | None = None,
        stats_window: int = 10_000,
        realtime_priority: int = 0,
    ):
        n = len(hw.joint_names)
        q0 = np.asarray(default_q, dtype=np.float64)
        if q0.shape != (n,) or not np.all(np.isfinite(q0)):
            raise ValueError(f"default_q must be {n} finite numbers (robot joint order), got shape {q0.shape}")
        outside = [hw.joint_names[i] for i in np.flatnonzero((q0 < hw.joint_lower) | (q0 > hw.joint_upper))]
        if outside:
            raise ValueError(f"default_q is outside the joint limits for {', '.join(outside)}")
        rate = hw.control_rate_hz if rate_hz is None else rate_hz
        if not 0 < rate <= 10_000:
            raise ValueError(f"rate_hz = {rate!r}: must be in (0, 10000]")
        check_realtime_priority(realtime_priority)
        if policy is not None:
            self._policy_kp = _gains("policy.kp", policy.kp, n)
            self._policy_kd = _gains("policy.kd", policy.kd, n)
        self.robot = robot
        self.hw = hw
        self.policy = policy
        self.default_q = q0
        self._clock = clock
        self.realtime_priority = realtime_priority
        self.realtime_note: str | None = None  # why the real-time priority was refused, if it was
        self._sleep = sleep  # None: precise_sleep, sized to the period when `run` starts
        self.safety = SafetyFilter(hw, control_dt=1.0 / rate,
                                   trained_through_stream=bool(getattr(policy, "trained_through_stream", False)))
        self.period = 1.0 / rate
        self.state_machine = StateMachine(hw.safety.ramp_time_s, now=clock())
        self._lock = threading.RLock()
        self._zeros = np.zeros(n)  # (J,) dq / tau_ff of every built command; the filter copies it
        self._ramp_q: np.ndarray | None = None  # (J,) pose captured once RAMP may raise the gains
        self._ramp_requested_at = 0.0
        self._gravity_checked = False  # the start-up gravity check passed since the last request_ramp
        self.ticks = 0
        self.missed_ticks = 0
        self.last_fault: str | None = None
        self.last_error: str | None = None
        self.last_interventions: list[str] = []
        self.last_command: JointCommand | None = None  # the last filtered command sent
        self._hold: Callable[[float], np.ndarray] | None = None  # READY target trajectory; None: default_q
        self.on_tick: Callable[[float, RobotState | None, JointCommand], None] | None = None
        self.on_warning: Callable[[str], None] | None = None  # one line, e.g. a refused real-time priority
        self.hook_errors = 0
        self.last_hook_error: str | None = None
        self.intervention_counts: Counter[str] = Counter()
        self._window = stats_window
        self._periods = np.zeros(stats_window)  # ring buffer (s)
        self._lateness = np.zeros(stats_window)  # ring buffer (s)
        self._n_periods = 0
        self._n_lateness = 0

    # ------------------------------------------------------------------------------------------- mode requests

    @property
    def mode(self) -> Mode:
        """Current mode."""
        return self.state_machine.mode

    @property
    def clock(self) -> Callable[[], float]:
        """The controller's time source (s)."""
        return self._clock

    @property
    def period(self) -> float:
        """Control period (s); setting it also sets the safety filter's per-tick step limit."""
        return self._period

    @period.setter
    def period(self, value: float) -> None:
        self.safety.control_dt = value  # validates
        self._period = float(value)

    def request_ramp(self) -> None:
        """PASSIVE -> RAMP (soft start to default_q); ValueError from any other mode."""
        with self._lock:
            now = self._clock()
            self.state_machine.request_ramp(now)
            self._ramp_q = None
            self._ramp_requested_at = now
            self._gravity_checked = False
            self._hold = None

    def hold(self, target: Callable[[float], np.ndarray] | None) -> None:
        """READY holds target(now), a (J,) pose in robot order, instead of default_q; None: default_q again.

        The trajectory is evaluated every tick; a wrong shape or NaN faults to DAMP ("command_error").
        """
        with self._lock:
            self._hold = target

    def ready_target(self, now: float) -> np.ndarray:
        """(J,) pose READY holds at `now` (a fresh array)."""
        with self._lock:
            return np.array(self.default_q if self._hold is None else self._hold(now), dtype=np.float64)

    def end_policy(self) -> None:
        """POLICY -> READY holding the last sent position target (no jump); ValueError outside POLICY."""
        with self._lock:
            self.state_machine.end_policy(self._clock())
            if self.last_command is not None:
                q = self.last_command.q.copy()
                self._hold = lambda now: q

    def start_policy(self) -> None:
        """READY -> POLICY after `policy.reset()`; ValueError without a policy or outside READY."""
        with self._lock:
            if self.policy is None:
                raise ValueError("start_policy: no policy loaded")
            if self.state_machine.mode is not Mode.READY:
                raise ValueError(f"start_policy in mode {self.state_machine.mode.name}: only allowed from READY")
            self.policy.reset()
            self.state_machine.start_policy(self._clock())

    def stop(self, reason: str = "stop") -> None:
        """-> DAMP from any mode but ESTOP (`reason`: the fault reason it reports, e.g. "fall")."""
        with self._lock:
            self.state_machine.stop(self._clock(), reason)

    def estop(self, reason: str = "estop") -> None:
        """-> ESTOP, latched in both the state machine and the safety filter; `reason` is kept as the fault reason."""
        with self._lock:
            self.safety.estop()
            self.state_machine.estop(self._clock(), reason)

    def reset(self) -> None:
        """DAMP or ESTOP -> PASSIVE and release the e-stop; ValueError from any other mode."""
        with self._lock:
            self.state_machine.reset(self._clock())
            self.safety.reset_estop()

    def _fault(self, reason: str, now: float) -> None:
        self.last_fault = reason
        self.state_machine.fault(reason, now)

    # ------------------------------------------------------------------------------------------- one tick

    def _command_for(self, mode: Mode, state: RobotState, now: float) -> JointCommand:
        """The wanted (unfiltered) command for a mode other than DAMP / ESTOP, robot order."""
        hw, zeros = self.hw, self._zeros
        if mode is Mode.PASSIVE:
            return JointCommand(hw.joint_names, self.safety.joint_positions(state), zeros, zeros, zeros, zeros)
        if mode in (Mode.RAMP, Mode.READY) and not self._gravity_checked:
            hold = self._ramp_gate(state, now)  # READY too: a zero ramp_time_s (unsafe override) skips RAMP
            if hold is not None:
                return hold
            self._gravity_checked = True
        if mode is Mode.RAMP:
            if self._ramp_q is None:
                self._ramp_q = self.safety.joint_positions(state)
            alpha = self.state_machine.ramp_alpha(now)
            q, kp, kd = ramp_command(self._ramp_q, self.default_q, hw.kp, hw.kd, alpha)
            return JointCommand(hw.joint_names, q, zeros, kp, kd, zeros)
        if mode is Mode.READY:
            q = self.default_q if self._hold is None else np.asarray(self._hold(now), dtype=np.float64)
            if q.shape != zeros.shape:
                raise ValueError(f"READY hold target has shape {q.shape}, expected {zeros.shape}")
            return JointCommand(hw.joint_names, q, zeros, hw.kp, hw.kd, zeros)
        q = np.asarray(self.policy(state), dtype=np.float64)  # (J,)
        if q.shape != zeros.shape:
            raise ValueError(f"policy returned shape {q.shape}, expected {zeros.shape}")
        return JointCommand(hw.joint_names, q, zeros, self._policy_kp, self._policy_kd, zeros)

    def _ramp_gate(self, state: RobotState, now: float) -> JointCommand | None:
        """Before the gains rise: a limp command while the base moves; a fault when the IMU is wrong."""
        still, problem = self.safety.check_upright(state)
        if problem is not None:
            self.last_error = problem
            self._fault("imu_check", now)
            return self.safety.damping_command(state)
        if still:
            return None
        if now - self._ramp_requested_at > STILL_TIMEOUT_S:
            self.last_error = (f"base never still for the gravity check before RAMP (|gyro| >= {STILL_GYRO_RAD_S} "
                               f"rad/s for {STILL_TIMEOUT_S:g} s)")
            self._fault("imu_check", now)
            return self.safety.damping_command(state)
        self.state_machine.hold_ramp(now)
        zeros = self._zeros
        return JointCommand(self.hw.joint_names, self.safety.joint_positions(state), zeros, zeros, zeros, zeros)

    def _state_fault(self, reason: str, state: RobotState, now: float) -> None:
        """A state fault; attitude and overspeed faults also leave a one-line detail in last_error."""
        if reason == "overspeed":
            self.last_error = self.safety.overspeed_detail(state)
        elif reason == "attitude" and self.state_machine.mode in (Mode.PASSIVE, Mode.RAMP):
            # Before the policy runs, a tilted reading is the start-up gravity check failing: report it as
            # such, with the quaternion_order hint when the other order reads level.
            self.last_error = self.safety.upright_detail(state)
            reason = "imu_check"
        self._fault(reason, now)

    def tick(self, now: float) -> JointCommand:
        """One control step at time `now`; returns the (filtered) command that was sent."""
        with self._lock:
            self.ticks += 1
            sm = self.state_machine
            try:
                state: RobotState | None = self.robot.read_state()
            except Exception:  # a broken transport must not kill the loop: damp on the last known pose
                state = None
                self._fault("read_error", now)
            sm.update(now)
            if state is not None:
                reason = self.safety.check_state(state, now)
                if reason is not None:
                    self._state_fault(reason, state, now)
            mode = sm.mode
            cmd: JointCommand | None = None
            if state is not None and mode not in (Mode.DAMP, Mode.ESTOP):
                try:
                    cmd = self._command_for(mode, state, now)
                except Exception as exc:
                    self.last_error = f"{type(exc).__name__}: {exc}"  # kept for the operator and the logs
                    self._fault("policy_error" if mode is Mode.POLICY else "command_error", now)
            if cmd is None:
                cmd = self.safety.damping_command(state)
            safe, interventions = self.safety.filter_command(cmd, state)
            bad = next((i for i in interventions if i in _COMMAND_FAULTS), None)
            if bad is not None and sm.mode not in (Mode.DAMP, Mode.ESTOP):
                self._fault(bad, now)  # this tick already sends damping; later ticks stay in DAMP
            self.last_interventions = interventions
            self.intervention_counts.update(interventions)
            self.robot.send_command(safe)
            self.last_command = safe
            if self.on_tick is not None:
                try:
                    self.on_tick(now, state, safe)
                except Exception as exc:  # recording or reward code must never stop the robot's loop
                    self.hook_errors += 1
                    self.last_hook_error = f"{type(exc).__name__}: {exc}"
            return safe

    # ------------------------------------------------------------------------------------------- loop

    def _record(self, buf: np.ndarray, count: int, value: float) -> int:
        buf[count % self._window] = value
        return count + 1

    def run(self, duration_s: float | None = None, stop_event: threading.Event | None = None) -> None:
        """Tick on the absolute grid t0 + k * period until `duration_s` has elapsed or `stop_event` is set.

        Missed deadlines after an overrun are skipped and counted in `missed_ticks`. Any exception
        (KeyboardInterrupt included) runs `shutdown()` and is re-raised. The thread runs at
        `realtime_priority` while in here.
        """
        period = self.period
        sleep = self._sleep or precise_sleep(min(SPIN_S, 0.25 * period))
        leave_realtime, self.realtime_note = enter_realtime(self.realtime_priority)
        if self.realtime_note is not None and self.on_warning is not None:
            self.on_warning(self.realtime_note)
        t0 = self._clock()
        k = 0
        last_start: float | None = None
        try:
            while True:
                if duration_s is not None and k * period >= duration_s - 1e-9:
                    break
                if stop_event is not None and stop_event.is_set():
                    break
                deadline = t0 + k * period
                now = self._clock()
                if now < deadline:
                    sleep(deadline - now)
                    now = self._clock()
                self._n_lateness = self._record(self._lateness, self._n_lateness, now - deadline)
                if last_start is not None:
                    self._n_periods = self._record(self._periods, self._n_periods, now - last_start)
                last_start = now
                self.tick(now)
                # Next deadline: the first grid point not yet passed (a deadline exactly now still runs).
                after = self._clock()
                nxt = max(k + 1, math.ceil((after - t0) / period - 1e-9))
                self.missed_ticks += nxt - (k + 1)
                k = nxt
        except BaseException:
            with contextlib.suppress(Exception):  # the original error is the one worth seeing
                self.shutdown()
            raise
        finally:
            leave_realtime()

    def shutdown(self) -> None:
        """Stop: DAMP (ESTOP stays ESTOP) and send one last damping command (what Ctrl-C does)."""
        with self._lock:
            now = self._clock()
            self.state_machine.stop(now, "shutdown")
            try:
                state: RobotState | None = self.robot.read_state()
            except Exception:
                state = None
            safe, _ = self.safety.filter_command(self.safety.damping_command(state), state)
            self.robot.send_command(safe)

    # ------------------------------------------------------------------------------------------- reporting

    def stats(self) -> dict[str, float]:
        """Loop timing: ticks, missed_ticks, period_* and lateness_* (count, mean, std, p50, p99, max; s).

        Counts are totals; the other statistics cover the last `stats_window` samples.
        """
        out: dict[str, float] = {"ticks": self.ticks, "missed_ticks": self.missed_ticks}
        for name, buf, count in (("period", self._periods, self._n_periods), ("lateness", self._lateness,
                                                                                  self._n_lateness)):
            out[f"{name}_count"] = count
            out.update(timing_summary(buf[: min(count, self._window)], name))
        return out

    def reset_stats(self) -> None:
        """Start the timing statistics and the missed-tick count afresh (e.g. once POLICY runs)."""
        with self._lock:
            self._n_periods = self._n_lateness = 0
            self.missed_ticks = 0

    def status_line(self) -> str:
        """One line for live display: mode, ticks, missed ticks, p99 period, last fault."""
        s = self.stats()
        p99 = s["period_p99"]
        p99_text = "-" if math.isnan(p99) else f"{p99 * 1e3:.1f}ms"
        return (
            f"mode={self.mode.name} ticks={self.ticks} missed={self.missed_ticks} "
            f"p99_period={p99_text} last_fault={self.last_fault or '-'}"
        )
