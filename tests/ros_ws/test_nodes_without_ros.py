"""The package's nodes run here against a recorded stand-in for rclpy (tests/ros_ws/fake_ros.py): parameters and their
descriptors, lifecycle publishers made in configure and destroyed in cleanup, topics from the hardware file, the
Go2's unitree profile, the recorder's callback groups, and SIGINT -> last damping command -> rclpy.shutdown.

What the stand-in cannot show (rclpy's executors, QoS matching, the rmw) is left to the launch_testing tests in
ros_ws/src/robo_rl_ros/test, which run where ROS 2 does.
"""

import os
import signal
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

from robo_rl.deploy import ros_interface as names
from robo_rl.deploy import ros_messages as rm
from robo_rl.deploy.hardware import load_hardware
from robo_rl.deploy.robot import JointCommand
from robo_rl.deploy.runtime import default_pose, load_for_deploy
from tests.conftest import REPO
from tests.ros_ws import fake_ros

PANDA = str(REPO / "hardware" / "panda.yaml")
PANDA_POLICY = str(REPO / "policies" / "panda_reach.onnx")


@pytest.fixture
def ros(monkeypatch):
    world = fake_ros.install(monkeypatch)
    yield world
    fake_ros.uninstall()


def policy_node(ros, **overrides):
    ros.overrides = {"policy_path": PANDA_POLICY, "hardware_config": PANDA, "realtime_priority": 0, **overrides}
    fake_ros._init()
    from robo_rl_ros.policy_node import PolicyNode

    return PolicyNode()


def param(name, value):
    return SimpleNamespace(name=name, value=value)


def live(node) -> dict[str, int]:
    return {"publishers": len(node.publishers), "lifecycle": sum(p.lifecycle for p in node.publishers),
            "subscriptions": len(node.subscriptions), "services": len(node.services), "timers": len(node.timers)}


def test_parameters_have_descriptors_and_refuse_changes_that_would_do_nothing(ros):
    from robo_rl_ros.policy_node import PolicyNode

    ros.overrides = {}
    fake_ros._init()
    node = PolicyNode()
    assert node.parameters["dry_run"] is True  # `ros2 run` alone sends nothing
    for name in names.PARAMETERS:
        d = node.descriptors[name]
        assert d.description == names.PARAMETER_DESCRIPTIONS[name]
        assert d.read_only == (name in names.READ_ONLY_PARAMETERS)
    assert node.set_parameters([param("hardware_config", "hardware/go2.yaml")])[0].successful is False
    node = policy_node(ros)
    assert node.set_parameters([param("dry_run", False)])[0].successful  # unconfigured: read at the next configure
    assert node.on_configure(None).name == "SUCCESS"
    assert node.runtime.config.dry_run is False
    result = node.set_parameters([param("dry_run", True)])[0]
    assert not result.successful and result.reason.startswith("dry_run: read at configure, so setting it while "
                                                              "inactive would have no effect")
    assert node.parameters["dry_run"] is False and ("warning", f"parameter change refused: {result.reason}") in \
        node.logger.lines
    node.on_cleanup(None)
    assert node.set_parameters([param("dry_run", True)])[0].successful


def test_lifecycle_publishers_are_made_in_configure_and_destroyed_in_cleanup(ros):
    node = policy_node(ros, command_interface="pd_targets")
    before = live(node)
    assert node.on_configure(None).name == "SUCCESS"
    configured = live(node)
    assert configured["lifecycle"] == 5  # diagnostics, observation, action, policy step, episode events
    assert {p.topic for p in node.publishers if p.lifecycle} == {
        names.DIAGNOSTICS.name, names.OBSERVATION.name, names.ACTION.name, names.POLICY_STEP.name,
        names.EPISODE_EVENTS.name}
    command = [p for p in node.publishers if not p.lifecycle]
    assert [p.topic for p in command] == [names.COMMAND_TOPICS["pd_targets"].name]  # the last damping command's
    node.on_cleanup(None)
    assert live(node) == before
    assert node.on_configure(None).name == "SUCCESS"
    assert live(node) == configured  # cleanup -> configure duplicates nothing
    node.on_cleanup(None)


def test_topics_and_namespace_come_from_the_hardware_file(ros, tmp_path):
    hardware = tmp_path / "panda.yaml"
    text = (REPO / "hardware" / "panda.yaml").read_text()
    dds = "dds: {profile: ros2, command_interface: joint_trajectory, state_topic: franka/joint_states}"
    assert dds in text
    hardware.write_text(text.replace(dds, "dds: {profile: ros2, command_interface: joint_trajectory, namespace: /arm, "
                                          "state_topic: /franka/joint_states}"))
    node = policy_node(ros, hardware_config=str(hardware))
    assert node.on_configure(None).name == "SUCCESS"
    topics = {s.topic for s in node.subscriptions}
    assert "/franka/joint_states" in topics  # the robot's topics: absolute, from the file
    assert not any("ee_position" in t for t in topics)  # franka_ros2 sends none: computed from the joints
    assert {"estop", "cmd_vel", "target_pose", "robo_rl/operator"} <= topics  # the operator's: the node's namespace
    commands = [p.topic for p in node.publishers if not p.lifecycle]
    assert commands == ["/arm/joint_trajectory_controller/joint_trajectory"]
    node.on_cleanup(None)


def test_a_configure_failure_is_one_line_and_makes_nothing(ros, tmp_path):
    node = policy_node(ros, policy_path=str(tmp_path / "missing.onnx"))
    before = live(node)
    assert node.on_configure(None).name == "FAILURE"
    level, line = node.logger.lines[-1]
    assert level == "error" and line.startswith("configure failed: ") and "\n" not in line
    assert live(node) == before and node.runtime is None


def test_franka_hand_goes_through_franka_gripper_actions(ros):
    """panda_gripper.yaml on the ROS 2 path: the hand's own joint_states join the arm's; the finger's target becomes
    Move / Grasp goals on franka_gripper's actions, one per change of course; the arm's controller gets the seven arm
    joints only; with no action server the goal is counted and said once and the arm goes on; close destroys all."""
    fake_ros._init()
    from rclpy.node import Node
    from robo_rl_ros.messages import message_types
    from robo_rl_ros.ros_robot import RosRobot

    from robo_rl.deploy.dds_settings import for_ros_node
    from robo_rl.deploy.robot import JointCommand

    hw = load_hardware(REPO / "hardware" / "panda_gripper.yaml")
    node = Node(names.POLICY_NODE)
    robot = RosRobot(node, hw, for_ros_node(hw, None), control_dt=0.02, needs_ee=False)
    move, grasp = ("panda_gripper/move", "panda_gripper/grasp")
    assert [c.action_name for c in node.action_clients] == [move, grasp]
    arm = tuple(j for j in hw.joint_names if j != hw.gripper.joint)
    types, now = message_types(), time.time()
    ros.deliver(robot.state_topic, rm.joint_state_message(types, arm, np.zeros(7), np.zeros(7), None, now))
    with pytest.raises(RuntimeError):
        robot.read_state()  # the finger is not reported yet: no state
    assert ros.deliver("panda_gripper/joint_states", rm.joint_state_message(
        types, ("panda_finger_joint1", "panda_finger_joint2"), np.full(2, 0.03), np.zeros(2), None, now)) == 1
    state = robot.read_state()
    assert state.q[state.joint_names.index(hw.gripper.joint)] == pytest.approx(0.03)

    n = len(hw.joint_names)

    def command(finger: float) -> JointCommand:
        q = np.append(np.zeros(7), finger)
        return JointCommand(hw.joint_names, q, np.zeros(n), hw.kp.copy(), hw.kd.copy(), np.zeros(n))

    for finger in (0.03, 0.025, 0.02, 0.015, 0.02, 0.03):  # closes, keeps closing, then opens
        robot.send_command(command(finger))
    clients = {c.action_name: c for c in node.action_clients}
    assert len(clients[grasp].goals) == 1 and len(clients[move].goals) == 1  # one goal per change of course
    g = clients[grasp].goals[0]
    assert (g.width, g.force, g.epsilon.inner) == (0.0, hw.gripper.force, hw.gripper.epsilon_inner)
    assert clients[move].goals[0].width == pytest.approx(0.08)  # open: twice the finger's upper limit
    published = ros.publishers(robot.command_topic)[0].published
    assert len(published) == 6 and all(tuple(m.joint_names) == arm for m in published)  # the arm's 7 joints only

    ros.action_servers_ready = False  # franka_gripper is not running
    for finger in (0.02, 0.01):
        robot.send_command(command(finger))
    assert robot.gripper.unsent == 1 and len(clients[grasp].goals) == 1 and len(published) == 8
    assert [line for level, line in node.logger.lines if level == "error"] == [
        "franka_gripper's panda_gripper/grasp action server is not available: grasp goal not sent"]
    robot.close()
    assert node.action_clients == [] and node.subscriptions == [] and node.publishers == []


def test_go2_unitree_profile_reads_lowstate_and_sends_lowcmd_with_crc(ros):
    pytest.importorskip("cyclonedds", reason="the unitree profile needs cyclonedds (the dds extra)")
    from robo_rl.deploy.transports.dds import dds_types as dt
    from robo_rl.deploy.transports.dds import unitree
    from robo_rl.deploy.transports.dds import unitree_ros as ur

    go2 = load_hardware(REPO / "hardware" / "go2.yaml")
    node = policy_node(ros, policy_path=str(REPO / "policies" / "go2_walk.onnx"),
                       hardware_config=str(REPO / "hardware" / "go2.yaml"), command_interface="")
    assert node.on_configure(None).name == "SUCCESS"
    (state_sub,) = [s for s in node.subscriptions if s.topic == "/lowstate"]
    (lowcmd,) = [p for p in node.publishers if not p.lifecycle]
    assert type(state_sub.msg_type).__name__ == "type" and state_sub.msg_type.__name__ == "LowState"
    assert lowcmd.topic == "/lowcmd" and lowcmd.msg_type.__name__ == "LowCmd"
    classes = {n: getattr(__import__("unitree_go.msg").msg, n) for n in ur.MESSAGE_NAMES}
    low = dt.LowState_(head=[0xFE, 0xEF], level_flag=0xFF)
    low.crc = unitree.unitree_crc(low)
    assert ros.deliver("/lowstate", ur.low_state_to_ros(low, classes)) == 1
    assert node.robot.read_state().joint_names == go2.joint_names
    n = len(go2.joint_names)
    cmd = JointCommand(go2.joint_names, np.full(n, 0.1), np.zeros(n), go2.kp, go2.kd, np.zeros(n))
    node.robot.send_command(cmd)
    sent = ur.low_cmd_from_ros(lowcmd.published[-1])
    np.testing.assert_allclose(unitree.read_low_cmd(sent, go2).q, 0.1, atol=1e-6)  # CRC verified
    node.on_cleanup(None)


def test_go2_activate_refuses_without_heartbeat_before_releasing_the_sport_mode(ros):
    pytest.importorskip("cyclonedds", reason="the unitree profile needs cyclonedds (the dds extra)")
    from dataclasses import replace

    from robo_rl.deploy.transports.dds import dds_types as dt
    from robo_rl.deploy.transports.dds import unitree
    from robo_rl.deploy.transports.dds import unitree_ros as ur

    node = policy_node(ros, policy_path=str(REPO / "policies" / "go2_walk.onnx"),
                       hardware_config=str(REPO / "hardware" / "go2.yaml"), command_interface="", dry_run=False)
    assert node.on_configure(None).name == "SUCCESS"
    node.runtime.config = replace(node.runtime.config, state_wait_s=0.3)
    released = []
    node.robot.take_control = lambda: released.append(True)
    low = dt.LowState_(head=[0xFE, 0xEF], level_flag=0xFF)
    low.imu_state.quaternion = [1.0, 0.0, 0.0, 0.0]
    low.crc = unitree.unitree_crc(low)
    classes = {n: getattr(__import__("unitree_go.msg").msg, n) for n in ur.MESSAGE_NAMES}
    ros.deliver("/lowstate", ur.low_state_to_ros(low, classes))  # the robot answers, fresh
    assert node.on_activate(None).name == "FAILURE" and released == []  # nothing handed over without an e-stop
    level, line = node.logger.lines[-1]
    assert level == "error" and line.startswith("activate failed: no e-stop heartbeat: nothing received on estop")
    assert [p for p in node.publishers if not p.lifecycle][0].published == []  # nothing sent
    node.on_cleanup(None)


class FakeArm:
    """Publishes the Panda's default pose on joint_states (and ee_position) and an e-stop heartbeat, as the robot,
    its drivers and the operator's station would."""

    def __init__(self, ros):
        hw, policy = load_for_deploy(PANDA_POLICY, PANDA)
        self.ros, self.hw, self.q = ros, hw, default_pose(policy, hw)
        self.state_topic = hw.transport["dds"].get("state_topic", "joint_states")  # franka_ros2: franka/joint_states
        self.types = rm.MessageTypes(**{k: getattr(__import__("robo_rl_ros.messages").messages.message_types(), k)
                                        for k in rm.MessageTypes.__dataclass_fields__})
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        Bool = fake_ros.modules()["std_msgs.msg"].Bool
        while not self.stop.is_set():
            now = time.time()
            self.ros.deliver(self.state_topic, rm.joint_state_message(self.types, self.hw.joint_names, self.q,
                                                                    np.zeros(len(self.q)), None, now))
            self.ros.deliver("ee_position", rm.point_stamped_message(self.types, np.array([0.4, 0.0, 0.4]), now))
            self.ros.deliver("estop", Bool(data=False))
            time.sleep(0.01)


@pytest.mark.realtime
def test_sigint_sends_the_last_damping_command_then_shuts_rclpy_down(ros):
    from robo_rl_ros import policy_node as module
    from robo_rl_ros.messages import run_node

    ros.overrides = {"policy_path": PANDA_POLICY, "hardware_config": PANDA, "realtime_priority": 0,
                     "command_interface": "pd_targets", "dry_run": False}
    topic = names.COMMAND_TOPICS["pd_targets"].name
    arm: FakeArm | None = None
    state: dict = {"phase": "start"}

    def spin(executor):  # the operator's ros2 lifecycle set ... configure / activate, then Ctrl-C
        nonlocal arm
        (node,) = executor.nodes
        if state["phase"] == "start":
            arm = FakeArm(ros)
            arm.thread.start()
            assert node.on_configure(None).name == "SUCCESS"
            assert node.on_activate(None).name == "SUCCESS"
            state["phase"], state["publisher"] = "active", ros.publishers(topic)[0]
        elif state["phase"] == "active" and len(state["publisher"].published) >= 10:
            state["phase"] = "signalled"
            os.kill(os.getpid(), signal.SIGINT)

    ros.spin_hook = spin
    before = signal.getsignal(signal.SIGINT)
    try:
        code = run_node(names.POLICY_NODE, module.PolicyNode, lambda node: node.stop_control(), poll_s=0.01)
    finally:
        if arm is not None:
            arm.stop.set()
    assert code == 0 and state["phase"] == "signalled"
    assert ros.init_kwargs["signal_handler_options"].name == "NO"  # rclpy installs no handler of its own
    last = max(i for i, line in enumerate(ros.log) if line == f"publish {topic}")
    assert ros.log[last + 1:] == ["executor shutdown", f"destroy_node {names.POLICY_NODE}", "shutdown"]
    (node,) = [n for n in ros.nodes if n.node_name == names.POLICY_NODE]
    assert node.runtime is not None and not node.runtime.active  # the control thread stopped
    sent = [rm.read_multi_array(m)[1] for m in state["publisher"].published]  # (5, J) each: q, dq, kp, kd, tau
    assert sent[0][2].any() and not sent[-1][2].any()  # stiff first, the last one damping (kp row = 0)
    assert signal.getsignal(signal.SIGINT) is before  # ours removed again


def test_recorder_with_the_policy_records_its_policy_steps(ros, tmp_path):
    """policy_path set (record_demos.launch.py with use_policy): the recorder subscribes to the policy node's
    ~/policy_step and writes deploy --record's features."""
    from robo_rl_ros import demo_recorder_node as module

    ros.overrides = {"dataset_path": str(tmp_path / "demos"), "hardware_config": PANDA, "policy_path": PANDA_POLICY}
    fake_ros._init()
    node = module.DemoRecorderNode()
    (step,) = [s for s in node.subscriptions if s.topic == f"{names.POLICY_NODE}/policy_step" and not s.raw]
    assert node.recorder.policy == (27, 7) and step.callback_group is node.groups["inputs"]
    assert {"observation.policy", "action", "command.joint_position"} <= set(node.recorder.writer.features)
    assert not node.recorder.scored and "next.reward" not in node.recorder.writer.features
    node.close()


def test_recorder_with_rewards_writes_each_steps_outcome(ros, tmp_path):
    """record_rewards (record_demos.launch.py with use_policy and rewards): frames per policy step with next.reward,
    next.done, next.terminated and next.success; without the policy there is nothing to score: refused."""
    from robo_rl_ros import demo_recorder_node as module

    ros.overrides = {"dataset_path": str(tmp_path / "demos"), "hardware_config": PANDA, "policy_path": PANDA_POLICY,
                     "record_rewards": True}
    fake_ros._init()
    node = module.DemoRecorderNode()
    assert node.recorder.scored
    assert {"next.reward", "next.done", "next.terminated", "next.success"} <= set(node.recorder.writer.features)
    node.close()
    ros.overrides = {"dataset_path": str(tmp_path / "other"), "hardware_config": PANDA, "record_rewards": True}
    with pytest.raises(ValueError, match=r"record_rewards: needs policy_path"):
        module.DemoRecorderNode()


@pytest.mark.realtime
def test_the_ros2_transport_runs_a_robot_env_over_the_robots_topics(ros, monkeypatch):
    """`--transport ros2` (train-real's actor, RobotEnv, deploy, replay, teleop): RosRobot on a node of its own, spun
    on its own thread; rclpy initialised in the chosen domain without its signal handlers, shut down at close."""
    import sys

    from robo_rl.adapters.robot_env import RobotEnv
    from robo_rl.deploy.robot import TRANSPORTS
    from robo_rl.deploy.session import transport

    sys.modules.pop("robo_rl.deploy.transports.ros2", None)
    arm, env = FakeArm(ros), None
    try:
        assert not transport("ros2").rehearsal
        arm.thread.start()
        env = RobotEnv(PANDA_POLICY, PANDA, "ros2", realtime=True, reset_module="home", max_episode_steps=5,
                       session={"domain_id": 7})
        assert ros.init_kwargs["domain_id"] == 7 and ros.init_kwargs["signal_handler_options"].name == "NO"
        obs, _ = env.reset(seed=0)
        truncated = False
        while not truncated:
            obs, _, terminated, truncated, info = env.step(np.zeros(7, np.float32))
            assert not terminated, info
        topic = "joint_trajectory_controller/joint_trajectory"  # panda.yaml: franka_ros2's interface
        sent = ros.publishers(topic)[0].published
        assert sent and tuple(sent[-1].joint_names) == load_hardware(PANDA).joint_names
        env.close()
        env = None
        assert ros.log[-1] == "shutdown" and not ros.publishers(topic)  # the robot's node and rclpy went down
    finally:
        arm.stop.set()
        if env is not None:
            env.close()
        if "ros2" in TRANSPORTS:
            TRANSPORTS.unregister("ros2")  # it was registered over this test's stand-in rclpy
        sys.modules.pop("robo_rl.deploy.transports.ros2", None)  # so is the module: the next import finds no rclpy


def test_bad_input_at_start_is_one_line_and_exit_2(ros, capsys, tmp_path):
    from robo_rl_ros import sim_robot_node
    from robo_rl_ros.messages import run_node

    ros.overrides = {"hardware_config": str(REPO / "hardware" / "go2.yaml"), "command_interface": ""}
    assert run_node(names.SIM_ROBOT_NODE, sim_robot_node.SimRobotNode, lambda node: node.close()) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("robo_rl_sim_robot: hardware 'go2' uses the unitree profile: the twin node serves ros2")
    assert "\n" not in err and ros.log[-1] == "shutdown"


def test_recorder_samples_on_its_own_callback_group_and_names_cameras_by_path(ros, tmp_path):
    from robo_rl_ros import demo_recorder_node as module

    ros.overrides = {"dataset_path": str(tmp_path / "demos"), "hardware_config": PANDA,
                     "camera_topics": "/camera/color/image_raw/compressed, /camera/depth/image_rect_raw/compressed",
                     "bag_path": str(tmp_path / "bag"), "command_interface": ""}
    fake_ros._init()
    node = module.DemoRecorderNode()
    sample = [t for t in node.timers if t.period == pytest.approx(0.02)]
    assert len(sample) == 1 and sample[0].callback_group is node.groups["sample"]
    others = [s.callback_group for s in node.subscriptions] + [t.callback_group for t in node.timers
                                                               if t is not sample[0]]
    assert all(g is not node.groups["sample"] for g in others)  # decoding and bag writing run elsewhere
    images = [s for s in node.subscriptions if "camera" in s.topic and not s.raw]
    assert {s.topic for s in images} == {"/camera/color/image_raw/compressed",
                                         "/camera/depth/image_rect_raw/compressed"}
    assert all(type(s.callback_group).__name__ == "ReentrantCallbackGroup" for s in images)
    bag = [s for s in node.subscriptions if s.raw]
    assert bag and all(s.callback_group is node.groups["bag"] for s in bag)
    assert type(node.groups["bag"]).__name__ == "MutuallyExclusiveCallbackGroup"
    assert node.recorder.cameras == ["camera_color", "camera_depth"]
    assert node.recorder.policy is None and not any(s.topic.endswith("policy_step") for s in node.subscriptions)
    assert {s.topic for s in node.subscriptions if not s.raw} >= {
        "franka/joint_states", "joint_trajectory_controller/joint_trajectory", f"{names.POLICY_NODE}/episode_events"}
    node.close()
    sample[0].callback()  # a tick after close records nothing and raises nothing


def test_ros_robot_carries_the_newest_frame_of_each_camera_it_is_asked_for(ros):
    """RosRobot(cameras=...): a subscription per camera on `<camera>/image/compressed` (the hardware file's
    camera_topics override it), frames fitted to the size asked for and carried in the state's `images`; a state is
    not fresh until every camera sent a frame (one line naming the topic); bytes that are no image are counted and
    said once, never raised into the executor; close destroys the subscriptions."""
    fake_ros._init()
    from rclpy.node import Node
    from robo_rl_ros.messages import CLASSES, message_types
    from robo_rl_ros.ros_robot import RosRobot

    from robo_rl.deploy.camera_frames import compressed_image_message
    from robo_rl.deploy.dds_settings import for_ros_node

    hw = load_hardware(PANDA)
    node = Node(names.POLICY_NODE)
    robot = RosRobot(node, hw, for_ros_node(hw, None), control_dt=0.02, needs_ee=False, cameras=(("wrist", 32, 48),))
    assert robot.frames.topics == {"wrist": "wrist/image/compressed"}
    types, now = message_types(), time.time()
    n = len(hw.joint_names)
    ros.deliver(robot.state_topic, rm.joint_state_message(types, hw.joint_names, np.zeros(n), np.zeros(n), None, now))
    with pytest.raises(ValueError, match=r"^no camera frames on wrist/image/compressed within 0.05 s; "):
        robot.wait_for_state(0.05, fresh_within_s=10.0)
    rgb = np.random.default_rng(0).integers(0, 256, (64, 96, 3), dtype=np.uint8)  # 2:3 like 32 x 48: resized only
    image = CLASSES[names.COMPRESSED_IMAGE]
    assert ros.deliver("wrist/image/compressed", compressed_image_message(types, image, rgb, now)) == 1
    state = robot.wait_for_state(1.0, fresh_within_s=10.0)
    assert state.images["wrist"].shape == (32, 48, 3)
    import cv2

    np.testing.assert_array_equal(state.images["wrist"], cv2.resize(rgb, (48, 32), interpolation=cv2.INTER_AREA))
    for _ in range(2):
        ros.deliver("wrist/image/compressed", image(header=rm.make_header(types, now), format="png", data=b"no image"))
    assert robot.bad_frames == 2 and [line for level, line in node.logger.lines if level == "error"] == [
        "camera wrist: a camera frame of 8 bytes could not be decoded (not PNG or JPEG?)"]
    assert np.array_equal(robot.read_state().images["wrist"], state.images["wrist"])  # the last good frame stays
    robot.close()
    assert node.subscriptions == [] and node.publishers == []
