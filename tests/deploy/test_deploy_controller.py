"""Controller: every bad input ends in DAMP/ESTOP with nothing but safe commands sent; loop timing."""

import math
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from robo_rl.deploy.controller import SPIN_S, Controller, precise_sleep
from robo_rl.deploy.hardware import HardwareSpec, SafetyConfig
from robo_rl.deploy.robot import JointCommand, RobotState
from robo_rl.deploy.state_machine import Mode

NAMES = ("j0", "j1", "j2")
RATE = 50.0
PERIOD = 1.0 / RATE


def arm_hw(kind: str = "arm", names=NAMES, **safety) -> HardwareSpec:
    """Toy robot: limits +-1 rad, 20 rad/s, torque limit 10 N m, kp <= 500, kd <= 10, 50 Hz, ramp 0.2 s."""
    n = len(names)
    cfg = dict(state_timeout_s=0.1, ramp_time_s=0.2, damping_kd=1.5, max_position_step=0.25)
    cfg.update(safety)
    return HardwareSpec(
        robot="toy",
        kind=kind,
        joint_names=tuple(names),
        joint_lower=np.full(n, -1.0),
        joint_upper=np.full(n, 1.0),
        velocity_limits=np.full(n, 20.0),
        torque_limits=np.full(n, 10.0),
        kp=np.full(n, 20.0),
        kd=np.full(n, 1.0),
        kp_max=np.full(n, 500.0),
        kd_max=np.full(n, 10.0),
        control_rate_hz=RATE,
        safety=SafetyConfig(**cfg),
    )


class FakeClock:
    """Time that only moves when slept through or advanced."""

    def __init__(self, t: float = 100.0):
        self.t = t

    def __call__(self) -> float:
        return self.t

    def sleep(self, dt: float) -> None:
        assert dt >= 0
        self.t += dt


class FakeRobot:
    """In-memory RobotInterface: reports `q` under `names`, records (state read, command sent) pairs."""

    def __init__(self, clock, names=NAMES, q=(0.1, -0.2, 0.3), quat=None, gyro=None):
        self.clock = clock
        self.names = tuple(names)
        self.q = np.array(q, dtype=np.float64)
        self.dq = np.zeros(len(names))
        self.quat = None if quat is None else np.asarray(quat, dtype=np.float64)
        self.gyro = None if gyro is None else np.asarray(gyro, dtype=np.float64)
        self.frozen_received: float | None = None  # set: the transport stops delivering
        self.frozen_stamp: float | None = None  # set: the robot's own clock stops
        self.on_read = None  # hook(robot) called on every read
        self.reads = 0
        self.last_state: RobotState | None = None
        self.sent: list[tuple[RobotState, JointCommand]] = []

    def read_state(self) -> RobotState:
        self.reads += 1
        if self.on_read is not None:
            self.on_read(self)
        now = self.clock()
        self.last_state = RobotState(
            stamp=now if self.frozen_stamp is None else self.frozen_stamp,
            received=now if self.frozen_received is None else self.frozen_received,
            joint_names=self.names,
            q=self.q.copy(),
            dq=self.dq.copy(),
            imu_quat=None if self.quat is None else self.quat.copy(),
            imu_gyro=None if self.gyro is None else self.gyro.copy(),
        )
        return self.last_state

    def send_command(self, command: JointCommand) -> None:
        self.sent.append((self.last_state, command))

    def close(self) -> None:
        pass


class FakePolicy:
    """Returns fixed targets (robot order), or raises when `error` is set."""

    def __init__(self, targets, kp=50.0, kd=2.0, n=3):
        self.targets = np.asarray(targets, dtype=np.float64)
        self.kp, self.kd = np.full(n, kp), np.full(n, kd)
        self.error: Exception | None = None
        self.resets = 0
        self.calls = 0

    def __call__(self, state: RobotState) -> np.ndarray:
        self.calls += 1
        if self.error is not None:
            raise self.error
        return self.targets.copy()

    def reset(self) -> None:
        self.resets += 1


def make(hw=None, policy=None, default_q=(0.0, 0.0, 0.0), **robot_kw):
    hw = hw or arm_hw()
    clock = FakeClock()
    robot = FakeRobot(clock, **robot_kw)
    ctrl = Controller(robot, hw, policy, np.array(default_q), clock=clock, sleep=clock.sleep)
    return ctrl, robot, clock


def step(ctrl, clock, n=1):
    for _ in range(n):
        clock.t += PERIOD
        ctrl.tick(clock.t)


def to_policy(ctrl, clock):
    ctrl.request_ramp()
    step(ctrl, clock, int(ctrl.hw.safety.ramp_time_s / PERIOD) + 2)
    assert ctrl.mode is Mode.READY
    ctrl.start_policy()
    step(ctrl, clock)
    assert ctrl.mode is Mode.POLICY


def measured_by_robot_order(state: RobotState, hw: HardwareSpec):
    idx = [state.joint_names.index(n) for n in hw.joint_names]
    return state.q[idx], state.dq[idx]


def assert_all_safe(robot: FakeRobot, hw: HardwareSpec):
    """Every command sent: robot order, finite, gains >= 0, and PD torque within the limits."""
    assert robot.sent
    for state, cmd in robot.sent:
        assert cmd.joint_names == hw.joint_names
        for a in (cmd.q, cmd.dq, cmd.kp, cmd.kd, cmd.tau):
            assert a.shape == (len(hw.joint_names),) and np.all(np.isfinite(a))
        assert np.all(cmd.kp >= 0) and np.all(cmd.kd >= 0)
        if np.any(cmd.kp > 0) and np.all(np.isfinite(state.q)):
            q, dq = measured_by_robot_order(state, hw)
            tau = cmd.kp * (cmd.q - q) + cmd.kd * (cmd.dq - dq) + cmd.tau
            assert np.all(np.abs(tau) <= hw.torque_limits * hw.safety.torque_margin + 1e-9)


def assert_damping_only(commands, hw):
    assert commands
    for cmd in commands:
        np.testing.assert_array_equal(cmd.kp, 0.0)
        np.testing.assert_array_equal(cmd.kd, hw.safety.damping_kd)


def sent_after(robot, k):
    return [c for _, c in robot.sent[k:]]


# ------------------------------------------------------------------------------------------------ modes


def test_policy_only_after_explicit_start():
    policy = FakePolicy([0.1, 0.1, 0.1])
    ctrl, robot, clock = make(policy=policy)
    step(ctrl, clock, 5)
    assert ctrl.mode is Mode.PASSIVE
    np.testing.assert_array_equal(robot.sent[-1][1].kp, 0.0)
    np.testing.assert_array_equal(robot.sent[-1][1].kd, 0.0)  # zero torque
    ctrl.request_ramp()
    step(ctrl, clock, 200)  # 4 s: far past the ramp
    assert ctrl.mode is Mode.READY and policy.calls == 0
    np.testing.assert_allclose(robot.sent[-1][1].q, 0.0)  # holds default_q
    np.testing.assert_allclose(robot.sent[-1][1].kp, ctrl.hw.kp)
    ctrl.start_policy()
    step(ctrl, clock)
    assert ctrl.mode is Mode.POLICY and policy.resets == 1 and policy.calls == 1
    np.testing.assert_allclose(robot.sent[-1][1].kp, 50.0)
    assert_all_safe(robot, ctrl.hw)


def test_ramp_moves_pose_and_gains_smoothly():
    ctrl, robot, clock = make(q=(0.3, -0.3, 0.2))
    step(ctrl, clock)
    k = len(robot.sent)
    ctrl.request_ramp()
    step(ctrl, clock, 12)  # ramp 0.2 s = 10 ticks
    ramp = sent_after(robot, k)
    kps = [c.kp[0] for c in ramp]
    assert kps[0] == pytest.approx(20.0 * PERIOD / 0.2) and kps[-1] == 20.0
    assert np.all(np.diff(kps) >= 0)
    np.testing.assert_allclose(ramp[0].q, [0.3, -0.3, 0.2], atol=0.04)
    np.testing.assert_allclose(ramp[-1].q, 0.0)
    assert ctrl.mode is Mode.READY
    assert "rate_limit" not in ctrl.intervention_counts


def test_start_policy_refused_without_policy_or_outside_ready():
    ctrl, _, clock = make(policy=None)
    with pytest.raises(ValueError, match="no policy"):
        ctrl.start_policy()
    ctrl, _, clock = make(policy=FakePolicy([0, 0, 0]))
    with pytest.raises(ValueError, match="READY"):
        ctrl.start_policy()


def test_bad_constructor_arguments():
    clock = FakeClock()
    robot = FakeRobot(clock)
    with pytest.raises(ValueError, match="default_q must be 3"):
        Controller(robot, arm_hw(), None, np.zeros(2))
    with pytest.raises(ValueError, match="outside the joint limits for j1"):
        Controller(robot, arm_hw(), None, np.array([0.0, 1.5, 0.0]))
    with pytest.raises(ValueError, match="policy.kp"):
        Controller(robot, arm_hw(), FakePolicy([0, 0], n=2), np.zeros(3))


# ------------------------------------------------------------------------------------------------ bad inputs


def test_nan_state_goes_damp_and_stays_damping():
    ctrl, robot, clock = make(policy=FakePolicy([0.1, 0.1, 0.1]))
    to_policy(ctrl, clock)
    k = len(robot.sent)
    robot.q[1] = math.nan
    step(ctrl, clock)
    assert ctrl.mode is Mode.DAMP and ctrl.last_fault == "nan_state"
    robot.q[1] = 0.0  # recovers: still DAMP until an explicit reset
    step(ctrl, clock, 10)
    assert ctrl.mode is Mode.DAMP
    assert_damping_only(sent_after(robot, k), ctrl.hw)
    with pytest.raises(ValueError):
        ctrl.start_policy()
    assert_all_safe(robot, ctrl.hw)


@pytest.mark.parametrize("freeze", ["received", "stamp"])
def test_stale_state_goes_damp_within_timeout_plus_one_tick(freeze):
    ctrl, robot, clock = make(policy=FakePolicy([0.1, 0.1, 0.1]))
    to_policy(ctrl, clock)
    t_freeze = clock.t
    setattr(robot, f"frozen_{freeze}", t_freeze)
    k = len(robot.sent)
    step(ctrl, clock, 10)
    damp = next(t for t in ctrl.state_machine.transitions if t.mode is Mode.DAMP)
    assert damp.reason == "stale_state"
    assert damp.time <= t_freeze + ctrl.hw.safety.state_timeout_s + PERIOD + 1e-9
    first_damp = round((damp.time - t_freeze) / PERIOD) - 1
    assert_damping_only(sent_after(robot, k + first_damp), ctrl.hw)
    assert_all_safe(robot, ctrl.hw)


def test_missing_joint_refuses_policy():
    ctrl, robot, clock = make(policy=FakePolicy([0.1, 0.1, 0.1]))
    ctrl.request_ramp()
    step(ctrl, clock, 15)
    assert ctrl.mode is Mode.READY
    robot.names, robot.q, robot.dq = ("j0", "j2"), np.array([0.1, 0.3]), np.zeros(2)
    k = len(robot.sent)
    step(ctrl, clock)
    assert ctrl.mode is Mode.DAMP and ctrl.last_fault == "missing_joint"
    with pytest.raises(ValueError, match="READY"):
        ctrl.start_policy()
    assert_damping_only(sent_after(robot, k), ctrl.hw)
    assert all(np.all(np.isfinite(c.q)) for _, c in robot.sent)


def test_reordered_state_targets_joints_by_name():
    # The robot reports j2, j0, j1; default pose distinct per joint.
    ctrl, robot, clock = make(default_q=(0.1, 0.2, 0.3), names=("j2", "j0", "j1"), q=(0.3, 0.1, 0.2))
    step(ctrl, clock)
    passive = robot.sent[-1][1]
    assert passive.joint_names == NAMES
    np.testing.assert_allclose(passive.q, [0.1, 0.2, 0.3])  # measured q, by name
    ctrl.request_ramp()
    step(ctrl, clock, 15)
    ready = robot.sent[-1][1]
    np.testing.assert_allclose(ready.q, [0.1, 0.2, 0.3])
    assert ctrl.intervention_counts == {}  # nothing needed clamping: every joint matched its own target
    ctrl.stop()
    step(ctrl, clock)
    np.testing.assert_allclose(robot.sent[-1][1].q, [0.1, 0.2, 0.3])  # damping holds measured q by name
    assert_all_safe(robot, ctrl.hw)


def test_policy_target_exceeding_torque_is_limited():
    policy = FakePolicy([0.9, -0.9, 0.2], kp=200.0, kd=2.0)
    ctrl, robot, clock = make(policy=policy, q=(0.0, 0.0, 0.0))
    robot.dq[:] = [1.0, -1.0, 0.5]
    to_policy(ctrl, clock)
    step(ctrl, clock, 20)
    assert ctrl.mode is Mode.POLICY and ctrl.intervention_counts["torque_limit"] >= 20
    state, cmd = robot.sent[-1]
    tau = cmd.kp * (cmd.q - state.q) - cmd.kd * state.dq
    np.testing.assert_allclose(np.abs(tau), 10.0)  # pushed exactly to the limit
    assert_all_safe(robot, ctrl.hw)


def test_estop_in_policy_is_latched():
    ctrl, robot, clock = make(policy=FakePolicy([0.1, 0.1, 0.1]))
    to_policy(ctrl, clock)
    k = len(robot.sent)
    ctrl.estop()
    step(ctrl, clock, 10)
    assert ctrl.mode is Mode.ESTOP and ctrl.safety.estopped
    ctrl.stop()
    step(ctrl, clock)
    assert ctrl.mode is Mode.ESTOP
    for request in (ctrl.start_policy, ctrl.request_ramp):
        with pytest.raises(ValueError):
            request()
    assert_damping_only(sent_after(robot, k), ctrl.hw)
    ctrl.reset()
    assert ctrl.mode is Mode.PASSIVE and not ctrl.safety.estopped
    to_policy(ctrl, clock)  # usable again only after the explicit reset
    assert_all_safe(robot, ctrl.hw)


def test_policy_exception_goes_damp():
    policy = FakePolicy([0.1, 0.1, 0.1])
    ctrl, robot, clock = make(policy=policy)
    to_policy(ctrl, clock)
    k = len(robot.sent)
    policy.error = RuntimeError("onnxruntime exploded")
    step(ctrl, clock, 3)
    assert ctrl.mode is Mode.DAMP and ctrl.last_fault == "policy_error"
    assert_damping_only(sent_after(robot, k), ctrl.hw)


@pytest.mark.parametrize("targets", [[0.1, math.nan, 0.1], [0.1, 0.1]])
def test_policy_nan_or_misshapen_output_goes_damp(targets):
    policy = FakePolicy([0.1, 0.1, 0.1])
    ctrl, robot, clock = make(policy=policy)
    to_policy(ctrl, clock)
    k = len(robot.sent)
    policy.targets = np.array(targets)
    step(ctrl, clock, 3)
    assert ctrl.mode is Mode.DAMP
    assert ctrl.last_fault == ("nan_command" if len(targets) == 3 else "policy_error")
    assert_damping_only(sent_after(robot, k), ctrl.hw)


def test_read_error_goes_damp_on_last_known_pose():
    ctrl, robot, clock = make(q=(0.1, 0.2, 0.3))
    step(ctrl, clock)

    def broken(_):
        raise OSError("socket closed")

    robot.on_read = broken
    step(ctrl, clock)
    assert ctrl.mode is Mode.DAMP and ctrl.last_fault == "read_error"
    assert_damping_only([robot.sent[-1][1]], ctrl.hw)
    np.testing.assert_allclose(robot.sent[-1][1].q, [0.1, 0.2, 0.3])


def test_attitude_guard_on_legged_robot():
    names = ("fl", "fr", "rl", "rr")
    hw = arm_hw(kind="legged", names=names, max_tilt_rad=1.0)
    clock = FakeClock()
    robot = FakeRobot(clock, names=names, q=(0.0,) * 4, quat=(1.0, 0.0, 0.0, 0.0))
    ctrl = Controller(robot, hw, None, np.zeros(4), clock=clock, sleep=clock.sleep)
    ctrl.request_ramp()
    step(ctrl, clock, 15)
    assert ctrl.mode is Mode.READY
    robot.quat = np.array([math.cos(0.7), math.sin(0.7), 0.0, 0.0])  # rolled 1.4 rad
    step(ctrl, clock)
    assert ctrl.mode is Mode.DAMP and ctrl.last_fault == "attitude"
    assert_all_safe(robot, hw)


def _ramping_legged_robot(gyro: tuple[float, float, float]):
    """A level 4-joint legged robot whose base turns at `gyro` (rad/s), RAMP just requested."""
    names = ("fl", "fr", "rl", "rr")
    hw = arm_hw(kind="legged", names=names, max_tilt_rad=1.0)
    clock = FakeClock()
    robot = FakeRobot(clock, names=names, q=(0.0,) * 4, quat=(1.0, 0.0, 0.0, 0.0), gyro=gyro)
    ctrl = Controller(robot, hw, None, np.zeros(4), clock=clock, sleep=clock.sleep)
    ctrl.request_ramp()
    return ctrl, robot, clock, hw


def test_ramp_waits_limp_until_the_base_is_still():
    ctrl, robot, clock, hw = _ramping_legged_robot(gyro=(0.0, 0.5, 0.0))
    step(ctrl, clock, 30)  # 0.6 s of a moving base (being set down, settling)
    assert ctrl.mode is Mode.RAMP
    assert all(np.all(c.kp == 0.0) and np.all(c.kd == 0.0) for _, c in robot.sent)  # limp while it moves
    robot.gyro[:] = 0.0
    step(ctrl, clock, 2)
    assert robot.sent[-1][1].kp[0] > 0.0  # still: the gravity check passed and the gains start rising
    step(ctrl, clock, 12)
    assert ctrl.mode is Mode.READY
    assert_all_safe(robot, hw)


def test_ramp_faults_when_the_base_never_gets_still():
    ctrl, robot, clock, _ = _ramping_legged_robot(gyro=(0.0, 0.0, 1.0))
    step(ctrl, clock, int(5.0 / PERIOD) + 5)
    assert ctrl.mode is Mode.DAMP and ctrl.state_machine.fault_reason == "imu_check"
    assert "never still" in ctrl.last_error
    assert all(np.all(c.kp == 0.0) for _, c in robot.sent)


def test_shutdown_damps_and_sends_damping():
    ctrl, robot, clock = make(policy=FakePolicy([0.1, 0.1, 0.1]))
    to_policy(ctrl, clock)
    n = len(robot.sent)
    ctrl.shutdown()
    assert ctrl.mode is Mode.DAMP and len(robot.sent) == n + 1
    assert_damping_only([robot.sent[-1][1]], ctrl.hw)
    assert ctrl.state_machine.transitions[-1].reason == "shutdown"


# ------------------------------------------------------------------------------------------------ timing


def test_overrun_skips_missed_ticks_without_burst():
    ctrl, robot, clock = make()
    t0 = clock.t
    starts = []

    def on_read(r):
        starts.append(clock.t)
        if r.reads == 5:
            clock.t += 3.5 * PERIOD  # the 5th tick (k = 4) overruns by 3.5 periods
        elif r.reads == 9:
            clock.t += 0.6 * PERIOD  # a long tick that still ends before the next deadline

    robot.on_read = on_read
    ctrl.run(duration_s=20 * PERIOD)
    assert ctrl.missed_ticks == 3
    grid = [(t - t0) / PERIOD for t in starts]
    np.testing.assert_allclose(grid, np.round(grid), atol=1e-6)  # on the absolute grid
    assert [round(g) for g in grid] == [0, 1, 2, 3, 4, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19]
    assert min(np.diff(starts)) >= PERIOD - 1e-9  # never back to back
    s = ctrl.stats()
    assert s["ticks"] == 17 and s["missed_ticks"] == 3 and s["period_count"] == 16
    assert s["period_max"] == pytest.approx(4 * PERIOD)
    assert s["lateness_max"] == pytest.approx(0.0, abs=1e-9)
    assert "missed=3" in ctrl.status_line() and "mode=PASSIVE" in ctrl.status_line()


def test_keyboard_interrupt_shuts_down():
    ctrl, robot, clock = make(policy=FakePolicy([0.1, 0.1, 0.1]))
    to_policy(ctrl, clock)
    start = robot.reads

    def on_read(r):
        if r.reads == start + 3:
            raise KeyboardInterrupt

    robot.on_read = on_read
    with pytest.raises(KeyboardInterrupt):
        ctrl.run()
    assert ctrl.mode is Mode.DAMP
    assert_damping_only([robot.sent[-1][1]], ctrl.hw)


@pytest.mark.realtime  # counts the ticks of 0.5 s at 50 Hz
def test_real_time_run_tick_count():
    robot = FakeRobot(time.monotonic)
    ctrl = Controller(robot, arm_hw(), None, np.zeros(3), rate_hz=50.0)
    ctrl.run(duration_s=0.5)
    assert abs(ctrl.ticks + ctrl.missed_ticks - 25) <= 2 and abs(ctrl.ticks - 25) <= 2
    s = ctrl.stats()
    assert s["period_mean"] == pytest.approx(0.02, abs=0.005)
    assert "p99_period=" in ctrl.status_line()
    assert_all_safe(robot, ctrl.hw)


def test_stop_event_ends_run():
    robot = FakeRobot(time.monotonic)
    ctrl = Controller(robot, arm_hw(), None, np.zeros(3), rate_hz=100.0)
    stop = threading.Event()
    robot.on_read = lambda r: stop.set() if r.reads == 5 else None
    ctrl.run(stop_event=stop)
    assert ctrl.ticks == 5


# ------------------------------------------------------------------------------------------------ real-time


def test_precise_sleep_spins_the_end_of_the_wait(monkeypatch):
    """The OS sleep ends spin_s early and the rest is spent running: never short, ends at the target."""
    slept = []
    real_sleep = time.sleep
    monkeypatch.setattr(time, "sleep", lambda s: (slept.append(s), real_sleep(s)))
    sleep = precise_sleep(0.002)
    t = time.perf_counter()
    sleep(0.01)
    took = time.perf_counter() - t
    assert slept == [pytest.approx(0.008)]
    assert took >= 0.01
    slept.clear()
    sleep(0.001)  # shorter than the spin: no OS sleep at all
    assert slept == []
    assert precise_sleep(0.0) is time.sleep


def test_run_sizes_the_spin_to_the_period(monkeypatch):
    """The default sleep spins min(SPIN_S, period / 4): a 500 Hz loop never spins its whole period."""
    spins = []
    import robo_rl.deploy.controller as controller_module

    monkeypatch.setattr(controller_module, "precise_sleep", lambda spin: (spins.append(spin), time.sleep)[1])
    for rate in (50.0, 500.0):
        Controller(FakeRobot(time.monotonic), arm_hw(), None, np.zeros(3), rate_hz=rate).run(duration_s=0.04)
    assert spins == [pytest.approx(SPIN_S), pytest.approx(0.25 / 500.0)]


def test_realtime_priority_is_validated():
    with pytest.raises(ValueError, match="realtime_priority = 100"):
        Controller(FakeRobot(FakeClock()), arm_hw(), None, np.zeros(3), realtime_priority=100)
    with pytest.raises(ValueError, match="realtime_priority = True"):
        Controller(FakeRobot(FakeClock()), arm_hw(), None, np.zeros(3), realtime_priority=True)


def _may_use_sched_fifo() -> bool:
    import resource

    if not hasattr(os, "sched_setscheduler"):
        return False
    return os.geteuid() == 0 or resource.getrlimit(resource.RLIMIT_RTPRIO)[0] > 0


@pytest.mark.skipif(not _may_use_sched_fifo(), reason="needs root or an rtprio limit for SCHED_FIFO")
def test_run_holds_sched_fifo_while_running_and_restores_it():
    seen = []
    robot = FakeRobot(time.monotonic)
    robot.on_read = lambda r: seen.append((os.sched_getscheduler(0), os.sched_getparam(0).sched_priority))
    ctrl = Controller(robot, arm_hw(), None, np.zeros(3), rate_hz=100.0, realtime_priority=30)
    before = os.sched_getscheduler(0)
    ctrl.run(duration_s=0.05)
    assert ctrl.realtime_note is None
    assert seen and set(seen) == {(os.SCHED_FIFO, 30)}
    assert os.sched_getscheduler(0) == before  # given back when run returns


REFUSED = """
import os, sys, time
import numpy as np
sys.path.insert(0, {tests!r})
from test_deploy_controller import Controller, FakeRobot, arm_hw
os.setuid(65534)  # nobody: no CAP_SYS_NICE, and the rtprio limit is 0
ctrl = Controller(FakeRobot(time.monotonic), arm_hw(), None, np.zeros(3), realtime_priority=50)
notes = []
ctrl.on_warning = notes.append
ctrl.run(duration_s=0.1)
print(ctrl.ticks, notes)
"""


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                    reason="needs root to drop to an unprivileged user")
def test_refused_realtime_priority_runs_at_normal_priority_and_says_so():
    """An unprivileged process (root dropped to nobody after its imports) is refused with one line; it still runs."""
    import resource
    import subprocess
    import sys

    if resource.getrlimit(resource.RLIMIT_RTPRIO)[0] > 0:
        pytest.skip("the rtprio limit here would let an unprivileged user have SCHED_FIFO")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    out = subprocess.run([sys.executable, "-c", REFUSED.format(tests=str(Path(__file__).parent))], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    ticks, notes = out.stdout.split(" ", 1)
    assert 4 <= int(ticks) <= 6
    assert "real-time priority 50 refused" in notes and "normal priority" in notes
