"""The Franka Hand through franka_gripper: the policy's gripper action becomes Move / Grasp goals (franka_msgs, bytes
checked against ROS 2's serialization with rosbags), travels over DDS to `robo-rl twin`'s franka_gripper, and the
finger's state comes back on the gripper's own joint_states."""

import threading
import time

import numpy as np
import pytest

pytest.importorskip("cyclonedds", reason="needs cyclonedds (the dds extra)")
rosbags_typesys = pytest.importorskip("rosbags.typesys", reason="needs rosbags (the dev extra)")

import cyclonedds.pub  # noqa: E402

from robo_rl.deploy import ros_interface as names  # noqa: E402
from robo_rl.deploy.dds_settings import DdsSettings  # noqa: E402
from robo_rl.deploy.gripper import GripperCommander, GripperGoal, GripperTypes, goal_message, read_goal  # noqa: E402
from robo_rl.deploy.hardware import load_hardware  # noqa: E402
from robo_rl.deploy.robot import JointCommand  # noqa: E402
from robo_rl.deploy.smoothing import command_path  # noqa: E402
from robo_rl.deploy.transports.dds import dds_types as dt  # noqa: E402
from robo_rl.deploy.transports.dds.dds_robot import DdsRobot  # noqa: E402
from robo_rl.deploy.transports.dds.endpoint import DdsEndpoint  # noqa: E402
from robo_rl.deploy.transports.dds.twin_server import DdsTwinServer  # noqa: E402
from robo_rl.deploy.transports.sim import SimRobot  # noqa: E402
from robo_rl.terms.gripper import build_numpy, gripper_spec  # noqa: E402
from tests.conftest import REPO  # noqa: E402
from tests.dds_support import wait_until  # noqa: E402

HW = load_hardware(REPO / "hardware" / "panda_gripper.yaml")
STORES = [rosbags_typesys.Stores.ROS2_HUMBLE, rosbags_typesys.Stores.ROS2_JAZZY]
# franka_ros2's franka_msgs (msg/GraspEpsilon.msg; the goal parts of action/Move.action and action/Grasp.action, which
# ROS 2 generates as the messages Move_Goal and Grasp_Goal): rosbags knows standard messages only.
FRANKA_MSGS = {
    names.FRANKA_GRASP_EPSILON: "float64 inner # [m]\nfloat64 outer # [m]\n",
    names.FRANKA_MOVE_GOAL: "float64 width  # [m]\nfloat64 speed  # [m/s]\n",
    names.FRANKA_GRASP_GOAL: "float64 width # [m]\nfranka_msgs/GraspEpsilon epsilon\nfloat64 speed # [m/s]\n"
                             "float64 force # [N]\n",
}


def franka_typestore(store):
    ts = rosbags_typesys.get_typestore(store)
    for name, text in FRANKA_MSGS.items():
        ts.register(rosbags_typesys.get_types_from_msg(text, name))
    return ts


def rosbags_gripper_types(ts) -> GripperTypes:
    return GripperTypes(Move_Goal=ts.types[names.FRANKA_MOVE_GOAL], Grasp_Goal=ts.types[names.FRANKA_GRASP_GOAL],
                        GraspEpsilon=ts.types[names.FRANKA_GRASP_EPSILON])


GOALS = [GripperGoal("move", 0.08, 0.1),
         GripperGoal("grasp", 0.0, 0.05, force=20.0, epsilon_inner=0.005, epsilon_outer=0.08)]


@pytest.mark.parametrize("store", STORES, ids=lambda s: s.name)
def test_goal_bytes_equal_ros2_cdr(store, monkeypatch, dds_domain):
    """Move_Goal and Grasp_Goal, written through the transport's own writers, byte for byte ROS 2's CDR; and ROS 2's
    bytes read back through our structs to the same goal."""
    captured: list[bytes] = []
    monkeypatch.setattr(cyclonedds.pub, "ddspy_write", lambda ref, data: captured.append(bytes(data)) or 0)
    ts = franka_typestore(store)
    ours, theirs = dt.gripper_message_types(), rosbags_gripper_types(ts)
    endpoint = DdsEndpoint(dds_domain)
    try:
        for goal in GOALS:
            ros_type = names.FRANKA_MOVE_GOAL if goal.kind == "move" else names.FRANKA_GRASP_GOAL
            struct = dt.FRANKA_STRUCTS[ros_type]
            assert struct.__idl_typename__.replace(".", "::") == names.dds_type_name(ros_type)
            endpoint.writer(f"rt/gripper_wire_test/{goal.kind}", struct, names.COMMAND_QOS).write(
                goal_message(ours, goal))
            expected = bytes(ts.serialize_cdr(goal_message(theirs, goal), ros_type))
            assert captured[-1][: len(expected)] == expected, goal
            assert captured[-1][len(expected):] == b"\x00" * (len(captured[-1]) - len(expected))
            back = struct.deserialize(expected)
            assert read_goal(back) == goal and read_goal(goal_message(theirs, goal)) == goal
    finally:
        endpoint.close()
    assert names.dds_type_name(names.FRANKA_GRASP_GOAL) == "franka_msgs::action::dds_::Grasp_Goal_"
    settings = DdsSettings.from_hardware(HW)
    assert settings.gripper_topic("grasp") == "rt/panda_gripper/grasp_goal"
    assert settings.gripper_topic("state") == "rt/panda_gripper/joint_states"


def gripper_targets(actions: list[float]) -> list[float]:
    """The finger targets the policy's gripper term gives for raw actions, from open (the pick-place task's term)."""
    term = build_numpy(gripper_spec("finger_joint1", open_pos=0.04, closed_pos=0.0, max_step=0.0016), np.zeros(1))
    prev, out = np.array([0.04]), []
    for a in actions:
        prev = term(np.array([a]), prev, prev)
        out.append(float(prev[0]))
    return out


def test_one_goal_per_turn_of_the_gripper_action():
    commander = GripperCommander.for_hardware(HW)
    actions = [-1.0] * 5 + [1.0] * 40 + [0.5] * 5 + [-1.0] * 40 + [-1.0] * 5
    goals = [(i, g) for i, t in enumerate(gripper_targets(actions)) if (g := commander.update(t)) is not None]
    (close_at, grasp), (open_at, move) = goals  # exactly two goals: close once, open once
    assert close_at == 5 and grasp == GripperGoal("grasp", 0.0, 0.1, 20.0, 0.005, 0.08)
    assert open_at == 50 and move == GripperGoal("move", 0.08, 0.1)
    assert commander.update(float("nan")) is None


def test_gripper_commands_round_trip_over_dds(dds_domain):
    """Policy gripper action -> finger target -> DdsRobot (behind the deploy core's smoothing): a Grasp goal on
    panda_gripper/grasp_goal, while the arm's 1 kHz setpoints leave the finger out -> the twin's franka_gripper closes
    the finger -> its state comes back on panda_gripper/joint_states, merged into the robot's state; then a Move opens
    it again. The arm follows its own setpoints meanwhile."""
    settings = DdsSettings.from_hardware(HW)
    twin = SimRobot(REPO / "envs" / "panda_pick.xml", HW, control_dt=0.02, realtime=True)
    served, used = DdsEndpoint(dds_domain), DdsEndpoint(dds_domain)
    stop = threading.Event()
    server = DdsTwinServer(twin, HW, settings, served, rate_hz=200)
    thread = threading.Thread(target=server.serve, args=(stop,))
    thread.start()
    client = None
    try:
        client = DdsRobot(HW, settings, control_dt=0.02, endpoint=used)
        state = client.wait_for_state(10.0, fresh_within_s=0.2)
        robot = command_path(client, HW, 0.02)  # as PolicyRuntime.attach wires it: jerk-limited setpoints
        robot.read_state()
        assert state.joint_names == HW.joint_names  # the arm's joints, then the finger from the gripper's topic
        finger = HW.joint_names.index("panda_finger_joint1")
        hold = state.q.copy()
        hold[0] += 0.1  # the arm moves too
        n = len(HW.joint_names)

        def run(actions: list[float]) -> None:
            for target in gripper_targets(actions):
                q = hold.copy()
                q[finger] = target
                robot.send_command(JointCommand(HW.joint_names, q, np.zeros(n), HW.kp.copy(), HW.kd.copy(),
                                                np.zeros(n)))
                time.sleep(0.02)

        width = 2 * state.q[finger]
        assert width > 0.07  # the twin starts open
        run([1.0] * 30)  # close
        wait_until(lambda: client.read_state().q[finger] < 0.005, 5.0, "the finger to close")
        run([-1.0] * 30)  # open
        wait_until(lambda: client.read_state().q[finger] > 0.035, 5.0, "the finger to open")
        assert abs(client.read_state().q[0] - hold[0]) < 0.01  # the arm's setpoints played beside the finger's goals
        assert [g.kind for g in client.gripper_goals] == ["grasp", "move"]
        assert [g.kind for g in server.gripper.goals] == ["grasp", "move"]  # what the twin's franka_gripper heard
        assert server.rejected == 0 and server.commands >= 60  # the arm's trajectories, finger left out
    finally:
        stop.set()
        thread.join()
        twin.close()
        if client is not None:
            client.close()
        for ep in (served, used):
            ep.close()
