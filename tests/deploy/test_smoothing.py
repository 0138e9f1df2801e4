"""Command smoothing for a Franka (robo_rl.deploy.smoothing): the 1 kHz setpoints libfranka receives never leave its
documented position, velocity, acceleration or jerk limits, whatever the 50 Hz policy asks for; and what cannot be
honoured is refused at load."""

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from robo_rl.deploy.hardware import load_hardware
from robo_rl.deploy.policy import OnnxPolicy, validate_contract
from robo_rl.deploy.robot import JointCommand, RobotState
from robo_rl.deploy.smoothing import JerkLimitedInterpolator, SetpointLimits, SmoothingRobot, braking_velocity
from tests.conftest import REPO

ARMS = {name: load_hardware(REPO / "hardware" / f"{name}.yaml") for name in ("panda", "fr3")}
TICK_STEPS = 20  # 1 kHz setpoints per 50 Hz tick
TICKS_PER_STREAM = 50


def stream_derivatives(q0: np.ndarray, q: np.ndarray, h: float) -> tuple[np.ndarray, ...]:
    """Positions (T, J) and their velocity, acceleration and jerk (T, J) by backward differences h apart, as libfranka
    computes them from its setpoints; the stream starts at rest at q0 (J,)."""
    full = np.concatenate([np.repeat(q0[None], 3, axis=0), q])  # at rest before the first setpoint
    v = np.diff(full, axis=0) / h
    a = np.diff(v, axis=0) / h
    j = np.diff(a, axis=0) / h
    return q, v[2:], a[1:], j


def limit_ratios(hw, q0: np.ndarray, q: np.ndarray) -> dict[str, float]:
    """The largest share of each documented limit the stream uses (<= 1 inside; position: metres beyond, <= 0)."""
    h = 1.0 / hw.controller.setpoint_rate_hz
    q, v, a, j = stream_derivatives(q0, q, h)
    return {"position": float(max(np.max(q - hw.joint_upper), np.max(hw.joint_lower - q))),
            "velocity": float(np.max(np.abs(v) / hw.velocity_limits)),
            "acceleration": float(np.max(np.abs(a) / hw.controller.acceleration_limits)),
            "jerk": float(np.max(np.abs(j) / hw.controller.jerk_limits))}


def play(hw, q0: np.ndarray, targets: list) -> np.ndarray:
    """The setpoints (T, J) a stream of 50 Hz targets (each (J,), or None: stop) becomes, from rest at q0."""
    interp = JerkLimitedInterpolator(SetpointLimits.from_hardware(hw), hw.controller.setpoint_rate_hz)
    interp.start(q0)
    return np.concatenate([interp.advance(t, TICK_STEPS).q for t in targets])


def assert_inside(hw, q0, setpoints):
    r = limit_ratios(hw, q0, setpoints)
    assert r["position"] <= 0 and r["velocity"] <= 1 and r["acceleration"] <= 1 and r["jerk"] <= 1, r


# ---------------------------------------------------------------------------------------------- the property
KINDS = ("random", "beyond", "bang", "hold", "small", "stop")


@st.composite
def policy_streams(draw, hw):
    """A start pose inside the limits (or on one) and TICKS_PER_STREAM policy outputs, each of a drawn kind: a random
    joint target, one beyond the limits, an adversarial step to the limits, the last target held, a small move, a
    stop. The numbers come from a drawn seed (fast to generate; hypothesis still explores the kinds and seeds)."""
    kinds = draw(st.lists(st.sampled_from(KINDS), min_size=TICKS_PER_STREAM, max_size=TICKS_PER_STREAM))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    lo, hi = hw.joint_lower, hw.joint_upper
    q0 = np.clip(rng.uniform(lo - 0.2, hi + 0.2), lo, hi)  # a fifth of the draws sit on a limit
    targets, last = [], q0
    for kind in kinds:
        if kind == "random":
            last = rng.uniform(lo, hi)
        elif kind == "beyond":
            last = rng.uniform(lo - 1.0, hi + 1.0)
        elif kind == "bang":
            last = np.where(rng.random(len(lo)) < 0.5, lo, hi)
        elif kind == "small":
            last = last + rng.uniform(-0.025, 0.025, len(lo))
        targets.append(None if kind == "stop" else last.copy())
    return q0, targets


@pytest.mark.parametrize("robot", sorted(ARMS))
def test_the_setpoint_stream_never_exceeds_the_franka_limits(robot):
    """Property: 100 generated streams of 50 policy outputs each (5000 per arm, 10 000 in all) become 1 kHz setpoints
    within q_min..q_max, dq_max, ddq_max and dddq_max of Franka's documentation, as libfranka differentiates them."""
    hw = ARMS[robot]
    worst = {"position": -np.inf, "velocity": 0.0, "acceleration": 0.0, "jerk": 0.0}

    @settings(max_examples=100, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow],
              print_blob=True)
    @given(policy_streams(hw))
    def check(stream):
        q0, targets = stream
        r = limit_ratios(hw, q0, play(hw, q0, targets))
        for key, value in r.items():
            worst[key] = max(worst[key], value)
        assert r["position"] <= 0 and r["velocity"] <= 1 and r["acceleration"] <= 1 and r["jerk"] <= 1, r

    check()
    print(f"{robot}: largest share of each limit over 5000 policy outputs: " +
          ", ".join(f"{k} {v:.6f}" for k, v in worst.items() if k != "position") +
          f"; furthest past a position limit {max(worst['position'], 0.0):.1e} rad (start poses on a limit included)")


@pytest.mark.parametrize("robot", sorted(ARMS))
def test_worst_cases_stay_inside(robot):
    """Hand-made extremes: full-range steps every tick, against the limit the joint sits at, stopping mid-swing."""
    hw = ARMS[robot]
    lo, hi, mid = hw.joint_lower, hw.joint_upper, (hw.joint_lower + hw.joint_upper) / 2
    cases = {
        "every tick limit to limit": (mid, [hi if k % 2 else lo for k in range(60)]),
        "limit to limit, held": (lo + 0.01, [hi] * 30 + [lo] * 30),
        "beyond the limit": (hi - 0.01, [hi + 5.0] * 40),
        "stop mid-swing": (lo + 0.01, [hi] * 8 + [None] * 40),
        "reverse at speed": (mid, [hi] * 10 + [lo] * 10 + [hi] * 10),
    }
    for name, (q0, targets) in cases.items():
        setpoints = play(hw, q0, targets)
        r = limit_ratios(hw, q0, setpoints)
        assert r["position"] <= 0 and r["velocity"] <= 1 and r["acceleration"] <= 1 and r["jerk"] <= 1, (name, r)


def test_it_reaches_a_target_that_stays_put_without_overshoot():
    hw = ARMS["panda"]
    q0 = np.array([0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785])
    target = q0 + 0.1
    q = play(hw, q0, [target] * 25)  # 0.5 s
    assert np.all(q <= target + 1e-9)  # approaches from below, never past
    np.testing.assert_allclose(q[-1], target, atol=1e-6)
    assert np.abs(q[199] - target).max() < 0.01  # 0.1 rad within 0.2 s: joint 2's 7.5 rad/s^2 allows ~0.23 s


def test_braking_velocity_stops_within_the_distance():
    """The braking curve: from that speed, a jerk-limited stop (simulated at 1 kHz) covers at most the distance."""
    acc, jerk, h = np.array([7.5]), np.array([3750.0]), 1e-4
    for d in (1e-4, 1e-2, 0.3, 2.0):
        v = float(braking_velocity(np.array([d]), acc, jerk)[0])
        x, speed, a = 0.0, v, 0.0
        while speed > 0:  # decelerate: jerk down to -A, hold, release so that a reaches 0 with the speed
            release = a * a / (2 * jerk[0])  # speed lost while the deceleration returns to 0
            a = min(a + jerk[0] * h, 0.0) if speed <= release else max(a - jerk[0] * h, -acc[0])
            speed += a * h
            x += max(speed, 0.0) * h
        assert x <= d * 1.01 + 1e-6, (d, v, x)


# ---------------------------------------------------------------------------------------------- SmoothingRobot
class Recording:
    """A robot at q0 that keeps every command it is sent."""

    def __init__(self, hw, q0):
        self.hw, self.q0, self.sent = hw, q0, []

    def read_state(self) -> RobotState:
        n = len(self.hw.joint_names)
        return RobotState(stamp=0.0, received=0.0, joint_names=self.hw.joint_names[::-1], q=self.q0[::-1].copy(),
                          dq=np.zeros(n))

    def send_command(self, command: JointCommand) -> None:
        self.sent.append(command)

    def close(self) -> None:
        pass


def test_smoothing_robot_starts_at_the_measured_pose_and_brakes_without_stiffness():
    hw = ARMS["panda"]
    n = len(hw.joint_names)
    q0 = np.array([0.1, -0.7, 0.05, -2.3, 0.0, 1.6, 0.8])
    robot = Recording(hw, q0)
    smooth = SmoothingRobot(robot, hw, control_dt=0.02)
    smooth.read_state()  # reported in reverse order: mapped by name
    stiff = JointCommand(hw.joint_names, q0 + 0.2, np.zeros(n), hw.kp.copy(), hw.kd.copy(), np.zeros(n))
    for _ in range(5):
        smooth.send_command(stiff)
    limp = dataclasses.replace(stiff, kp=np.zeros(n))  # DAMP: a position-controlled arm stops and holds instead
    for _ in range(30):
        smooth.send_command(limp)
    setpoints = np.concatenate([c.setpoints.q for c in robot.sent])  # (35 * 20, J)
    assert all(c.setpoints.q.shape == (20, n) and c.setpoints.period == 1e-3 for c in robot.sent)
    assert_inside(hw, q0, setpoints)  # from rest at the measured pose
    moved = setpoints[5 * 20 - 1] - q0
    assert np.all(moved > 0) and np.all(setpoints[-1] < q0 + 0.2)  # it went towards the target, stopped short
    np.testing.assert_allclose(robot.sent[-1].setpoints.dq, 0.0, atol=1e-9)  # at rest
    np.testing.assert_array_equal(robot.sent[4].q, stiff.q)  # the command's q: still the tick's target


# ---------------------------------------------------------------------------------------------- refusals
def test_a_controller_that_cannot_take_the_policy_rate_is_refused(tmp_path):
    text = (REPO / "hardware" / "panda.yaml").read_text()
    bad = tmp_path / "panda_30hz.yaml"
    bad.write_text(text.replace("control_rate_hz: 50", "control_rate_hz: 30"))
    with pytest.raises(ValueError, match=r"controller.setpoint_rate_hz = 1000 Hz cannot take a 30 Hz policy: a tick "
                                         r"would be 33.33 setpoints, not a whole number"):
        load_hardware(bad)
    contract = OnnxPolicy(REPO / "policies" / "panda_reach.onnx").contract
    fast = dataclasses.replace(contract, policy_dt=1 / 1500, physics_dt=1 / 1500)  # faster than its setpoints
    with pytest.raises(ValueError, match=r"hardware 'panda' controller.setpoint_rate_hz = 1000 Hz cannot take a "
                                         r"1500 Hz policy"):
        validate_contract(fast, ARMS["panda"])
    limits = tmp_path / "no_rate.yaml"
    limits.write_text(text.replace("  setpoint_rate_hz: 1000\n", ""))
    with pytest.raises(ValueError, match=r"controller.acceleration_limits needs controller.setpoint_rate_hz"):
        load_hardware(limits)


def test_gains_the_robot_keeps_to_itself_are_not_checked_but_a_limp_joint_is_refused():
    contract = OnnxPolicy(REPO / "policies" / "panda_reach.onnx").contract
    hw = ARMS["panda"]
    assert max(contract.kp) > max(hw.kp_max)  # 4500: the training servo's, never sent to a Franka
    validate_contract(contract, hw)
    limp = dataclasses.replace(contract, kp=(0.0,) + tuple(contract.kp[1:]))
    with pytest.raises(ValueError, match=r"contract kp for panda_joint1 is 0 \(trained limp\), but the controller of "
                                         r"hardware 'panda' holds every position it is sent"):
        validate_contract(limp, hw)
    commanded = dataclasses.replace(hw, controller=dataclasses.replace(hw.controller, gains="command"))
    with pytest.raises(ValueError, match=r"contract kp for panda_joint1 = 4500 exceeds the robot's kp_max = 3000"):
        validate_contract(contract, commanded)
