"""The base linear-velocity estimator (robo_rl.deploy.estimation): the legs' kinematics against MuJoCo's own, the
estimate against the Go2 twin's true velocity while go2_walk walks, the velocity_tracking reward fed by it, and
one-line refusals of what it cannot use."""

import dataclasses
import sys

import numpy as np
import pytest

from robo_rl.deploy.estimation import (
    EstimatingRobot,
    kinematic_base_velocity,
    make_base_velocity_estimator,
)
from robo_rl.deploy.hardware import load_hardware
from robo_rl.deploy.robot import JointCommand, RobotState
from robo_rl.deploy.runtime import PolicyRuntime
from robo_rl.deploy.runtime_config import RuntimeConfig
from robo_rl.deploy.session import make_robot, open_session
from robo_rl.deploy.state_machine import Mode
from robo_rl.sim.mjmodel import mujoco  # a headless MUJOCO_GL before mujoco loads: other tests render
from tests.conftest import REPO, hardware_variant

GO2 = load_hardware(REPO / "hardware" / "go2.yaml")
WALK = REPO / "policies" / "go2_walk.onnx"


def test_foot_kinematics_match_mujoco_floating_model():
    """r_i, the foot velocity J_i dq + w x r_i and the rolling foot's contact point, from the numpy chains read out
    of the model, against MuJoCo's full floating model in random configurations (base anywhere, any orientation,
    every joint moving)."""
    estimator = make_base_velocity_estimator(GO2)
    legs = estimator.legs
    model = mujoco.MjModel.from_xml_path(str(REPO / "envs" / "go2.xml"))
    data = mujoco.MjData(model)
    joints = [model.joint(n) for n in GO2.joint_names]
    qadr = np.array([j.qposadr[0] for j in joints])
    dadr = np.array([j.dofadr[0] for j in joints])
    rng = np.random.default_rng(0)
    assert np.allclose(legs.radii, 0.022)  # the foot spheres of go2_robot.xml
    for _ in range(5):
        quat = rng.normal(size=4)
        data.qpos[:3], data.qpos[3:7] = rng.normal(size=3), quat / np.linalg.norm(quat)
        data.qpos[qadr] = rng.uniform(GO2.joint_lower, GO2.joint_upper)
        data.qvel[:] = rng.normal(size=model.nv) * 2.0
        mujoco.mj_forward(model, data)
        rot = data.qpos[3:7].copy()
        mat = np.empty(9)
        mujoco.mju_quat2Mat(mat, rot)
        rot = mat.reshape(3, 3)  # base -> world
        gyro = data.qvel[3:6]  # base frame
        q_legs = legs.leg_joints(GO2.joint_names, data.qpos[qadr])  # (F, 3)
        dq_legs = legs.leg_joints(GO2.joint_names, data.qvel[dadr])
        pos, jac = legs.foot_jacobians(q_legs)
        up_b = rot.T @ np.array([0.0, 0.0, 1.0])
        point = kinematic_base_velocity(pos, jac, dq_legs, gyro, up_b, np.zeros(4))  # (F, 3)
        rolling = kinematic_base_velocity(pos, jac, dq_legs, gyro, up_b, legs.radii)
        for f, foot in enumerate(GO2.feet):
            site = model.site(f"{foot}_foot_site").id
            np.testing.assert_allclose(pos[f], rot.T @ (data.site_xpos[site] - data.qpos[:3]), atol=1e-12)
            twist = np.empty(6)  # (angular, linear) of the site, world frame
            mujoco.mj_objectVelocity(model, data, mujoco.mjtObj.mjOBJ_SITE, site, twist, 0)
            np.testing.assert_allclose(point[f], rot.T @ (data.qvel[:3] - twist[3:]), atol=1e-12)
            # the point one radius below the centre (world up), fixed on the foot: what stands still in stance
            contact = twist[3:] + np.cross(twist[:3], -0.022 * np.array([0.0, 0.0, 1.0]))
            np.testing.assert_allclose(rolling[f], rot.T @ (data.qvel[:3] - contact), atol=1e-12)


def test_twin_reports_its_accelerometer_and_foot_forces_in_the_hardware_order():
    """The estimator's inputs on the twin: at the home keyframe only the front feet (FR, FL: the first two of the
    SDK's order) touch the floor; held for 1 s the robot stands, its weight on its feet and gravity read upwards."""
    twin = make_robot("sim", GO2, 0.02, realtime=False, physics_dt=0.005)
    start = twin.read_state()
    assert start.foot_force[:2].min() > 1.0 and start.foot_force[2:].max() == 0.0, start.foot_force
    hold = JointCommand(GO2.joint_names, start.q, np.zeros(12), GO2.kp, GO2.kd, np.zeros(12))
    for _ in range(50):
        twin.send_command(hold)
    state = twin.read_state()
    weight = sum(twin.model.body_mass) * 9.81
    assert abs(state.foot_force.sum() - weight) < 0.1 * weight, (state.foot_force, weight)
    np.testing.assert_allclose(state.imu_acc, [0.0, 0.0, 9.81], atol=0.3)  # level, still: gravity's reaction
    assert state.base_lin_vel is None  # no ground truth on the robot's channel


def walk(session, commands, seconds):
    """Ramp the twin to POLICY, then walk each command for `seconds`; (estimate, truth) (T, 3) base frame per tick."""
    c, twin = session.controller, session.robot
    c.request_ramp()
    for _ in range(500):  # RAMP takes 2 s: 100 ticks
        c.tick(twin.time)  # fast mode: the clock is simulation time
        if c.mode is Mode.READY:
            session.start()
            break
    assert c.mode is Mode.POLICY, c.status_line()
    estimates, truth = [], []
    for command in commands:
        session.policy.commands["velocity_command"] = np.array(command, dtype=float)
        for _ in range(round(seconds / c.period)):
            true_v = twin.base_twist()[0]  # at the time of the state the tick reads
            c.tick(twin.time)
            estimates.append(c.robot.estimator.estimate_b)
            truth.append(true_v)
    assert c.mode is Mode.POLICY, c.status_line()
    return np.array(estimates), np.array(truth)


def test_estimator_tracks_the_twins_true_velocity_while_go2_walk_walks():
    """Measured (seed-free: the twin has no noise here): mean planar error 0.016 m/s, worst tick 0.070 m/s over
    0.6 m/s forward, then 0.3 m/s forward + 0.3 m/s sideways turning at 0.5 rad/s, then 0.4 m/s backwards, 3 s each.
    Asserted with margin: mean < 0.04 m/s, worst < 0.15 m/s; and the estimate is no constant: it follows the
    commands."""
    session = open_session(WALK, REPO / "hardware" / "go2.yaml", realtime=False)
    assert isinstance(session.controller.robot, EstimatingRobot)  # the deploy core wired it from go2.yaml
    assert session.robot.read_state().base_lin_vel is None  # the twin reports no ground truth: the estimator runs
    commands = [(0.6, 0.0, 0.0), (0.3, 0.3, 0.5), (-0.4, 0.0, 0.0)]
    estimates, truth = walk(session, commands, 3.0)
    error = np.linalg.norm(estimates[:, :2] - truth[:, :2], axis=1)  # (T,)
    print(f"planar error: mean {error.mean():.4f} m/s, max {error.max():.4f} m/s")
    assert error.mean() < 0.04 and error.max() < 0.15, (error.mean(), error.max())
    settled = estimates.reshape(3, -1, 3)[:, -50:, :2].mean(axis=1)  # (3, 2) each command's last second
    np.testing.assert_allclose(settled, [[0.6, 0.0], [0.3, 0.3], [-0.4, 0.0]], atol=0.15)


def test_velocity_tracking_reward_runs_on_the_twin_with_the_estimator():
    """The reward needs base_lin_vel, which only the estimator supplies on the twin: no hook error, and a high
    reward while the policy tracks (max 1.5: 1 for the planar velocity, 0.5 for the yaw rate; measured 1.47 over the
    first 3 s at 0.5 m/s, 0.87 if the estimate stayed at zero)."""
    twin = None
    config = RuntimeConfig(policy_path=str(WALK), hardware_config=str(REPO / "hardware" / "go2.yaml"),
                           rewards=("velocity_tracking",), realtime_priority=0)
    runtime = PolicyRuntime(config, log=lambda line: None, clock=lambda: twin.time)
    runtime.configure({"velocity_command": [0.5, 0.0, 0.0]})
    contract = runtime.policy.policy.contract
    twin = make_robot("sim", runtime.hw, contract.policy_dt, realtime=False, physics_dt=contract.physics_dt)
    c = runtime.attach(twin)
    c.request_ramp()
    for _ in range(500):
        if c.mode is Mode.READY:
            break
        c.tick(twin.time)
    ok, message = runtime.start()
    assert ok, message
    ticks = 150  # 3 s
    for _ in range(ticks):
        c.tick(twin.time)
    assert c.hook_errors == 0, c.last_hook_error
    assert runtime.tracker.active and c.mode is Mode.POLICY
    mean_reward = runtime.tracker.total_reward / ticks
    print(f"velocity_tracking: mean reward {mean_reward:.3f} of 1.5")
    assert mean_reward > 1.3, mean_reward


def go2_variant(tmp_path, old: str, new: str) -> str:
    """go2.yaml with `old` replaced by `new`."""
    return hardware_variant(tmp_path, "go2", old, new)


def test_a_model_without_foot_sites_is_refused_before_the_robot_is_reached(tmp_path):
    robot_xml = (REPO / "envs" / "go2_robot.xml").read_text().replace("_foot_site", "_toe")
    (tmp_path / "go2_no_feet.xml").write_text(robot_xml)
    hardware = go2_variant(tmp_path, "model: envs/go2.xml", f"model: {tmp_path / 'go2_no_feet.xml'}")
    runtime = PolicyRuntime(RuntimeConfig(policy_path=str(WALK), hardware_config=hardware), log=lambda line: None)
    with pytest.raises(ValueError, match=r"needs the foot site\(s\) FR_foot_site, FL_foot_site, RR_foot_site, "
                                         r"RL_foot_site in .*go2_no_feet.xml") as err:
        runtime.configure()
    assert "\n" not in str(err.value)


def test_without_mujoco_the_estimator_is_off_with_one_warning(monkeypatch):
    """A robot-side install has no mujoco (docs/deploy.md): the deploy goes on without the estimate, and says so."""
    monkeypatch.setitem(sys.modules, "mujoco", None)  # `import mujoco` raises ImportError
    lines = []
    assert make_base_velocity_estimator(GO2, warn=lines.append) is None
    assert lines == ["base velocity estimator off: it reads the legs from envs/go2.xml with mujoco, which is not "
                     "installed (pip install mujoco); state.base_lin_vel stays empty"]


@pytest.mark.parametrize("old, new, message", [
    ("feet: [FR, FL, RR, RL]", "feet: [FR, FL, FR, RL]", "feet lists FR more than once"),
    ("feet: [FR, FL, RR, RL]", "feet: []", "feet must be a non-empty list of names"),
    ("feet: [FR, FL, RR, RL]", "", "estimator.base_velocity needs a legged robot with feet"),
    ("{contact_threshold_n: 20}", "{contact_threshold_n: -1}", r"estimator.base_velocity.contact_threshold_n = -1: "
                                                               "must be a finite number > 0"),
    ("{contact_threshold_n: 20}", "{threshold: 20}", "unknown estimator.base_velocity key.s. threshold"),
    ("base_velocity:", "velocity:", "unknown estimator key.s. velocity"),
])
def test_hardware_estimator_section_refusals(tmp_path, old, new, message):
    with pytest.raises(ValueError, match=message) as err:
        load_hardware(go2_variant(tmp_path, old, new))
    assert "\n" not in str(err.value)


def test_feet_are_for_legged_robots_and_arms_have_none(tmp_path):
    assert load_hardware(REPO / "hardware" / "panda.yaml").feet is None
    text = (REPO / "hardware" / "panda.yaml").read_text() + "feet: [left, right]\n"
    (tmp_path / "panda.yaml").write_text(text)
    with pytest.raises(ValueError, match="feet is for kind: legged robots, not kind: arm"):
        load_hardware(tmp_path / "panda.yaml")


def standing_state(**changes) -> RobotState:
    twin = make_robot("sim", GO2, 0.02, realtime=False, physics_dt=0.005)
    return dataclasses.replace(twin.read_state(), **changes)


def test_missing_inputs_are_named_and_the_robot_passes_the_state_through():
    estimator = make_base_velocity_estimator(GO2)
    with pytest.raises(ValueError, match="needs imu_acc, foot_force: the robot does not report them"):
        estimator.update(standing_state(imu_acc=None, foot_force=None))
    with pytest.raises(ValueError, match=r"foot_force has shape \(2,\); the hardware file lists 4 feet"):
        estimator.update(standing_state(foot_force=np.zeros(2)))
    with pytest.raises(ValueError, match="got non-finite imu_acc"):
        estimator.update(standing_state(imu_acc=np.array([0.0, np.nan, 9.8])))

    class Blind:  # a robot without an accelerometer (the ROS 2 profile's Imu carries none here)
        def read_state(self):
            return standing_state(imu_acc=None)

    lines = []
    robot = EstimatingRobot(Blind(), estimator, warn=lines.append)
    assert robot.read_state().base_lin_vel is None and robot.read_state().base_lin_vel is None
    assert lines == ["base velocity estimate unavailable: the base velocity estimator needs imu_acc: the robot does "
                     "not report it"]  # once


def test_first_reading_starts_from_the_legs_and_a_repeated_stamp_changes_nothing():
    """The filter's bookkeeping on hand-made states (level base, legs still): start, same stamp, IMU-only
    prediction with every foot below the contact threshold, a clock that went back."""
    estimator = make_base_velocity_estimator(GO2)
    level = {"imu_quat": np.array([1.0, 0.0, 0.0, 0.0]), "imu_gyro": np.zeros(3), "dq": np.zeros(12)}
    state = standing_state(foot_force=np.full(4, 50.0), imu_acc=np.array([0.0, 0.0, 9.81]), **level)
    first = estimator.update(state)
    np.testing.assert_allclose(first, 0.0, atol=1e-12)  # still legs on the ground: at rest
    assert estimator.stance.all()
    pushed = dataclasses.replace(state, imu_acc=np.array([5.0, 0.0, 9.81]), foot_force=np.full(4, 19.0))
    np.testing.assert_array_equal(estimator.update(pushed), first)  # same stamp: the same reading again
    later = dataclasses.replace(pushed, stamp=state.stamp + 0.02)
    np.testing.assert_allclose(estimator.update(later), [0.1, 0.0, 0.0], atol=1e-12)  # below 20 N: IMU alone
    assert not estimator.stance.any()
    restarted = dataclasses.replace(state, stamp=state.stamp - 1.0)  # the robot's clock went back: start afresh
    np.testing.assert_allclose(estimator.update(restarted), 0.0, atol=1e-12)
