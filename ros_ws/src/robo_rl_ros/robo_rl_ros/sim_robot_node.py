"""sim_robot_node: the MuJoCo twin as a ROS 2 node, standing in for a robot and its ros2_control controller.

Publishes joint_states (+ imu for legged robots, ee_position for arms, twin/base_twist ground truth for
legged robots) at `rate_hz` from its own thread on absolute deadlines, and applies the commands a
ros2_control controller would take on the topic of `command_interface` (forward_position and
joint_trajectory with the hardware file's gains, pd_targets as sent). Topic names come from the hardware file's
`transport.dds` section as the policy node resolves them (DdsSettings.ros_topics), so both find each other in any
namespace. It serves the `ros2` profile only: for a Go2's unitree lowstate / lowcmd, rehearse against
`robo-rl twin --transport dds` (wire-compatible with unitree_ros2) or pass command_interface. Until the first command
the drivers are passive, like a robot at power-on. Needs mujoco (pip install mujoco, or robo_rl[train]).
"""

from __future__ import annotations

import sys
import threading
import time

from rclpy.node import Node

from robo_rl.core.assets import find_asset
from robo_rl.deploy import ros_commands as rc
from robo_rl.deploy import ros_interface as names
from robo_rl.deploy import ros_messages as rm
from robo_rl.deploy.dds_settings import for_ros_node
from robo_rl.deploy.hardware import load_hardware
from robo_rl.deploy.transports.sim import SimRobot
from robo_rl_ros.messages import CLASSES, message_types, qos, run_node

PARAMETERS = {"hardware_config": "hardware/go2.yaml", "command_interface": "pd_targets", "rate_hz": 200.0,
              "physics_dt": 0.0}


class SimRobotNode(Node):
    def __init__(self):
        super().__init__(names.SIM_ROBOT_NODE)
        for name, default in PARAMETERS.items():
            self.declare_parameter(name, default)
        p = {name: self.get_parameter(name).value for name in PARAMETERS}
        self.hw = load_hardware(find_asset(p["hardware_config"], what="hardware file"))
        settings = for_ros_node(self.hw, p["command_interface"] or None)
        if settings.profile != "ros2":
            raise ValueError(f"hardware {self.hw.robot!r} uses the {settings.profile} profile: the twin node serves "
                             "ros2 topics only; pass command_interface (pd_targets), or run `robo-rl twin --transport "
                             "dds` for the robot's own low-level topics")
        self.interface = settings.command_interface
        sim = self.hw.transport.get("sim") or {}
        if "model" not in sim:
            raise ValueError(f"hardware {self.hw.robot!r} has no transport.sim.model (the MJCF of its twin)")
        self.robot = SimRobot(find_asset(sim["model"], what="sim twin model"), self.hw,
                              control_dt=1.0 / self.hw.control_rate_hz, keyframe=sim.get("keyframe"), realtime=True,
                              physics_dt=p["physics_dt"] or None)
        self.types = message_types()
        self.period = 1.0 / float(p["rate_hz"])
        topics = settings.ros_topics()
        sensor = qos(names.SENSOR_QOS)
        self._pubs = {"joints": self.create_publisher(CLASSES[names.JOINT_STATE], topics["joints"], sensor)}
        if self.robot.floating:
            self._pubs["imu"] = self.create_publisher(CLASSES[names.IMU], topics["imu"], sensor)
            self._twist = self.create_publisher(CLASSES[names.TWIST], names.TWIN_BASE_TWIST.name, sensor)
        else:
            self._pubs["ee"] = self.create_publisher(CLASSES[names.POINT_STAMPED], topics["ee"], sensor)
            self._twist = None
        spec = names.COMMAND_TOPICS[self.interface]
        self.create_subscription(CLASSES[spec.ros_type], topics["command"], self._on_command, qos(spec.qos))
        self.rejected = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._publish_loop, daemon=True)
        self._thread.start()
        self.get_logger().info(f"twin of {self.hw.robot}: state on {topics['joints']}, commands on "
                               f"{topics['command']} ({self.interface})")

    def _on_command(self, msg) -> None:
        try:
            self.robot.send_command(rc.decode_command(msg, self.interface, self.hw))
        except ValueError as exc:
            self.rejected += 1
            self.get_logger().warning(f"command rejected: {exc}", throttle_duration_sec=1.0)

    def _publish_loop(self) -> None:
        t0 = time.monotonic()
        k = 0
        while not self._stop.is_set():
            state = self.robot.read_state()
            for role, msg in rm.twin_state_messages(self.types, state, self.hw).items():
                if role in self._pubs:
                    self._pubs[role].publish(msg)
            if self._twist is not None:
                lin, ang = self.robot.base_twist()
                self._twist.publish(rm.twist_message(self.types, lin, ang))
            k = max(k + 1, int((time.monotonic() - t0) / self.period))
            self._stop.wait(max(0.0, t0 + k * self.period - time.monotonic()))

    def close(self) -> None:
        """Stop publishing (before the context goes down) and close the twin."""
        self._stop.set()
        self._thread.join(timeout=1.0)
        self.robot.close()


def main(args=None) -> None:
    sys.exit(run_node(names.SIM_ROBOT_NODE, SimRobotNode, lambda node: node.close(), args))


if __name__ == "__main__":
    main()
