"""rclpy's message classes and QoS profiles for the deploy core's ROS 2 message adapters."""

from __future__ import annotations

import array

from builtin_interfaces.msg import Duration, Time
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from geometry_msgs.msg import Point, PointStamped, Pose, PoseStamped, Quaternion, Twist, Vector3
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import Imu, JointState
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

CLASSES = {
    "sensor_msgs/msg/JointState": JointState,
    "sensor_msgs/msg/Imu": Imu,
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


def spin_until_shutdown(node, close) -> None:
    """Spin `node` until Ctrl-C or shutdown, then `close()` it (its own cleanup), destroy it and shut rclpy down."""
    import rclpy
    from rclpy.executors import ExternalShutdownException

    try:
        rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        close()
        node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()
