"""joint_trajectory commands carry velocities and time_from_start = the control period, so a joint trajectory
controller keeps moving between ticks instead of coming to rest at every point."""

from types import SimpleNamespace

import numpy as np

from robo_rl.deploy import ros_commands as rc
from robo_rl.deploy import ros_messages as rm
from robo_rl.deploy.robot import JointCommand


def ns(**fields):
    return SimpleNamespace(**fields)


TYPES = rm.MessageTypes(**{name: ns for name in rm.MessageTypes.__dataclass_fields__
                           if name not in ("float64_array", "float32_array", "byte_value")})
NAMES = ("j0", "j1", "j2")
PERIOD = 0.02


def command(q, kp=50.0, dq=(0.0, 0.0, 0.0)) -> JointCommand:
    n = len(NAMES)
    return JointCommand(NAMES, np.asarray(q, dtype=np.float64), np.asarray(dq, dtype=np.float64), np.full(n, kp),
                        np.full(n, 2.0), np.zeros(n))


def point(msg):
    (p,) = msg.points
    return np.asarray(p.positions), np.asarray(p.velocities), p.time_from_start


def test_velocities_follow_consecutive_targets_and_time_from_start_is_the_period():
    encode = rc.CommandEncoder(TYPES, "joint_trajectory", PERIOD)
    targets = [np.array([0.0, 0.1, -0.2]) + k * np.array([0.01, -0.02, 0.0]) for k in range(4)]
    msgs = [encode(command(q)) for q in targets]
    _, v0, t0 = point(msgs[0])
    np.testing.assert_array_equal(v0, 0.0)  # the first point of a stream: nothing to differentiate
    assert (t0.sec, t0.nanosec) == (0, 20_000_000)
    for msg in msgs[1:]:
        q, v, _ = point(msg)
        np.testing.assert_allclose(v, [0.5, -1.0, 0.0])  # (q_k - q_{k-1}) / period, rad/s
    assert msgs[-1].header.stamp.sec == 0 and msgs[-1].header.stamp.nanosec == 0  # start now


def test_the_commands_own_dq_wins_and_damping_comes_to_rest():
    encode = rc.CommandEncoder(TYPES, "joint_trajectory", PERIOD)
    encode(command([0.0, 0.0, 0.0]))
    _, v, _ = point(encode(command([0.1, 0.1, 0.1], dq=[0.3, 0.0, -0.3])))
    np.testing.assert_array_equal(v, [0.3, 0.0, -0.3])
    _, v, _ = point(encode(command([0.5, 0.5, 0.5], kp=0.0)))  # DAMP / ESTOP: hold the measured pose, at rest
    np.testing.assert_array_equal(v, 0.0)
    _, v, _ = point(encode(command([0.6, 0.5, 0.5])))  # after a damping command, the stream starts afresh
    np.testing.assert_array_equal(v, 0.0)


def test_velocities_are_clipped_to_the_joint_limits():
    encode = rc.CommandEncoder(TYPES, "joint_trajectory", PERIOD, velocity_limits=np.array([1.0, 1.0, 1.0]))
    encode(command([0.0, 0.0, 0.0]))
    _, v, _ = point(encode(command([0.2, -0.2, 0.01])))  # a 0.2 rad step in 20 ms asks for 10 rad/s
    np.testing.assert_allclose(v, [1.0, -1.0, 0.5])


def test_a_command_for_some_joints_is_clipped_to_their_own_limits():
    """An arm's command without the gripper joint (franka_gripper moves that one) against the robot's limits."""
    encode = rc.CommandEncoder(TYPES, "joint_trajectory", PERIOD, velocity_limits=np.array([1.0, 2.0, 0.1, 3.0]),
                               joint_names=("j0", "j1", "finger", "j2"))
    encode(command([0.0, 0.0, 0.0]))
    _, v, _ = point(encode(command([0.2, -0.2, 0.2])))
    np.testing.assert_allclose(v, [1.0, -2.0, 3.0])


def test_other_interfaces_are_unchanged():
    cmd = command([0.1, 0.2, 0.3])
    encode = rc.CommandEncoder(TYPES, "forward_position", PERIOD)
    np.testing.assert_array_equal(encode(cmd).data, [0.1, 0.2, 0.3])
    rows = rc.CommandEncoder(TYPES, "pd_targets", PERIOD)(cmd)
    assert [d.size for d in rows.layout.dim] == [5, 3]
