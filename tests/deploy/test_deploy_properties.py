"""SafetyFilter guarantees, checked on generated states and commands (hypothesis), and one named
regression test per gap the hardening issue listed.

Guarantees of every command `filter_command` returns: robot joint order; every number finite;
0 <= kp <= kp_max, 0 <= kd <= kd_max; |dq*| <= velocity_limits; q* inside [lower + margin, upper - margin];
and, whenever the measured state is finite, |kp (q* - q) + kd (dq* - dq) + tau_ff| <= torque_margin *
torque_limits at that measured state.
"""

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from robo_rl.deploy.hardware import HardwareSpec, SafetyConfig, load_hardware
from robo_rl.deploy.robot import JointCommand, RobotState
from robo_rl.deploy.safety import INTERVENTIONS, SafetyFilter
from tests.conftest import REPO

TICKS = 4
"""Commands filtered per generated example (the filter remembers the previous target between them)."""
EXAMPLES_FINITE = 1600
EXAMPLES_ANY = 1000
# 1600 * 4 + 1000 * 4 = 10,400 filtered commands per run, each checked against every guarantee.


def toy_hw(margin: float = 0.05) -> HardwareSpec:
    """3-joint arm: limits +-1 rad, 20 rad/s, torque limit 10 N m, kp <= 500, kd <= 10, 50 Hz."""
    return HardwareSpec(
        robot="toy_arm", kind="arm", joint_names=("j0", "j1", "j2"),
        joint_lower=np.full(3, -1.0), joint_upper=np.full(3, 1.0), velocity_limits=np.full(3, 20.0),
        torque_limits=np.full(3, 10.0), kp=np.full(3, 20.0), kd=np.full(3, 1.0), kp_max=np.full(3, 500.0),
        kd_max=np.full(3, 10.0), control_rate_hz=50.0,
        safety=SafetyConfig(joint_limit_margin=margin, max_position_step=0.25, ramp_time_s=2.0, damping_kd=1.5),
    )


HWS = (
    toy_hw(),
    toy_hw(margin=1.5),  # margin wider than half the range: the only safe target is the midpoint
    load_hardware(REPO / "hardware" / "go2.yaml"),
    load_hardware(REPO / "hardware" / "panda.yaml"),
)


def clamped_limits(hw: HardwareSpec) -> tuple[np.ndarray, np.ndarray]:
    """[lower + margin, upper - margin], or the midpoint where the margin inverts them; (J,) each."""
    m = hw.safety.joint_limit_margin
    lo, hi = hw.joint_lower + m, hw.joint_upper - m
    mid = (hw.joint_lower + hw.joint_upper) / 2
    return np.where(lo > hi, mid, lo), np.where(lo > hi, mid, hi)


def assert_guarantees(hw: HardwareSpec, state: RobotState, cmd: JointCommand, interventions: list[str]) -> None:
    n = len(hw.joint_names)
    assert cmd.joint_names == hw.joint_names
    for a in (cmd.q, cmd.dq, cmd.kp, cmd.kd, cmd.tau):
        assert a.shape == (n,) and a.dtype == np.float64 and np.all(np.isfinite(a))
    assert np.all(cmd.kp >= 0) and np.all(cmd.kp <= hw.kp_max)
    assert np.all(cmd.kd >= 0) and np.all(cmd.kd <= hw.kd_max)
    assert np.all(np.abs(cmd.dq) <= hw.velocity_limits)
    lo, hi = clamped_limits(hw)
    assert np.all(cmd.q >= lo) and np.all(cmd.q <= hi)
    assert set(interventions) <= set(INTERVENTIONS) and len(set(interventions)) == len(interventions)
    idx = [state.joint_names.index(j) for j in hw.joint_names]
    q = np.asarray(state.q, dtype=np.float64)[idx]
    dq = np.asarray(state.dq, dtype=np.float64)[idx]
    if np.all(np.isfinite(q)) and np.all(np.isfinite(dq)):
        tau = cmd.kp * (cmd.q - q) + cmd.kd * (cmd.dq - dq) + cmd.tau  # (J,) at the measured state
        budget = hw.safety.torque_margin * hw.torque_limits
        assert np.all(np.abs(tau) <= budget), (tau, budget, interventions)


SPECIAL = [0.0, -0.0, 1e300, -1e300, 1e6, -1e6, 5e-324, 1e-300, 0.95, -0.95, 1.0, -1.0, 100.0]
FINITE = st.one_of(st.floats(-3.0, 3.0), st.sampled_from(SPECIAL), st.floats(-1e300, 1e300))
GAIN = st.one_of(st.floats(0.0, 8000.0), st.sampled_from([0.0, 1e6, 1e300, 5e-324, 25.0, 4500.0]))
ANY = st.one_of(FINITE, st.sampled_from([math.nan, math.inf, -math.inf]),
                st.floats(allow_nan=True, allow_infinity=True))


@st.composite
def scenario(draw, values, gains):
    """(hw, [(state, command)] * TICKS): joints of state and command in random orders (per example)."""
    hw = draw(st.sampled_from(HWS))
    n = len(hw.joint_names)
    s_order = list(draw(st.permutations(range(n))))
    c_order = list(draw(st.permutations(range(n))))
    v = draw(hnp.arrays(np.float64, (TICKS, 5, n), elements=values))  # state q, dq; command q, dq, tau
    g = draw(hnp.arrays(np.float64, (TICKS, 2, n), elements=gains))  # command kp, kd
    negative = draw(st.integers(-1, 4 * g.size))  # about one example in four: one negative gain (bad_command)
    if 0 <= negative < g.size:
        g.flat[negative] = -abs(g.flat[negative]) - 1e-3
    s_names = tuple(hw.joint_names[i] for i in s_order)
    c_names = tuple(hw.joint_names[i] for i in c_order)
    ticks = []
    for t in range(TICKS):
        state = RobotState(stamp=float(t), received=float(t), joint_names=s_names, q=v[t, 0, s_order],
                           dq=v[t, 1, s_order])
        cmd = JointCommand(c_names, v[t, 2, c_order], v[t, 3, c_order], g[t, 0, c_order], g[t, 1, c_order],
                           v[t, 4, c_order])
        ticks.append((state, cmd))
    return hw, ticks


def run_ticks(hw, ticks) -> None:
    f = SafetyFilter(hw)
    for state, cmd in ticks:
        out, why = f.filter_command(cmd, state)
        assert_guarantees(hw, state, out, why)


@settings(max_examples=EXAMPLES_FINITE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario(FINITE, GAIN))
def test_filter_guarantees_on_finite_inputs(case):
    run_ticks(*case)


@settings(max_examples=EXAMPLES_ANY, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario(ANY, st.one_of(GAIN, ANY)))
def test_filter_guarantees_on_any_input(case):
    run_ticks(*case)


# ------------------------------------------------------------------------------------------------ the gaps


def state(q=(0.0, 0.0, 0.0), dq=(0.0, 0.0, 0.0), t=0.0) -> RobotState:
    return RobotState(stamp=t, received=t, joint_names=("j0", "j1", "j2"), q=np.array(q, float),
                      dq=np.array(dq, float))


def command(q=(0.0, 0.0, 0.0), dq=(0.0, 0.0, 0.0), kp=0.0, kd=0.0, tau=(0.0, 0.0, 0.0)) -> JointCommand:
    return JointCommand(("j0", "j1", "j2"), np.array(q, float), np.array(dq, float), np.full(3, float(kp)),
                        np.full(3, float(kd)), np.array(tau, float))


def torque(cmd: JointCommand, s: RobotState) -> np.ndarray:
    return cmd.kp * (cmd.q - s.q) + cmd.kd * (cmd.dq - s.dq) + cmd.tau  # (J,)


def test_gap_kp_zero_joint_is_torque_checked():
    hw = toy_hw()
    s = state(dq=(15.0, -15.0, 0.0))
    out, why = SafetyFilter(hw).filter_command(command(kp=0.0, kd=10.0), s)  # kd |dq| = 150 N m > 10
    assert "damping_limit" in why
    np.testing.assert_array_less(np.abs(torque(out, s)), 10.0 + 1e-12)
    np.testing.assert_allclose(np.abs(torque(out, s))[:2], 10.0, rtol=1e-8)  # limited, not zeroed
    assert out.kd[2] == 10.0  # the joint at rest keeps its damping


def test_gap_feedforward_torque_is_limited():
    hw = toy_hw()
    s = state()
    out, why = SafetyFilter(hw).filter_command(command(kp=0.0, tau=(100.0, -100.0, 3.0)), s)
    assert why == ["feedforward_limit"]
    np.testing.assert_allclose(out.tau, [10.0, -10.0, 3.0], rtol=1e-8)
    assert np.all(np.abs(torque(out, s)) <= 10.0)


def test_gap_kd_term_is_limited_when_kp_is_zero():
    hw = toy_hw()
    s = state(dq=(-19.0, 0.0, 0.0))
    # velocity target +19 against measured -19 with kd 1: 38 N m of damping torque, plus 5 feed-forward
    out, why = SafetyFilter(hw).filter_command(command(dq=(19.0, 0.0, 0.0), kp=0.0, kd=1.0, tau=(5.0, 0, 0)), s)
    assert why == ["damping_limit"]
    assert out.kd[0] == pytest.approx(5.0 / 38.0, rel=1e-6)
    assert abs(torque(out, s)[0]) <= 10.0


def test_gap_torque_fix_keeps_q_inside_the_clamp():
    """kp 20 with tau_ff 100 used to move q* to -4.5 rad against a +-0.95 clamp."""
    hw = toy_hw()
    s = state()
    out, why = SafetyFilter(hw).filter_command(command(q=(0.0, 0.0, 0.0), kp=20.0, tau=(100.0, 0.0, 0.0)), s)
    assert -0.95 <= out.q[0] <= 0.95
    assert abs(torque(out, s)[0]) <= 10.0
    assert "feedforward_limit" in why


def test_gap_measured_q_far_outside_limits_lowers_kp():
    hw = toy_hw()
    s = state(q=(3.0, 0.0, 0.0))  # pushed far past its stop; kp 500 at the nearest limit would be 1025 N m
    out, why = SafetyFilter(hw).filter_command(command(q=(0.0, 0.0, 0.0), kp=500.0), s)
    assert why[-2:] == ["torque_limit", "stiffness_limit"]
    assert out.q[0] == pytest.approx(0.95)
    assert out.kp[0] == pytest.approx(10.0 / 2.05, rel=1e-6) and out.kp[1] == 500.0
    assert abs(torque(out, s)[0]) <= 10.0


def test_stiffness_limit_never_raises_kp():
    """Found by the property test in CI: an inverted clamp (margin wider than half the range) leaves
    0 as the only target, the joint sits 1e-59 rad from it and moves at 5e15 rad/s; the lowered kd
    rounds the damping torque a hair past the aim, the interval of fitting targets misses 0, and the
    lowered kp came out as bound / 1e-59 = 1e44. A lowered kp must never exceed the commanded one."""
    hw = toy_hw(margin=1.5)  # [lo, hi] collapse to the midpoint 0
    tiny = np.full(3, 1.43417826e-59)
    s = state(q=tiny, dq=(-4813866122184387.0, tiny[1], tiny[2]), t=1.0)  # a value that rounds past the aim
    out, why = SafetyFilter(hw).filter_command(command(q=tiny, dq=tiny, kp=1.0, kd=1.0, tau=tiny), s)
    assert "stiffness_limit" in why
    assert np.all(out.kp >= 0) and np.all(out.kp <= 1.0)
    assert np.all(np.abs(torque(out, s)) <= hw.torque_limits * hw.safety.torque_margin)


def test_gap_gains_above_hardware_bounds_are_clipped():
    hw = toy_hw()
    out, why = SafetyFilter(hw).filter_command(command(kp=1e6, kd=1e3), state())
    assert why == ["gain_limit"]
    np.testing.assert_array_equal(out.kp, 500.0)
    np.testing.assert_array_equal(out.kd, 10.0)


def test_gap_velocity_limits_are_enforced():
    hw = toy_hw()
    f = SafetyFilter(hw, control_dt=0.002)  # 500 Hz: a step of 20 rad/s * 2 ms = 0.04 rad < max_position_step
    s = state()
    out, why = f.filter_command(command(q=(0.5, 0.0, 0.0), dq=(50.0, -50.0, 1.0), kp=1.0, kd=0.1), s)
    np.testing.assert_allclose(out.dq, [20.0, -20.0, 1.0])  # velocity targets within +-velocity_limits
    assert out.q[0] == pytest.approx(0.04)  # the target moves no faster than the joint may
    assert why == ["velocity_limit", "rate_limit"]
    assert f.check_state(state(dq=(23.9, 0.0, 0.0)), now=0.0) is None  # within overspeed_factor 1.2
    assert f.check_state(state(dq=(0.0, -24.1, 0.0)), now=0.0) == "overspeed"
    assert "j1" in f.overspeed_detail(state(dq=(0.0, -24.1, 0.0)))


def test_rate_limit_never_drags_the_target_outside_the_limits():
    hw = toy_hw()
    s = state(q=(2.0, 0.0, 0.0))  # measured outside the limits: the rate window [1.75, 2.25] lies outside too
    out, why = SafetyFilter(hw).filter_command(command(kp=1.0), s)
    assert out.q[0] == pytest.approx(0.95)
    assert "joint_limit" in why


def test_damping_command_keeps_the_torque_budget_when_fast():
    hw = toy_hw()
    f = SafetyFilter(hw)
    f.estop()
    s = state(dq=(100.0, 0.0, 0.0))  # damping_kd 1.5 * 100 rad/s = 150 N m
    out, why = f.filter_command(command(), s)
    assert why == ["estop", "damping_limit"]
    assert out.kd[0] == pytest.approx(0.1) and out.kd[1] == 1.5
    assert np.all(np.abs(torque(out, s)) <= 10.0)
