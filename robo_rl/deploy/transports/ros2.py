"""The `ros2` transport: the robot's ROS 2 topics through rclpy, for a process other than the policy node.

`robo-rl train-real --transport ros2` (the actor), `RobotEnv(..., "ros2")`, `robo-rl deploy`, `replay` and `record
--teleop` then reach a robot driven by ros2_control, franka_ros2 or unitree_ros2 exactly as the policy node does:
`RosRobot` (ros_ws/src/robo_rl_ros) reads the topics the hardware file's `transport.dds` section names, sends the
commands of its command interface, and a Franka Hand's goals through franka_gripper's actions.

Needs rclpy and the robo_rl_ros package on the path (a sourced ROS 2 workspace, docs/deploy.md "ROS 2: install"):
without them the transport is not available (ImportError, as for `dds` without cyclonedds). The robot's node spins on
a MultiThreadedExecutor thread of its own. rclpy is initialised here, in `domain_id`, without rclpy's signal handlers
(robo_rl.deploy.shutdown says why), unless the process already did it; then it is left to the process.
"""

from __future__ import annotations

import os
import threading
from typing import Any

try:
    import rclpy
    from rclpy.executors import MultiThreadedExecutor
    from rclpy.node import Node
    from rclpy.signals import SignalHandlerOptions
    from robo_rl_ros.ros_robot import RosRobot
except ImportError as exc:  # not a sourced ROS 2 workspace
    raise ImportError(f"transport ros2 needs rclpy and the robo_rl_ros package ({exc.name} is missing): source the "
                      "ROS 2 workspace (docs/deploy.md, ROS 2: install)", name=exc.name) from None

from robo_rl.deploy.dds_settings import check_domain_id, for_ros_node
from robo_rl.deploy.hardware import HardwareSpec
from robo_rl.deploy.robot import TRANSPORTS, ConnectOptions, JointCommand, RobotState, Transport

SPIN_TIMEOUT_S = 0.05
"""The executor thread's spin_once timeout: how long `close` may wait for it."""


class Ros2Robot:
    """A RobotInterface over one rclpy node of its own (`RosRobot` on it), spun on its own thread.

    Args:
        hw: the robot.
        options: control_dt, needs_ee, command_interface (None: the hardware file's profile and interface),
            cameras (the robot's CompressedImage topics) and domain_id (used when rclpy is initialised here).
    """

    def __init__(self, hw: HardwareSpec, options: ConnectOptions):
        settings = for_ros_node(hw, options.command_interface)  # ValueError (one line) before anything is made
        self._own_context = not rclpy.ok()
        if self._own_context:
            rclpy.init(domain_id=check_domain_id(options.domain_id), signal_handler_options=SignalHandlerOptions.NO)
        self.node = Node(f"robo_rl_robot_{os.getpid()}")
        try:
            self.robot = RosRobot(self.node, hw, settings, options.control_dt, options.needs_ee, options.cameras)
        except BaseException:
            self._shutdown()
            raise
        self.executor = MultiThreadedExecutor()
        self.executor.add_node(self.node)
        self._running = threading.Event()
        self._running.set()
        self._thread = threading.Thread(target=self._spin, name="robo_rl-ros2", daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        while self._running.is_set():
            self.executor.spin_once(timeout_sec=SPIN_TIMEOUT_S)

    def __str__(self) -> str:
        return f"ros2 ({self.robot})"

    def read_state(self) -> RobotState:
        return self.robot.read_state()

    def send_command(self, command: JointCommand) -> None:
        self.robot.send_command(command)

    def take_control(self) -> None:
        self.robot.take_control()

    def wait_for_state(self, timeout_s: float, **kwargs: Any) -> RobotState:
        return self.robot.wait_for_state(timeout_s, **kwargs)

    def close(self) -> None:
        """Stop spinning, then the robot's topics, the node and (if initialised here) rclpy, in that order."""
        self._running.clear()
        self._thread.join(timeout=2.0)
        self.robot.close()
        self.executor.shutdown()
        self._shutdown()

    def _shutdown(self) -> None:
        self.node.destroy_node()
        if self._own_context and rclpy.ok():
            rclpy.shutdown()


def connect_ros2(hw: HardwareSpec, options: ConnectOptions) -> Ros2Robot:
    """A Ros2Robot (topics and profile from the hardware file); ValueError (one line) for a bad setting."""
    if not options.realtime:
        raise ValueError("transport ros2 runs in real time only (realtime=False is for the sim transport)")
    return Ros2Robot(hw, options)


TRANSPORTS.register("ros2", Transport(connect=connect_ros2,
                                      options=frozenset({"domain_id", "command_interface", "cameras"}),
                                      help="a robot's ROS 2 topics through rclpy (a sourced workspace)"))
