"""rclpy's message classes and QoS profiles for the deploy core's ROS 2 message adapters, and the way every node of
the package runs: own SIGINT / SIGTERM handling, then the teardown in robo_rl.deploy.shutdown's order."""

from __future__ import annotations

import array
import sys
from collections.abc import Callable

import rclpy
from builtin_interfaces.msg import Duration, Time
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from geometry_msgs.msg import Point, PointStamped, Pose, PoseStamped, Quaternion, Twist, Vector3
from rclpy.executors import MultiThreadedExecutor
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
from rclpy.signals import SignalHandlerOptions
from sensor_msgs.msg import CompressedImage, Imu, JointState
from std_msgs.msg import (
    Bool,
    Float32MultiArray,
    Float64MultiArray,
    Header,
    MultiArrayDimension,
    MultiArrayLayout,
    String,
)
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from robo_rl.deploy.ros_interface import QosSpec
from robo_rl.deploy.ros_messages import MessageTypes
from robo_rl.deploy.shutdown import ShutdownRequest, run_teardown

CLASSES = {
    "sensor_msgs/msg/JointState": JointState,
    "sensor_msgs/msg/Imu": Imu,
    "sensor_msgs/msg/CompressedImage": CompressedImage,
    "geometry_msgs/msg/Twist": Twist,
    "geometry_msgs/msg/PointStamped": PointStamped,
    "geometry_msgs/msg/PoseStamped": PoseStamped,
    "std_msgs/msg/Float64MultiArray": Float64MultiArray,
    "std_msgs/msg/Float32MultiArray": Float32MultiArray,
    "trajectory_msgs/msg/JointTrajectory": JointTrajectory,
    "std_msgs/msg/Bool": Bool,
    "std_msgs/msg/String": String,
    "diagnostic_msgs/msg/DiagnosticArray": DiagnosticArray,
}
"""rclpy class of each ROS type named in robo_rl.deploy.ros_interface."""


def message_types() -> MessageTypes:
    """The adapters' MessageTypes for rclpy (float arrays as array.array, `byte` fields as bytes)."""
    return MessageTypes(
        Time=Time, Duration=Duration, Header=Header, JointState=JointState, Imu=Imu, Quaternion=Quaternion,
        Vector3=Vector3, Twist=Twist, Point=Point, PointStamped=PointStamped, Pose=Pose, PoseStamped=PoseStamped,
        MultiArrayDimension=MultiArrayDimension, MultiArrayLayout=MultiArrayLayout,
        Float64MultiArray=Float64MultiArray, Float32MultiArray=Float32MultiArray, JointTrajectory=JointTrajectory,
        JointTrajectoryPoint=JointTrajectoryPoint, Bool=Bool, String=String, KeyValue=KeyValue,
        DiagnosticStatus=DiagnosticStatus, DiagnosticArray=DiagnosticArray,
        float64_array=lambda a: array.array("d", (float(v) for v in a)),
        float32_array=lambda a: array.array("f", (float(v) for v in a)),
        byte_value=lambda v: bytes([v]),
    )


def qos(spec: QosSpec) -> QoSProfile:
    """The rclpy QoS profile of a ros_interface QosSpec."""
    return QoSProfile(
        reliability=ReliabilityPolicy.RELIABLE if spec.reliable else ReliabilityPolicy.BEST_EFFORT,
        history=HistoryPolicy.KEEP_LAST,
        depth=spec.depth,
    )


def unitree_classes() -> dict:
    """unitree_ros2's unitree_go message classes by name (the `unitree` profile; needs that package built)."""
    try:
        import unitree_go.msg as unitree_go
    except ImportError:
        raise ValueError("the unitree profile needs unitree_ros2's unitree_go package: build it in this workspace "
                         "(docs/deploy.md, ROS 2) or pass command_interface for a ros2_control driver") from None
    from robo_rl.deploy.transports.dds.unitree_ros import MESSAGE_NAMES

    return {name: getattr(unitree_go, name) for name in MESSAGE_NAMES}


def franka_gripper_classes() -> dict:
    """franka_ros2's franka_msgs action and message classes by name ("Move", "Grasp", "GraspEpsilon"): a hardware file
    with a `gripper` (franka_gripper) section needs that package built or installed."""
    try:
        from franka_msgs.action import Grasp, Move
        from franka_msgs.msg import GraspEpsilon
    except ImportError:
        raise ValueError("the hardware file's gripper (franka_gripper) needs franka_ros2's franka_msgs package: build "
                         "it in this workspace (docs/deploy.md, ROS 2)") from None
    return {"Move": Move, "Grasp": Grasp, "GraspEpsilon": GraspEpsilon}


def run_node(name: str, make_node: Callable[[], object], close: Callable[[object], object], args=None,
             poll_s: float = 0.1) -> int:
    """Run one node until SIGINT / SIGTERM: returns the exit code (0; 2 when the node refuses its input).

    rclpy starts without its own signal handlers (SignalHandlerOptions.NO: they would shut the context down while
    the robot still needs its last command); ours only request the shutdown, which the spin loop notices within
    `poll_s`. Then `close(node)` (the "control" step: the policy node's last damping command, the twin's thread)
    runs on a live context, and the executor, the node and the context go down after it (robo_rl.deploy.shutdown).
    A ValueError while the node is made is bad input: one line on stderr, exit 2, nothing sent.
    """
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    request = ShutdownRequest()
    restore = request.install()
    try:
        node = make_node()
    except ValueError as exc:
        print(f"{name}: {exc}", file=sys.stderr, flush=True)
        if rclpy.ok():
            rclpy.shutdown()
        restore()
        return 2
    executor = MultiThreadedExecutor()
    executor.add_node(node)
    try:
        while not request.requested and rclpy.ok():
            executor.spin_once(timeout_sec=poll_s)
    except KeyboardInterrupt:  # a second signal, or one while the handler was not yet ours
        pass
    finally:
        run_teardown({"control": lambda: close(node), "executor": executor.shutdown, "node": node.destroy_node,
                      "context": lambda: rclpy.shutdown() if rclpy.ok() else None},
                     log=lambda line: print(f"{name}: {line}", file=sys.stderr, flush=True))
        restore()
    return 0
