"""RosRobot: the deploy core's RobotInterface over rclpy subscriptions and one command publisher."""

from __future__ import annotations

import os
import sys
import time

from rclpy.callback_groups import ReentrantCallbackGroup

from robo_rl.deploy import ros_interface as names
from robo_rl.deploy import ros_messages as rm
from robo_rl.deploy.dds_settings import DdsSettings
from robo_rl.deploy.hardware import HardwareSpec
from robo_rl.deploy.robot import JointCommand, RobotState
from robo_rl_ros.messages import CLASSES, message_types, qos, unitree_classes


class RosRobot:
    """The robot's topics, named by the hardware file's `transport.dds` section (DdsSettings.ros_topics: profile,
    namespace, topic overrides; launch remappings apply on top).

    - `ros2` profile: state from joint_states (+ imu for legged robots, ee_position when the policy observes it),
      commands on the command interface's topic (joint_trajectory points with velocities, rm.CommandEncoder).
    - `unitree` profile (a Go2 through unitree_ros2): unitree_go/msg/LowState in, LowCmd out with the CRC, converted
      by robo_rl.deploy.transports.dds.unitree_ros (needs robo_rl[dds] and unitree_ros2's unitree_go package).
      `take_control` releases the onboard sport mode through the motion switcher over DDS, as the DDS path does.

    Subscriptions run in their own reentrant callback group, so they keep arriving while a lifecycle
    transition (on_activate waiting for fresh state) holds the node's default group. The command publisher is a plain
    publisher, not a lifecycle one: the last damping command must go out whatever the node's state.
    """

    def __init__(self, node, hw: HardwareSpec, settings: DdsSettings, control_dt: float, needs_ee: bool):
        self.node = node
        self.hw = hw
        self.settings = settings
        self.profile = settings.profile
        self.control_dt = control_dt
        self.state = rm.StateAssembler(hw, needs_imu=hw.kind == "legged", needs_ee=needs_ee and self.profile == "ros2")
        self.topics = settings.ros_topics()
        self.state_topic, self.command_topic = self.topics["joints"], self.topics["command"]
        self.released_mode = ""
        self._switcher = self._endpoint = None
        group = ReentrantCallbackGroup()
        sensor = qos(names.SENSOR_QOS)
        sub = node.create_subscription
        if self.profile == "unitree":
            try:
                from robo_rl.deploy.transports.dds import unitree_ros  # cyclonedds: the unitree profile only
            except ImportError:
                raise ValueError("the unitree profile needs cyclonedds in this Python: pip install "
                                 "'robo_rl[deploy,dds]' (docs/deploy.md, ROS 2)") from None
            self._unitree = unitree_ros
            self._classes = unitree_classes()
            self._subs = [sub(self._classes["LowState"], self.state_topic,
                              lambda m: unitree_ros.store_ros_low_state(self.state, m, hw), sensor,
                              callback_group=group)]
            self._pub = node.create_publisher(self._classes["LowCmd"], self.command_topic, qos(names.COMMAND_QOS))
            return
        self._subs = [sub(CLASSES[names.JOINT_STATE], self.state_topic, self.state.on_joint_state, sensor,
                          callback_group=group)]
        if self.state.needs_imu:
            self._subs.append(sub(CLASSES[names.IMU], self.topics["imu"], self.state.on_imu, sensor,
                                  callback_group=group))
        if self.state.needs_ee:
            self._subs.append(sub(CLASSES[names.POINT_STAMPED], self.topics["ee"], self.state.on_ee_position, sensor,
                                  callback_group=group))
        spec = names.COMMAND_TOPICS[settings.command_interface]
        self._encode = rm.CommandEncoder(message_types(), settings.command_interface, control_dt, hw.velocity_limits)
        self._pub = node.create_publisher(CLASSES[spec.ros_type], self.command_topic, qos(spec.qos))

    def __str__(self) -> str:
        how = "unitree lowcmd" if self.profile == "unitree" else self.settings.command_interface
        return f"state on {self.state_topic}, commands on {self.command_topic} ({how})"

    def read_state(self) -> RobotState:
        state = self.state.latest()
        if state is None:
            raise RuntimeError(f"no state received yet on {self.state_topic}")
        return state

    def send_command(self, command: JointCommand) -> None:
        if self.profile == "unitree":
            self._pub.publish(self._unitree.low_cmd_to_ros(command, self.hw, self._classes))
        else:
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
            if state is not None and clock() - state.received <= fresh_within_s:
                return state
            if clock() > end:
                why = f"; last rejected message: {self.state.last_error}" if self.state.last_error else ""
                raise ValueError(f"no fresh robot state on {self.state_topic} within {timeout_s:g} s "
                                 f"(received: {dict(self.state.received_count) or 'nothing'}{why})")
            time.sleep(0.01)

    def close(self) -> None:
        """Select a released sport mode again when the hardware file asks (`sport_mode: restore`), then destroy this
        robot's subscriptions and publisher."""
        if self._switcher is not None and self.released_mode and self.settings.sport_mode == "restore":
            try:
                code = self._switcher.select(self.released_mode)
            except (TimeoutError, ValueError) as exc:
                code = str(exc)
            if code != 0:
                print(f"robo_rl_policy: could not select the sport mode {self.released_mode!r} again ({code})",
                      file=sys.stderr, flush=True)
        if self._endpoint is not None:
            self._endpoint.close()
        self._switcher = self._endpoint = None
        for sub in self._subs:
            self.node.destroy_subscription(sub)
        if self._pub is not None:
            self.node.destroy_publisher(self._pub)
        self._subs, self._pub = [], None
