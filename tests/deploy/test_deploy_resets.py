"""Reset modules on the MuJoCo twin: they reach their pose within tolerance through the safety filter, or
fail with one line after their timeout."""

import threading

import numpy as np
import pytest

from robo_rl.deploy.reset_modules import (
    HomeReset,
    OperatorConfirmedReset,
    RandomReset,
    ResetError,
    ResetSettings,
    WaypointReset,
    make_reset,
    measured_q,
    piecewise_linear,
    run_reset,
    segment_durations,
)
from robo_rl.deploy.session import open_session
from robo_rl.deploy.state_machine import Mode
from tests.conftest import REPO


@pytest.fixture
def panda():
    """The panda reach policy on the twin in simulated time, in READY; returns (session, step)."""
    s = open_session(REPO / "policies" / "panda_reach.onnx", REPO / "hardware" / "panda.yaml", realtime=False)
    c = s.controller
    c.request_ramp()
    while c.mode is not Mode.READY:
        c.tick(s.robot.time)
    sent = []

    def step():
        sent.append(c.tick(s.robot.time))

    s.sent = sent
    return s, step


def test_piecewise_linear_path_respects_speed_and_hits_waypoints():
    points = np.array([[0.0, 0.0], [1.0, -0.5], [1.0, 0.5]])  # (K, J)
    speed = np.array([2.0, 1.0])
    durations = segment_durations(points, speed, 0.1)
    np.testing.assert_allclose(durations, [0.5, 1.0])
    q = piecewise_linear(points, durations, t0=10.0)
    np.testing.assert_allclose(q(10.5), points[1])
    np.testing.assert_allclose(q(11.5), points[2])
    np.testing.assert_allclose(q(99.0), points[2])
    ts = np.linspace(10.0, 11.5, 301)
    v = np.abs(np.diff([q(t) for t in ts], axis=0)) / np.diff(ts)[:, None]
    assert (v <= speed * (1 + 1e-9)).all()


def test_waypoint_then_home_reset_reach_their_poses(panda):
    s, step = panda
    c, hw = s.controller, s.hw
    away = c.default_q.copy()
    away[[0, 3]] += [0.6, -0.4]
    lifted = c.default_q.copy()
    lifted[1] -= 0.3
    result = run_reset(c, WaypointReset(waypoints=[lifted, away], settings=ResetSettings(tolerance=0.02)), step=step)
    assert result.max_error <= 0.02 and np.abs(measured_q(c) - away).max() <= 0.02
    home = run_reset(c, HomeReset(settings=ResetSettings(tolerance=0.02)), step=step)
    assert np.abs(measured_q(c) - c.default_q).max() <= 0.02 and home.name == "home"
    # Every command of both resets went through the filter without a rate or torque clamp: the path is smooth.
    assert c.mode is Mode.READY
    assert not {"rate_limit", "torque_limit", "joint_limit"} & set(c.intervention_counts)
    speeds = np.abs(np.diff([cmd.q for cmd in s.sent], axis=0)) / c.period  # (T - 1, J)
    assert (speeds <= 0.2 * hw.velocity_limits * (1 + 1e-6)).all()  # the default speed_fraction


def test_random_reset_stays_in_bounds_and_is_seeded(panda):
    s, step = panda
    c, hw = s.controller, s.hw
    n = len(hw.joint_names)
    goals = []
    for _ in range(2):
        module = RandomReset(low=[-0.2] * n, high=[0.2] * n, rng=np.random.default_rng(4),
                             settings=ResetSettings(tolerance=0.03))
        result = run_reset(c, module, step=step)
        goals.append(result.goal)
        assert np.abs(result.goal - c.default_q).max() <= 0.2 + 1e-12
        assert np.abs(measured_q(c) - result.goal).max() <= 0.03
    np.testing.assert_array_equal(goals[0], goals[1])  # same seed, same pose
    with pytest.raises(ValueError, match="reset bounds for panda_joint1: low 0.3 must be finite and <= high 0.1"):
        run_reset(c, RandomReset(low=[0.3] + [0.0] * (n - 1), high=[0.1] * n, rng=np.random.default_rng(0)),
                  step=step)


def test_reset_fails_with_one_line_after_its_timeout(panda):
    s, step = panda
    c = s.controller
    far = c.default_q.copy()
    far[0] += 1.5
    start = s.robot.time
    with pytest.raises(ResetError) as err:
        run_reset(c, HomeReset(home=far, settings=ResetSettings(timeout_s=0.5)), step=step)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("reset 'home' failed after its 0.5 s timeout: panda_joint1 is ")
    assert "rad from its goal (tolerance 0.05 rad" in message
    assert 0.5 <= s.robot.time - start <= 0.5 + 2 * c.period  # it waited its timeout, and not longer


def test_operator_confirmed_reset(panda):
    s, step = panda
    c = s.controller
    module = OperatorConfirmedReset(HomeReset(), timeout_s=1.0)
    module.confirm()  # a confirmation from before the reset does not count
    with pytest.raises(ResetError, match=r"^reset 'operator' failed after its 1 s timeout: the operator did not "
                                         r"confirm the reset$"):
        run_reset(c, module, step=step)
    ticks = []

    def step_and_confirm():
        step()
        ticks.append(1)
        if len(ticks) == 10:
            threading.Thread(target=module.confirm).start()  # from another thread, as a key or topic would

    result = run_reset(c, module, step=step_and_confirm)
    assert result.name == "operator" and 0.2 <= result.duration_s < 1.0


def test_reset_refused_or_interrupted_outside_ready(panda):
    s, step = panda
    c = s.controller
    far = c.default_q.copy()
    far[0] += 1.0

    def step_then_estop():
        step()
        if s.robot.time > 0.3 + start:
            c.estop()

    start = s.robot.time
    with pytest.raises(ResetError, match=r"reset 'home' interrupted: the robot went to ESTOP \(estop\)"):
        run_reset(c, HomeReset(home=far), step=step_then_estop)
    with pytest.raises(ResetError, match="reset 'home' needs READY or POLICY, the robot is in ESTOP"):
        run_reset(c, HomeReset(), step=step)
    with pytest.raises(ValueError, match=r"waypoint 0: panda_joint4 = 0.5 is outside \[-3.0518, -0.0898\]"):
        c.reset()
        c.request_ramp()
        while c.mode is not Mode.READY:
            step()
        run_reset(c, WaypointReset(waypoints=[{"joint4": 0.5}]), step=step)


def test_reset_from_policy_ends_the_episode_without_a_jump(panda):
    s, step = panda
    c = s.controller
    c.start_policy()
    for _ in range(25):
        step()
    last_policy_q = c.last_command.q.copy()
    result = run_reset(c, make_reset("home", s.hw), step=step)
    assert c.mode is Mode.READY and result.max_error <= 0.05
    first_reset_q = s.sent[25].q
    assert np.abs(first_reset_q - last_policy_q).max() <= 0.2 * s.hw.velocity_limits.max() * c.period + 1e-9
    assert [t.reason for t in c.state_machine.transitions][-2:] == ["start", "episode_end"]
    with pytest.raises(ValueError, match="reset_module 'teleport': allowed values are home, random, operator"):
        make_reset("teleport", s.hw)
