"""A Franka as franka_ros2 presents it: its joint names mapped onto the model's by the hardware file, the end-effector
position computed from the joints when the robot reports none, and joints the robot does not report refused before
anything is sent."""

import dataclasses

import numpy as np
import pytest

from robo_rl.deploy.ee_kinematics import EndEffectorKinematics, KinematicRobot, make_ee_kinematics, read_ee_chain
from robo_rl.deploy.hardware import load_hardware
from robo_rl.deploy.policy import OnnxPolicy, PolicyStep, robot_contract
from robo_rl.deploy.robot import RobotState
from robo_rl.deploy.runtime import check_reported_joints
from robo_rl.deploy.session import open_session
from robo_rl.sim.mjmodel import mujoco  # a headless MUJOCO_GL before mujoco loads: other tests render
from robo_rl.terms import ACTION_TERMS
from robo_rl.terms.ee_delta import ee_delta_spec
from tests.conftest import REPO

PANDA = load_hardware(REPO / "hardware" / "panda.yaml")
FR3 = load_hardware(REPO / "hardware" / "fr3.yaml")
MODEL = REPO / "envs" / "panda.xml"
REACH = REPO / "policies" / "panda_reach.onnx"


# ---------------------------------------------------------------------------------------------- profiles
def test_profiles_name_the_joints_as_franka_ros2_publishes_them():
    assert PANDA.joint_names == tuple(f"panda_joint{i}" for i in range(1, 8))
    assert FR3.joint_names == tuple(f"fr3_joint{i}" for i in range(1, 8))
    for hw in (PANDA, FR3):
        assert hw.model_names == tuple(f"joint{i}" for i in range(1, 8))
        assert hw.controller.gains == "robot" and hw.controller.setpoint_rate_hz == 1000
        assert hw.transport["dds"]["command_interface"] == "joint_trajectory"
        np.testing.assert_array_equal(hw.kp, [3000, 3000, 3000, 2500, 2500, 2000, 2000])  # libfranka's K_theta
    np.testing.assert_array_equal(PANDA.controller.jerk_limits, [7500, 3750, 5000, 6250, 7500, 10000, 10000])
    np.testing.assert_array_equal(FR3.controller.acceleration_limits, [10] * 7)
    assert PANDA.index_of(["joint4", "panda_joint2"]).tolist() == [3, 1]  # the model's names or the robot's


@pytest.mark.parametrize("edit, error", [
    ("model_joint_names: [joint1, joint2]", r"model_joint_names must be a list of 7 names"),
    ("model_joint_names: [joint1, joint1, joint3, joint4, joint5, joint6, joint7]",
     r"model_joint_names lists joint1 more than once"),
    ("model_joint_names: [panda_joint2, joint2, joint3, joint4, joint5, joint6, joint7]",
     r"model_joint_names panda_joint2 name other joints of joint_names: a name must mean one joint"),
])
def test_a_malformed_name_map_is_refused(tmp_path, edit, error):
    text = (REPO / "hardware" / "panda.yaml").read_text()
    start = text.index("model_joint_names:")
    bad = tmp_path / "panda.yaml"
    bad.write_text(text[:start] + edit + text[text.index("\n", start):])
    with pytest.raises(ValueError, match=error):
        load_hardware(bad)


def test_the_contract_is_renamed_once_chain_and_terms_included():
    contract = OnnxPolicy(REACH).contract
    renamed = robot_contract(contract, PANDA)
    assert renamed.joint_names == PANDA.joint_names
    assert renamed.action.terms[0].joints == PANDA.joint_names
    assert robot_contract(contract, load_hardware(REPO / "hardware" / "go2.yaml")) is contract  # no map: unchanged
    # An ee_delta term carries a kinematic chain naming its joints: renamed with them, still a valid term.
    model = mujoco.MjModel.from_xml_path(str(MODEL))
    ee = ACTION_TERMS.get("ee_delta")
    spec = ee_delta_spec(model, "ee", scale=0.01, damping=0.05, max_joint_step=0.1, orientation=[0, 1, 0, 0])
    with_chain = dataclasses.replace(contract, action=dataclasses.replace(contract.action, terms=(spec,)))
    term = robot_contract(with_chain, PANDA).action.terms[0]
    assert [link["joint"] for link in term.params["chain"]["links"] if link["joint"]] == list(PANDA.joint_names)
    ee.check(term, "renamed")


def test_the_deploy_core_runs_a_policy_named_after_the_model_on_the_robots_names():
    step = PolicyStep(OnnxPolicy(REACH), PANDA)
    assert step.policy.contract.joint_names == PANDA.joint_names
    np.testing.assert_array_equal(step.kp, PANDA.kp)  # controller.gains: robot: the robot's own, not the 4500 trained


# ---------------------------------------------------------------------------------------------- forward kinematics
def test_forward_kinematics_equals_the_twins_end_effector():
    """The chain read from the MJCF, on the robot's joint names in any order, gives the model's ee_pos sensor."""
    fk = EndEffectorKinematics(read_ee_chain(MODEL), PANDA)
    model = mujoco.MjModel.from_xml_path(str(MODEL))
    data = mujoco.MjData(model)
    sensor = slice(model.sensor_adr[0], model.sensor_adr[0] + 3)
    assert mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_SENSOR, 0) == "ee_pos"
    rng = np.random.default_rng(0)
    order = rng.permutation(7)
    names = tuple(PANDA.joint_names[i] for i in order)
    for _ in range(50):
        q = rng.uniform(PANDA.joint_lower, PANDA.joint_upper)
        data.qpos[:7] = q
        mujoco.mj_forward(model, data)
        np.testing.assert_allclose(fk.position(names, q[order]), data.sensordata[sensor], atol=1e-12)


class Reporting:
    """A robot reporting fixed joints (and maybe an end-effector position)."""

    def __init__(self, names, q, ee=None):
        self.state = RobotState(stamp=0.0, received=0.0, joint_names=names, q=np.asarray(q, float),
                                dq=np.zeros(len(q)), ee_pos=ee)

    def read_state(self):
        return self.state


def test_kinematic_robot_fills_only_a_missing_end_effector():
    fk = EndEffectorKinematics(read_ee_chain(MODEL), PANDA)
    q = np.array([0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785])
    filled = KinematicRobot(Reporting(PANDA.joint_names, q), fk).read_state()
    np.testing.assert_allclose(filled.ee_pos, fk.position(PANDA.joint_names, q))
    reported = KinematicRobot(Reporting(PANDA.joint_names, q, ee=np.ones(3)), fk).read_state()
    np.testing.assert_array_equal(reported.ee_pos, np.ones(3))  # the robot's own wins
    unmapped = KinematicRobot(Reporting(("a", "b"), [0.0, 0.0]), fk).read_state()
    assert unmapped.ee_pos is None  # passed through: the safety filter damps such a state
    assert make_ee_kinematics(PANDA, observes_ee=False) is None
    assert make_ee_kinematics(load_hardware(REPO / "hardware" / "go2.yaml"), observes_ee=True) is None


def test_reach_runs_on_the_twin_without_its_end_effector_reading():
    """In-process, fast-forward: the twin's ee_pos is removed from every state the deploy core reads, the forward
    kinematics fills it in; the reach policy gets as close as with the twin's own reading (not step for step: the
    twin's sensor lags its joints by one physics step, MuJoCo computing sensors before it integrates)."""
    from tests.deploy.test_deploy_closed_loop import ramp_to_policy, run_ticks

    rng = np.random.default_rng(0)
    targets = rng.uniform([0.35, -0.25, 0.15], [0.65, 0.25, 0.55], size=(12, 3))
    distances = {}
    for hide in (False, True):
        session = open_session(REACH, REPO / "hardware" / "panda.yaml", realtime=False,
                               wrap_robot=Hiding if hide else None)
        twin = session.robot.robot if hide else session.robot
        ramp_to_policy(session)
        distances[hide] = []
        for target in targets:
            session.policy.commands["target_pos"] = target
            run_ticks(session, 150)  # 3 s, a training episode
            distances[hide].append(np.linalg.norm(twin.read_state().ee_pos - target))
    trained = OnnxPolicy(REACH).contract.extra["train_eval"]["ee_distance_final"]
    print(f"reach on the twin, 12 targets: ee from forward kinematics {np.mean(distances[True]):.4f} m, from the "
          f"twin's sensor {np.mean(distances[False]):.4f} m (trained {trained:.4f} m)")
    assert np.mean(distances[True]) < 0.03 and np.mean(distances[True]) < trained + 0.01


def test_a_policy_trained_through_the_stream_reaches_it_unstepped_and_unbudgeted():
    """panda_reach was trained through the Panda's setpoint stream: on the twin the safety filter neither rate-limits
    nor torque-limits its targets (the stream and the robot bound them, as in training); the same policy without that
    in its contract would be held to both, as a policy trained on targets that step in at the tick is."""
    from tests.deploy.test_deploy_closed_loop import ramp_to_policy, run_ticks

    session = open_session(REACH, REPO / "hardware" / "panda.yaml", realtime=False)
    assert session.policy.trained_through_stream and session.controller.safety._streamed
    ramp_to_policy(session)
    session.controller.intervention_counts.clear()
    session.policy.commands["target_pos"] = np.array([0.6, 0.2, 0.3])
    run_ticks(session, 50)
    counts = session.controller.intervention_counts
    assert not {"rate_limit", "torque_limit"} & set(counts), counts
    policy = OnnxPolicy(REACH)
    extra = {k: v for k, v in policy.contract.extra.items() if k != "setpoint_rate_hz"}
    policy.contract = dataclasses.replace(policy.contract, extra=extra)
    assert not PolicyStep(policy, PANDA).trained_through_stream


class Hiding:
    """Removes the end-effector position from every state (as franka_ros2 reports none)."""

    def __init__(self, robot):
        self.robot = robot

    def read_state(self):
        return dataclasses.replace(self.robot.read_state(), ee_pos=None)

    def send_command(self, command):
        self.robot.send_command(command)

    def close(self):
        self.robot.close()

    @property
    def time(self):
        return self.robot.time


# ---------------------------------------------------------------------------------------------- bad input
def test_joints_the_robot_does_not_report_are_refused_in_one_line():
    state = RobotState(stamp=0.0, received=0.0, joint_names=FR3.joint_names, q=np.zeros(7), dq=np.zeros(7))
    with pytest.raises(ValueError) as err:
        check_reported_joints(state, PANDA)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("the robot reports joints fr3_joint1, fr3_joint2, ")
    assert "none of hardware 'panda'" in message
    partly = dataclasses.replace(state, joint_names=PANDA.joint_names[:6] + ("fr3_joint7",))
    with pytest.raises(ValueError, match=r"not panda_joint7 of hardware 'panda'"):
        check_reported_joints(partly, PANDA)
    check_reported_joints(dataclasses.replace(state, joint_names=PANDA.joint_names + ("panda_finger_joint1",),
                                               q=np.zeros(8), dq=np.zeros(8)), PANDA)  # extra joints are fine


def test_the_twin_plays_the_arms_setpoints_while_the_gripper_gets_its_own_commands():
    """A command for the finger alone (franka_gripper's, in the twin) leaves the arm's setpoints playing."""
    from robo_rl.deploy.robot import JointCommand, Setpoints
    from robo_rl.deploy.transports.sim import SimRobot

    hw = load_hardware(REPO / "hardware" / "panda_gripper.yaml")
    twin = SimRobot(REPO / "envs" / "panda_pick.xml", hw, control_dt=0.005)  # each command advances 5 ms
    arm, n = hw.joint_names[:7], 7
    q0 = twin.read_state().q[:7]
    path = q0 + np.linspace(0.0, 0.02, 20)[:, None]  # (20, 7): 1 ms apart
    setpoints = Setpoints(period=1e-3, q=path, dq=np.full((20, n), 1.0), ddq=np.zeros((20, n)))
    zeros = np.zeros(n)
    twin.send_command(JointCommand(arm, q0, zeros, hw.kp[:7], hw.kd[:7], zeros, setpoints=setpoints))  # 0 .. 5 ms
    one = np.ones(1)
    twin.send_command(JointCommand((hw.joint_names[7],), 0.02 * one, 0 * one, 2000 * one, 40 * one, 0 * one))
    lead = twin.servo_kd[:7] / twin.servo_kp[:7] * 1.0  # the velocity target inside the servo
    played = np.abs(twin.data.ctrl[twin.aid[:7]] - (path + lead)).max(axis=1)  # (20,)
    assert played.min() < 1e-12 and played.argmin() >= 5  # the arm's path went on past 5 ms, the finger's arrival
    assert twin.data.ctrl[twin.aid[7]] == 0.02
