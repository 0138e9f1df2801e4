"""SafetyFilter, StateMachine and ramp_command: each bad input and its exact reaction, numbers checked."""

import ast
import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from robo_rl.deploy.hardware import ControllerConfig, HardwareSpec, SafetyConfig, load_hardware
from robo_rl.deploy.robot import JointCommand, RobotState
from robo_rl.deploy.safety import SafetyFilter, name_index, quat_roll_pitch
from robo_rl.deploy.state_machine import Mode, StateMachine, ramp_command

REPO = Path(__file__).resolve().parents[2]
NAMES = ("j0", "j1", "j2")


def arm_hw(**safety) -> HardwareSpec:
    """3-joint arm, limits +-1 rad, 20 rad/s, torque limit 10 N m, kp <= 500, kd <= 10, rate 50 Hz."""
    cfg = dict(joint_limit_margin=0.05, max_position_step=0.25, state_timeout_s=0.1, ramp_time_s=2.0, damping_kd=1.5)
    cfg.update(safety)
    return HardwareSpec(
        robot="toy_arm",
        kind="arm",
        joint_names=NAMES,
        joint_lower=np.full(3, -1.0),
        joint_upper=np.full(3, 1.0),
        velocity_limits=np.full(3, 20.0),
        torque_limits=np.full(3, 10.0),
        kp=np.full(3, 20.0),
        kd=np.full(3, 1.0),
        kp_max=np.full(3, 500.0),
        kd_max=np.full(3, 10.0),
        control_rate_hz=50.0,
        safety=SafetyConfig(**cfg),
    )


LEGGED_YAML = """\
robot: toy_dog
kind: legged
joint_names: [fl, fr, rl, rr]
joint_lower: [-1.5, -1.5, -1.5, -1.5]
joint_upper: [1.5, 1.5, 1.5, 1.5]
velocity_limits: [10, 10, 10, 10]
torque_limits: [20, 20, 20, 20]
kp: [30, 30, 30, 30]
kd: [1, 1, 1, 1]
kp_max: [100, 100, 100, 100]
kd_max: [5, 5, 5, 5]
control_rate_hz: 50
quaternion_order: {order}
safety:
  max_tilt_rad: 1.0
"""


def legged_hw(tmp_path: Path, order: str = "wxyz") -> HardwareSpec:
    path = tmp_path / f"toy_dog_{order}.yaml"
    path.write_text(LEGGED_YAML.format(order=order))
    return load_hardware(path)


def state(q=(0.0, 0.0, 0.0), dq=None, names=NAMES, t=0.0, stamp=None, quat=None, gyro=None) -> RobotState:
    q = np.asarray(q, dtype=np.float64)
    return RobotState(
        stamp=t if stamp is None else stamp,
        received=t,
        joint_names=tuple(names),
        q=q,
        dq=np.zeros_like(q) if dq is None else np.asarray(dq, dtype=np.float64),
        imu_quat=None if quat is None else np.asarray(quat, dtype=np.float64),
        imu_gyro=None if gyro is None else np.asarray(gyro, dtype=np.float64),
    )


def command(q, kp=5.0, kd=0.0, names=NAMES, dq=None, tau=None) -> JointCommand:
    q = np.asarray(q, dtype=np.float64)
    n = q.shape[0]
    return JointCommand(
        tuple(names),
        q,
        np.zeros(n) if dq is None else np.asarray(dq, dtype=np.float64),
        np.broadcast_to(np.asarray(kp, dtype=np.float64), (n,)).copy(),
        np.broadcast_to(np.asarray(kd, dtype=np.float64), (n,)).copy(),
        np.zeros(n) if tau is None else np.asarray(tau, dtype=np.float64),
    )


def quat(angle: float, axis: int, order: str) -> np.ndarray:
    """Rotation by `angle` about base axis 0 (x, roll) or 1 (y, pitch), in `order`."""
    xyz = np.zeros(3)
    xyz[axis] = math.sin(angle / 2)
    w = math.cos(angle / 2)
    return np.array([w, *xyz]) if order == "wxyz" else np.array([*xyz, w])


def assert_damping(cmd: JointCommand, hw: HardwareSpec, q_expected=None) -> None:
    assert cmd.joint_names == hw.joint_names
    np.testing.assert_array_equal(cmd.kp, 0.0)
    np.testing.assert_array_equal(cmd.kd, hw.safety.damping_kd)
    np.testing.assert_array_equal(cmd.dq, 0.0)
    np.testing.assert_array_equal(cmd.tau, 0.0)
    assert np.all(np.isfinite(cmd.q))
    if q_expected is not None:
        np.testing.assert_allclose(cmd.q, q_expected)


# ------------------------------------------------------------------------------------------------ check_state


def test_good_state_passes():
    assert SafetyFilter(arm_hw()).check_state(state(t=1.0), now=1.01) is None


@pytest.mark.parametrize("field", ["q", "dq", "imu_quat", "imu_gyro"])
@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_nan_anywhere_in_state(field, bad):
    s = state(t=1.0, quat=(1.0, 0, 0, 0), gyro=(0.0, 0, 0))
    arr = getattr(s, field).copy()
    arr[1] = bad
    assert SafetyFilter(arm_hw()).check_state(replace(s, **{field: arr}), now=1.0) == "nan_state"


def test_stale_by_receive_time():
    f = SafetyFilter(arm_hw())
    assert f.check_state(state(t=1.0), now=1.09) is None
    assert f.check_state(state(t=1.0, stamp=1.5), now=1.101) == "stale_state"


def test_stale_when_robot_clock_frozen():
    f = SafetyFilter(arm_hw())
    # Messages keep arriving (received = now) but the robot's stamp never advances.
    assert f.check_state(state(t=1.0, stamp=7.0), now=1.0) is None
    assert f.check_state(state(t=1.05, stamp=7.0), now=1.05) is None
    assert f.check_state(state(t=1.09, stamp=7.0), now=1.09) is None
    assert f.check_state(state(t=1.12, stamp=7.0), now=1.12) == "stale_state"
    assert f.check_state(state(t=1.14, stamp=7.02), now=1.14) is None  # the robot clock moves again


def test_missing_joint_and_misshapen_state():
    f = SafetyFilter(arm_hw())
    assert f.check_state(state(q=(0.0, 0.0), names=("j0", "j2")), now=0.0) == "missing_joint"
    assert f.check_state(state(q=(0.0, 0.0), names=NAMES), now=0.0) == "bad_state"


def test_extra_and_reordered_joints_are_fine():
    f = SafetyFilter(arm_hw())
    s = state(q=(0.3, 0.1, 0.2, 9.0), names=("j2", "j0", "j1", "gripper"))
    assert f.check_state(s, now=0.0) is None
    np.testing.assert_allclose(f.joint_positions(s), [0.1, 0.2, 0.3])
    s32 = replace(s, q=s.q.astype(np.float32), dq=s.dq.astype(np.float32))  # DDS messages often carry float32
    assert f.check_state(s32, now=0.0) is None
    np.testing.assert_allclose(f.joint_positions(s32), [0.1, 0.2, 0.3], rtol=1e-6)
    np.testing.assert_allclose(f.joint_positions(replace(s32, joint_names=NAMES + ("gripper",))), [0.3, 0.1, 0.2],
                               rtol=1e-6)


@pytest.mark.parametrize("order", ["wxyz", "xyzw"])
def test_attitude_guard_both_quaternion_orders(tmp_path, order):
    hw = legged_hw(tmp_path, order)
    f = SafetyFilter(hw)
    names, q = hw.joint_names, np.zeros(4)
    assert f.check_state(state(q=q, names=names, quat=quat(0.0, 0, order)), now=0.0) is None
    assert f.check_state(state(q=q, names=names, quat=quat(0.9, 0, order)), now=0.0) is None
    assert f.check_state(state(q=q, names=names, quat=quat(1.2, 0, order)), now=0.0) == "attitude"  # roll
    assert f.check_state(state(q=q, names=names, quat=quat(-1.2, 1, order)), now=0.0) == "attitude"  # pitch
    assert f.check_state(state(q=q, names=names, quat=quat(math.pi, 1, order)), now=0.0) == "attitude"  # flipped
    assert f.check_state(state(q=q, names=names), now=0.0) == "missing_imu"
    # Upright but turned 2 rad about z: fine in the configured order, tilted when read in the other one.
    yawed = np.array([math.cos(1.0), 0.0, 0.0, math.sin(1.0)])  # (w, x, y, z)
    yawed = yawed if order == "wxyz" else np.roll(yawed, -1)
    assert f.check_state(state(q=q, names=names, quat=yawed), now=0.0) is None
    other = "xyzw" if order == "wxyz" else "wxyz"
    misread = SafetyFilter(legged_hw(tmp_path, other))
    assert misread.check_state(state(q=q, names=names, quat=yawed), now=0.0) == "attitude"


def test_attitude_guard_off_for_arms():
    assert SafetyFilter(arm_hw(max_tilt_rad=0.1)).check_state(state(quat=quat(2.0, 0, "wxyz")), now=0.0) is None


def test_quat_roll_pitch_values():
    roll, pitch = quat_roll_pitch(quat(0.7, 0, "wxyz"), "wxyz")
    assert roll == pytest.approx(0.7) and pitch == pytest.approx(0.0, abs=1e-12)
    roll, pitch = quat_roll_pitch(2.0 * quat(-0.4, 1, "xyzw"), "xyzw")  # not unit length
    assert roll == pytest.approx(0.0, abs=1e-12) and pitch == pytest.approx(-0.4)


def test_name_index():
    assert name_index(NAMES, NAMES) is None
    np.testing.assert_array_equal(name_index(("j2", "j0", "j1"), NAMES), [1, 2, 0])
    with pytest.raises(ValueError, match="j1"):
        name_index(("j0", "j2"), NAMES)


# ------------------------------------------------------------------------------------------------ filter_command


def test_damping_command_in_robot_order():
    hw = arm_hw()
    f = SafetyFilter(hw)
    assert_damping(f.damping_command(state(q=(0.3, 0.1, 0.2), names=("j2", "j0", "j1"))), hw, [0.1, 0.2, 0.3])


def test_damping_command_never_carries_nan():
    hw = arm_hw()
    f = SafetyFilter(hw)
    f.damping_command(state(q=(0.1, 0.2, 0.3)))
    assert_damping(f.damping_command(state(q=(0.5, math.nan, 0.6))), hw, [0.5, 0.2, 0.6])  # last finite q
    assert_damping(f.damping_command(None), hw, [0.5, 0.2, 0.6])


def test_joint_limit_clamp_values():
    f = SafetyFilter(arm_hw())
    cmd, why = f.filter_command(command([2.0, -3.0, 0.5]), state(q=(0.9, -0.9, 0.5)))
    np.testing.assert_allclose(cmd.q, [0.95, -0.95, 0.5])
    assert why == ["joint_limit"]


def test_rate_limit_values():
    f = SafetyFilter(arm_hw())
    s = state(q=(0.0, 0.0, 0.0))
    cmd, why = f.filter_command(command([0.6, -0.1, -0.6]), s)  # first tick: relative to measured q
    np.testing.assert_allclose(cmd.q, [0.25, -0.1, -0.25])
    assert why == ["rate_limit"]
    cmd, why = f.filter_command(command([0.6, -0.1, -0.6]), s)  # then relative to the previous target
    np.testing.assert_allclose(cmd.q, [0.5, -0.1, -0.5])
    assert why == ["rate_limit"]
    cmd, why = f.filter_command(command([0.6, -0.1, -0.6]), s)
    np.testing.assert_allclose(cmd.q, [0.6, -0.1, -0.6])
    assert why == []


def test_rate_limit_restarts_from_measured_q_after_zero_stiffness():
    f = SafetyFilter(arm_hw())
    f.filter_command(command([0.2, 0.2, 0.2]), state(q=(0.0, 0.0, 0.0)))
    f.filter_command(command([0.0, 0.0, 0.0], kp=0.0), state(q=(0.0, 0.0, 0.0)))  # limp: target means nothing
    cmd, why = f.filter_command(command([0.9, 0.9, 0.9]), state(q=(0.8, 0.8, 0.8)))  # moved by hand
    np.testing.assert_allclose(cmd.q, [0.9, 0.9, 0.9])
    assert why == []


def test_limits_on_limp_joints_not_reported():
    f = SafetyFilter(arm_hw())
    cmd, why = f.filter_command(command([1.0, 0.0, 0.0], kp=0.0), state(q=(1.0, 0.0, 0.0)))  # resting on a stop
    assert why == []
    assert cmd.q[0] == pytest.approx(0.95)


def test_torque_limit_moves_target_to_the_limit():
    hw = arm_hw()
    f = SafetyFilter(hw)
    s = state(q=(0.0, 0.5, 0.0), dq=(2.0, -2.0, 0.0))
    cmd, why = f.filter_command(command([0.2, 0.3, 0.05], kp=100.0, kd=1.0), s)
    assert why == ["torque_limit"]
    tau = cmd.kp * (cmd.q - s.q) - cmd.kd * s.dq
    # j0: 100*0.2 - 2 = 18 -> q* = (10 + 2) / 100; j1: 100*(-0.2) + 2 = -18 -> q* = 0.5 + (-10 - 2) / 100; j2: 5
    np.testing.assert_allclose(cmd.q, [0.12, 0.38, 0.05])
    np.testing.assert_allclose(tau, [10.0, -10.0, 5.0])
    assert np.all(np.abs(tau) <= hw.torque_limits + 1e-9)


def test_torque_margin_scales_the_limit():
    f = SafetyFilter(arm_hw(torque_margin=0.5))
    cmd, why = f.filter_command(command([0.2, 0.0, 0.0], kp=100.0), state())
    assert why == ["torque_limit"]
    assert cmd.q[0] == pytest.approx(0.05)


def test_a_policy_trained_through_the_stream_has_its_target_clamped_and_its_step_and_torque_left_to_the_stream():
    """A controller that tracks a jerk-limited stream towards the target (a Franka), running a policy trained through
    that stream: the target is clamped to the limits and its feed-forward kept within the budget; the per-tick step and
    the PD budget are the stream's and the robot's. A policy trained on targets that step in at the tick, and any
    policy on a direct servo, gets both."""
    streamed = replace(arm_hw(), controller=ControllerConfig(gains="robot", setpoint_rate_hz=1000.0,
                                                             acceleration_limits=np.full(3, 10.0),
                                                             jerk_limits=np.full(3, 5000.0)))
    s = state(q=(0.0, 0.0, 0.0))
    wanted = command([0.6, -0.4, 2.0], kp=100.0, tau=[0.0, 30.0, 0.0])  # 0.6 rad ahead at kp 100: 60 N m
    cmd, why = SafetyFilter(streamed, trained_through_stream=True).filter_command(wanted, s)
    np.testing.assert_allclose(cmd.q, [0.6, -0.4, 0.95])
    np.testing.assert_allclose(cmd.tau, [0.0, 10.0, 0.0], rtol=1e-8)
    assert why == ["joint_limit", "feedforward_limit"]
    for hw, through in ((streamed, False), (arm_hw(), True), (arm_hw(), False)):
        limited, why = SafetyFilter(hw, trained_through_stream=through).filter_command(wanted, s)
        assert "rate_limit" in why and "torque_limit" in why
        assert np.all(np.abs(limited.q) <= 0.25)


def test_a_gripper_with_its_own_controller_is_no_overspeed_but_the_arm_is():
    """franka_gripper moves the finger at the speed it is given: a measured finger speed past 1.2 x its limit (the
    twin's finger snapping shut on a slipping cube) does not stop the arm; the same on an arm joint does."""
    hw = load_hardware(REPO / "hardware" / "panda_gripper.yaml")
    f = SafetyFilter(hw)
    finger = np.zeros(8)
    finger[7] = 0.44  # m/s, 4.4 x the hand's 0.1
    reading = RobotState(stamp=0.0, received=0.0, joint_names=hw.joint_names, q=0.5 * (hw.joint_lower + hw.joint_upper),
                        dq=finger)
    assert f.check_state(reading, now=0.0) is None
    arm = np.zeros(8)
    arm[6] = 1.21 * hw.velocity_limits[6]
    assert f.check_state(replace(reading, dq=arm), now=0.0) == "overspeed"


@pytest.mark.parametrize("field", ["q", "dq", "kp", "kd", "tau"])
def test_nan_command_becomes_damping(field):
    hw = arm_hw()
    f = SafetyFilter(hw)
    good = command([0.1, 0.1, 0.1])
    arr = getattr(good, field).copy()
    arr[2] = math.nan
    cmd, why = f.filter_command(replace(good, **{field: arr}), state(q=(0.1, 0.2, 0.3)))
    assert why == ["nan_command"]
    assert_damping(cmd, hw, [0.1, 0.2, 0.3])


def test_bad_commands_become_damping():
    hw = arm_hw()
    f = SafetyFilter(hw)
    s = state()
    for bad in (command([0.1, 0.1], names=("j0", "j1")), command([0.1, 0.1, 0.1], kp=-1.0)):
        cmd, why = f.filter_command(bad, s)
        assert why == ["bad_command"]
        assert_damping(cmd, hw)
    cmd, why = f.filter_command(command([0.1, 0.1, 0.1]), state(q=(0.0, math.nan, 0.0)))
    assert why == ["invalid_state"]
    assert_damping(cmd, hw)


def test_command_and_state_mapped_by_name():
    f = SafetyFilter(arm_hw())
    s = state(q=(0.5, 0.0, -0.5), names=("j2", "j1", "j0"))  # j0 = -0.5, j1 = 0.0, j2 = 0.5
    cmd, why = f.filter_command(command([0.5, 0.0, -0.5], names=("j2", "j1", "j0")), s)
    assert cmd.joint_names == NAMES
    np.testing.assert_allclose(cmd.q, [-0.5, 0.0, 0.5])
    assert why == []  # no rate limit: every target equals its own joint's measured position


def test_estop_is_latched():
    hw = arm_hw()
    f = SafetyFilter(hw)
    s = state(q=(0.1, 0.2, 0.3))
    f.estop()
    assert f.estopped
    for _ in range(3):
        cmd, why = f.filter_command(command([0.1, 0.2, 0.3]), s)
        assert why == ["estop"]
        assert_damping(cmd, hw, [0.1, 0.2, 0.3])
    f.reset_estop()
    assert not f.estopped
    cmd, why = f.filter_command(command([0.1, 0.2, 0.3]), s)
    assert why == [] and np.all(cmd.kp == 5.0)


def test_returned_arrays_are_not_reused():
    f = SafetyFilter(arm_hw())
    a, _ = f.filter_command(command([0.1, 0.1, 0.1]), state())
    f.filter_command(command([0.2, 0.2, 0.2]), state())
    np.testing.assert_allclose(a.q, 0.1)


# ------------------------------------------------------------------------------------------------ state machine


def test_state_machine_full_cycle():
    sm = StateMachine(ramp_time_s=2.0, now=0.0)
    assert sm.mode is Mode.PASSIVE
    with pytest.raises(ValueError, match="only allowed from READY"):
        sm.start_policy(0.1)
    sm.request_ramp(1.0)
    assert sm.update(2.0) is Mode.RAMP and sm.ramp_alpha(2.0) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="READY"):
        sm.start_policy(2.0)
    assert sm.update(3.0) is Mode.READY
    assert sm.update(100.0) is Mode.READY  # never POLICY on its own
    sm.start_policy(100.5)
    assert sm.mode is Mode.POLICY
    assert sm.fault("nan_state", 101.0) and sm.mode is Mode.DAMP and sm.fault_reason == "nan_state"
    assert not sm.fault("stale_state", 101.1) and sm.fault_reason == "nan_state"  # first reason kept
    with pytest.raises(ValueError, match="PASSIVE"):
        sm.request_ramp(101.2)
    sm.reset(102.0)
    assert sm.mode is Mode.PASSIVE and sm.fault_reason is None
    assert [(t.mode, t.time, t.reason) for t in sm.transitions] == [
        (Mode.PASSIVE, 0.0, "start"),
        (Mode.RAMP, 1.0, "ramp"),
        (Mode.READY, 3.0, "ramp_done"),
        (Mode.POLICY, 100.5, "start"),
        (Mode.DAMP, 101.0, "nan_state"),
        (Mode.PASSIVE, 102.0, "reset"),
    ]


def test_estop_latched_in_state_machine():
    sm = StateMachine(ramp_time_s=0.0)
    sm.request_ramp(0.0)
    sm.update(0.0)
    sm.start_policy(0.0)
    assert sm.estop(1.0) and sm.mode is Mode.ESTOP
    assert not sm.stop(1.1) and not sm.fault("attitude", 1.2) and sm.mode is Mode.ESTOP
    sm.update(50.0)
    for request in (sm.start_policy, sm.request_ramp):
        with pytest.raises(ValueError):
            request(2.0)
    assert sm.mode is Mode.ESTOP
    sm.reset(3.0)
    assert sm.mode is Mode.PASSIVE


def test_stop_from_any_mode_and_reset_only_from_damp():
    sm = StateMachine(ramp_time_s=1.0)
    with pytest.raises(ValueError, match="DAMP or ESTOP"):
        sm.reset(0.0)
    assert sm.stop(0.5) and sm.mode is Mode.DAMP
    assert not sm.stop(0.6)
    with pytest.raises(ValueError):
        StateMachine(ramp_time_s=-1.0)


def test_ramp_command_values():
    q0, qd = np.array([0.0, 1.0]), np.array([1.0, -1.0])
    kp, kd = np.array([10.0, 20.0]), np.array([1.0, 2.0])
    q, kp_a, kd_a = ramp_command(q0, qd, kp, kd, 0.0)
    np.testing.assert_allclose(q, q0) and np.testing.assert_allclose(kp_a, 0.0) and np.testing.assert_allclose(kd_a, 0)
    q, kp_a, kd_a = ramp_command(q0, qd, kp, kd, 0.25)
    np.testing.assert_allclose(q, [0.25, 0.5])
    np.testing.assert_allclose(kp_a, [2.5, 5.0])
    np.testing.assert_allclose(kd_a, [0.25, 0.5])
    q, kp_a, kd_a = ramp_command(q0, qd, kp, kd, 1.0)
    np.testing.assert_allclose(q, qd) and np.testing.assert_allclose(kp_a, kp)
    for bad in (-0.1, 1.5, math.nan):
        with pytest.raises(ValueError, match="alpha"):
            ramp_command(q0, qd, kp, kd, bad)


# ------------------------------------------------------------------------------------------------ import rule

DEPLOY_FILES = ("safety.py", "state_machine.py", "controller.py", "operator_commands.py")


@pytest.mark.parametrize("name", DEPLOY_FILES)
def test_deploy_modules_import_only_numpy_stdlib_and_robo_rl(name):
    tree = ast.parse((REPO / "robo_rl" / "deploy" / name).read_text())
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            roots.add(node.module or "")
    for mod in roots:
        top = mod.split(".")[0]
        ok = (
            top in sys.stdlib_module_names
            or top == "numpy"
            or mod == "robo_rl.core.contract"
            or mod.startswith("robo_rl.deploy.")
            or mod == "robo_rl.terms" or mod.startswith("robo_rl.terms.")  # numpy-only on import (tests/terms)
        )
        assert ok, f"{name} imports {mod}"


def test_importing_the_deploy_core_loads_no_torch_or_mujoco():
    code = (
        "import sys, robo_rl.deploy.controller, robo_rl.deploy.safety, robo_rl.deploy.state_machine\n"
        "bad = sorted(m for m in ('torch', 'mujoco') if m in sys.modules)\n"
        "assert not bad, bad\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
