"""RosRobot: the deploy core's RobotInterface over rclpy subscriptions and one command publisher."""

from __future__ import annotations

import time

from rclpy.callback_groups import ReentrantCallbackGroup

from robo_rl.deploy import ros_interface as names
from robo_rl.deploy import ros_messages as rm
from robo_rl.deploy.hardware import HardwareSpec
from robo_rl.deploy.robot import JointCommand, RobotState
from robo_rl_ros.messages import CLASSES, message_types, qos


class RosRobot:
    """State from joint_states (+ imu for legged robots, ee_position when the policy observes it), commands on
    the command interface's topic; all names from robo_rl.deploy.ros_interface.

    Subscriptions run in their own reentrant callback group, so they keep arriving while a lifecycle
    transition (on_activate waiting for fresh state) holds the node's default group.
    """

    def __init__(self, node, hw: HardwareSpec, command_interface: str, control_dt: float, needs_ee: bool):
        self.node = node
        self.hw = hw
        self.command_interface = rm.check_command_interface(command_interface)
        self.control_dt = control_dt
        self.types = message_types()
        self.state = rm.StateAssembler(hw, needs_imu=hw.kind == "legged", needs_ee=needs_ee)
        group = ReentrantCallbackGroup()
        sensor = qos(names.SENSOR_QOS)
        self._subs = [node.create_subscription(CLASSES[names.JOINT_STATE], names.JOINT_STATES.name,
                                               self.state.on_joint_state, sensor, callback_group=group)]
        if self.state.needs_imu:
            self._subs.append(node.create_subscription(CLASSES[names.IMU], names.IMU_TOPIC.name, self.state.on_imu,
                                                       sensor, callback_group=group))
        if needs_ee:
            self._subs.append(node.create_subscription(CLASSES[names.POINT_STAMPED], names.EE_POSITION.name,
                                                       self.state.on_ee_position, sensor, callback_group=group))
        spec = names.COMMAND_TOPICS[self.command_interface]
        self.command_topic = spec.name
        self._pub = node.create_publisher(CLASSES[spec.ros_type], spec.name, qos(spec.qos))

    def read_state(self) -> RobotState:
        state = self.state.latest()
        if state is None:
            raise RuntimeError(f"no state received yet on {names.JOINT_STATES.name}")
        return state

    def send_command(self, command: JointCommand) -> None:
        self._pub.publish(rm.encode_command(self.types, self.command_interface, command, self.control_dt))

    def wait_for_state(self, timeout_s: float, *, fresh_within_s: float, clock=time.monotonic) -> RobotState:
        end = clock() + timeout_s
        while True:
            state = self.state.latest()
            if state is not None and clock() - state.received <= fresh_within_s:
                return state
            if clock() > end:
                raise ValueError(f"no fresh robot state on {names.JOINT_STATES.name} within {timeout_s:g} s "
                                 f"(received: {dict(self.state.received_count) or 'nothing'})")
            time.sleep(0.01)

    def close(self) -> None:
        for sub in self._subs:
            self.node.destroy_subscription(sub)
        self.node.destroy_publisher(self._pub)
        self._subs = []
