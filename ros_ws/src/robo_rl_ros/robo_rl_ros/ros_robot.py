"""RosRobot: the deploy core's RobotInterface over rclpy subscriptions and one command publisher (and, for a Franka
Hand, franka_gripper's actions: RosGripper)."""

from __future__ import annotations

import os
import time

from rclpy.callback_groups import ReentrantCallbackGroup

from robo_rl.deploy import ros_commands as rc
from robo_rl.deploy import ros_interface as names
from robo_rl.deploy import ros_messages as rm
from robo_rl.deploy.camera_frames import CameraFrames
from robo_rl.deploy.dds_settings import DdsSettings
from robo_rl.deploy.gripper import GripperCommander, GripperGoal, GripperTypes, goal_message
from robo_rl.deploy.hardware import HardwareSpec
from robo_rl.deploy.robot import JointCommand, RobotState
from robo_rl_ros.messages import CLASSES, franka_gripper_classes, message_types, qos, unitree_classes


class RosGripper:
    """The Franka Hand through franka_gripper's actions (hardware `gripper`): the policy's target for the finger joint
    becomes Move / Grasp goals (GripperCommander: one goal per change of course), sent without waiting for results
    (franka_gripper runs one goal at a time; a new one preempts the old); the hand's joint_states join the arm's state.

    A goal that finds no action server is not sent: it is counted (`unsent`) and said once, and the next change of
    course tries again; the arm keeps running (the policy's gripper is not the arm's safety).
    """

    def __init__(self, node, hw: HardwareSpec, settings: DdsSettings, state: rm.StateAssembler, group):
        from rclpy.action import ActionClient

        classes = franka_gripper_classes()
        self.node = node
        self.commander = GripperCommander.for_hardware(hw)
        self.types = GripperTypes(Move_Goal=classes["Move"].Goal, Grasp_Goal=classes["Grasp"].Goal,
                                  GraspEpsilon=classes["GraspEpsilon"])
        self.names = settings.gripper_ros_names()
        self.clients = {kind: ActionClient(node, classes[kind.capitalize()], self.names[kind], callback_group=group)
                        for kind in ("move", "grasp")}
        self.sub = node.create_subscription(CLASSES[names.JOINT_STATE], self.names["state"], state.on_gripper_state,
                                            qos(names.SENSOR_QOS), callback_group=group)
        self.sent: list[GripperGoal] = []
        self.unsent = 0

    def split(self, command: JointCommand) -> JointCommand:
        """Send the goal the finger's target calls for (if any); returns the arm's command (without the finger)."""
        goal, arm = self.commander.split(command)
        if goal is not None:
            client = self.clients[goal.kind]
            if client.server_is_ready():
                client.send_goal_async(goal_message(self.types, goal))
                self.sent.append(goal)
            else:
                self.unsent += 1
                if self.unsent == 1:
                    self.node.get_logger().error(f"franka_gripper's {self.names[goal.kind]} action server is not "
                                                 f"available: {goal.kind} goal not sent")
        return arm

    def destroy(self) -> None:
        for client in self.clients.values():
            client.destroy()
        self.node.destroy_subscription(self.sub)
        self.clients = {}


class RosRobot:
    """The robot's topics, named by the hardware file's `transport.dds` section (DdsSettings.ros_topics: profile,
    namespace, topic overrides; launch remappings apply on top).

    - `ros2` profile: state from joint_states (+ imu for legged robots, ee_position when the policy observes it),
      commands on the command interface's topic (joint_trajectory points with velocities, rc.CommandEncoder).
    - `unitree` profile (a Go2 through unitree_ros2): unitree_go/msg/LowState in, LowCmd out with the CRC, converted
      by robo_rl.deploy.transports.dds.unitree_ros (needs robo_rl[dds] and unitree_ros2's unitree_go package).
      `take_control` releases the onboard sport mode through the motion switcher over DDS, as the DDS path does.

    Cameras (`cameras`: those a policy or a reward classifier reads) arrive as sensor_msgs/CompressedImage on
    `<camera>/image/compressed` (or the hardware file's `transport.dds.camera_topics`), decoded in their callbacks and
    fitted to the size asked for; the state's `images` carry the newest frame of each (CameraFrames, as DdsRobot's).

    Subscriptions run in their own reentrant callback group, so they keep arriving while a lifecycle
    transition (on_activate waiting for fresh state) holds the node's default group. The command publisher is a plain
    publisher, not a lifecycle one: the last damping command must go out whatever the node's state.
    """

    def __init__(self, node, hw: HardwareSpec, settings: DdsSettings, control_dt: float, needs_ee: bool,
                 cameras: tuple[tuple[str, int, int], ...] = ()):
        self.node = node
        self.hw = hw
        self.settings = settings
        self.profile = settings.profile
        self.control_dt = control_dt
        self.state = rm.StateAssembler(hw, needs_imu=hw.kind == "legged", needs_ee=needs_ee and self.profile == "ros2")
        self.topics = settings.ros_topics()
        self.state_topic, self.command_topic = self.topics["joints"], self.topics["command"]
        self.released_mode = ""
        self.bad_frames = 0  # camera messages that could not be decoded
        self._switcher = self._endpoint = None
        self.gripper: RosGripper | None = None
        group = ReentrantCallbackGroup()
        sensor = qos(names.SENSOR_QOS)
        sub = node.create_subscription
        self.frames = CameraFrames(cameras, settings.ros_camera_topic)  # ValueError (one line) without OpenCV
        self._subs = [sub(CLASSES[names.COMPRESSED_IMAGE], topic, lambda m, c=camera: self._on_frame(c, m), sensor,
                          callback_group=group) for camera, topic in self.frames.topics.items()]
        if self.profile == "unitree":
            try:
                from robo_rl.deploy.transports.dds import unitree_ros  # cyclonedds: the unitree profile only
            except ImportError:
                raise ValueError("the unitree profile needs cyclonedds in this Python: pip install "
                                 "'robo_rl[deploy,dds]' (docs/deploy.md, ROS 2)") from None
            self._unitree = unitree_ros
            self._classes = unitree_classes()
            self._subs.append(sub(self._classes["LowState"], self.state_topic,
                                  lambda m: unitree_ros.store_ros_low_state(self.state, m, hw), sensor,
                                  callback_group=group))
            self._pub = node.create_publisher(self._classes["LowCmd"], self.command_topic, qos(names.COMMAND_QOS))
            return
        # first: without franka_msgs it refuses (one line) before anything else is made
        self.gripper = RosGripper(node, hw, settings, self.state, group) if hw.gripper is not None else None
        self.state.needs_gripper = self.gripper is not None
        self._subs.append(sub(CLASSES[names.JOINT_STATE], self.state_topic, self.state.on_joint_state, sensor,
                              callback_group=group))
        if self.state.needs_imu:
            self._subs.append(sub(CLASSES[names.IMU], self.topics["imu"], self.state.on_imu, sensor,
                                  callback_group=group))
        if self.state.needs_ee:
            self._subs.append(sub(CLASSES[names.POINT_STAMPED], self.topics["ee"], self.state.on_ee_position, sensor,
                                  callback_group=group))
        spec = names.COMMAND_TOPICS[settings.command_interface]
        self._encode = rc.CommandEncoder(message_types(), settings.command_interface, control_dt, hw.velocity_limits,
                                         hw.joint_names)
        self._pub = node.create_publisher(CLASSES[spec.ros_type], self.command_topic, qos(spec.qos))

    def _on_frame(self, camera: str, msg) -> None:
        """A camera's CompressedImage (its callback): a frame that cannot be decoded is counted and said once, never
        raised into the executor."""
        try:
            self.frames.on_message(camera, msg)
        except ValueError as exc:
            self.bad_frames += 1
            if self.bad_frames == 1:
                self.node.get_logger().error(f"camera {camera}: {exc}")

    def __str__(self) -> str:
        how = "unitree lowcmd" if self.profile == "unitree" else self.settings.command_interface
        return f"state on {self.state_topic}, commands on {self.command_topic} ({how})"

    def read_state(self) -> RobotState:
        state = self.state.latest()
        if state is None:
            raise RuntimeError(f"no state received yet on {self.state_topic}")
        return self.frames.attach(state)

    def send_command(self, command: JointCommand) -> None:
        if self.profile == "unitree":
            self._pub.publish(self._unitree.low_cmd_to_ros(command, self.hw, self._classes))
        else:
            if self.gripper is not None:
                command = self.gripper.split(command)
            self._pub.publish(self._encode(command))

    def take_control(self) -> None:
        """unitree profile: release the onboard sport-mode controller (transport.dds.sport_mode) through the motion
        switcher service over DDS on this ROS domain; ValueError (one line) when it stays active."""
        if self.profile != "unitree" or self.settings.sport_mode == "none":
            return
        from robo_rl.deploy.transports.dds.endpoint import DdsEndpoint
        from robo_rl.deploy.transports.dds.motion_switcher import MotionSwitcherClient, release_sport_mode

        self._endpoint = DdsEndpoint(int(os.environ.get("ROS_DOMAIN_ID", "0") or 0))
        self._switcher = MotionSwitcherClient(self._endpoint)
        self.released_mode = release_sport_mode(self._switcher)

    def wait_for_state(self, timeout_s: float, *, fresh_within_s: float, clock=time.monotonic) -> RobotState:
        end = clock() + timeout_s
        while True:
            state = self.state.latest()
            missing = self.frames.missing()
            if state is not None and clock() - state.received <= fresh_within_s and not missing:
                return self.frames.attach(state)
            if clock() > end:
                if state is not None and missing:
                    raise ValueError(f"no camera frames on {', '.join(missing)} within {timeout_s:g} s; does the "
                                     "camera driver publish them?")
                why = f"; last rejected message: {self.state.last_error}" if self.state.last_error else ""
                raise ValueError(f"no fresh robot state on {self.state_topic} within {timeout_s:g} s "
                                 f"(received: {dict(self.state.received_count) or 'nothing'}{why})")
            time.sleep(0.01)

    def close(self) -> None:
        """Select a released sport mode again when the hardware file asks (`sport_mode: restore`), then destroy this
        robot's subscriptions and publisher."""
        if self._switcher is not None and self.released_mode and self.settings.sport_mode == "restore":
            from robo_rl.deploy.transports.dds.motion_switcher import restore_sport_mode

            restore_sport_mode(self._switcher, self.released_mode, who=names.POLICY_NODE)
        if self._endpoint is not None:
            self._endpoint.close()
        self._switcher = self._endpoint = None
        if self.gripper is not None:
            self.gripper.destroy()
            self.gripper = None
        for sub in self._subs:
            self.node.destroy_subscription(sub)
        if self._pub is not None:
            self.node.destroy_publisher(self._pub)
        self._subs, self._pub = [], None
