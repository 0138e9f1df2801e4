"""Cyclone DDS IDL structs for the ROS 2 messages the deploy side uses, and Unitree's low-level messages.

Every struct is `@final` (plain CDR: the encoding ROS 2's rmw layers expect; `@appendable` would make
XCDR2, which they reject) and named as ROS 2 names it on the wire (`sensor_msgs::msg::dds_::JointState_`;
cyclonedds writes the dots of `typename` as `::`). Fields carry ROS 2's field names and order, so the
CDR bytes equal ROS 2's serialization (tests/deploy/test_dds_wire.py compares them with `rosbags`).

The Unitree structs follow the unitree_go IDL published with unitree_sdk2 (`LowState_`, `LowCmd_` and
their members), and unitree_api's `Request_` / `Response_` (its RPC services); tests/deploy/test_dds_unitree.py
checks them against the `unitree-sdk2` package's own types.

No `from __future__ import annotations` here: cyclonedds resolves the field annotations at run time.
"""

from dataclasses import dataclass, field

import cyclonedds.idl as idl
import cyclonedds.idl.annotations as annotate
import cyclonedds.idl.types as types

from robo_rl.deploy.gripper import GripperTypes
from robo_rl.deploy.ros_messages import MessageTypes


# ---------------------------------------------------------------------------------------------- builtin_interfaces
@dataclass
@annotate.final
class Time(idl.IdlStruct, typename="builtin_interfaces.msg.dds_.Time_"):
    sec: types.int32 = 0
    nanosec: types.uint32 = 0


@dataclass
@annotate.final
class Duration(idl.IdlStruct, typename="builtin_interfaces.msg.dds_.Duration_"):
    sec: types.int32 = 0
    nanosec: types.uint32 = 0


# ---------------------------------------------------------------------------------------------- std_msgs
@dataclass
@annotate.final
class Header(idl.IdlStruct, typename="std_msgs.msg.dds_.Header_"):
    stamp: Time = field(default_factory=Time)
    frame_id: str = ""


@dataclass
@annotate.final
class Bool(idl.IdlStruct, typename="std_msgs.msg.dds_.Bool_"):
    data: bool = False


@dataclass
@annotate.final
class String(idl.IdlStruct, typename="std_msgs.msg.dds_.String_"):
    data: str = ""


@dataclass
@annotate.final
class MultiArrayDimension(idl.IdlStruct, typename="std_msgs.msg.dds_.MultiArrayDimension_"):
    label: str = ""
    size: types.uint32 = 0
    stride: types.uint32 = 0


@dataclass
@annotate.final
class MultiArrayLayout(idl.IdlStruct, typename="std_msgs.msg.dds_.MultiArrayLayout_"):
    dim: types.sequence[MultiArrayDimension] = field(default_factory=list)
    data_offset: types.uint32 = 0


@dataclass
@annotate.final
class Float64MultiArray(idl.IdlStruct, typename="std_msgs.msg.dds_.Float64MultiArray_"):
    layout: MultiArrayLayout = field(default_factory=MultiArrayLayout)
    data: types.sequence[types.float64] = field(default_factory=list)


@dataclass
@annotate.final
class Float32MultiArray(idl.IdlStruct, typename="std_msgs.msg.dds_.Float32MultiArray_"):
    layout: MultiArrayLayout = field(default_factory=MultiArrayLayout)
    data: types.sequence[types.float32] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------- geometry_msgs
@dataclass
@annotate.final
class Vector3(idl.IdlStruct, typename="geometry_msgs.msg.dds_.Vector3_"):
    x: types.float64 = 0.0
    y: types.float64 = 0.0
    z: types.float64 = 0.0


@dataclass
@annotate.final
class Point(idl.IdlStruct, typename="geometry_msgs.msg.dds_.Point_"):
    x: types.float64 = 0.0
    y: types.float64 = 0.0
    z: types.float64 = 0.0


@dataclass
@annotate.final
class Quaternion(idl.IdlStruct, typename="geometry_msgs.msg.dds_.Quaternion_"):
    x: types.float64 = 0.0
    y: types.float64 = 0.0
    z: types.float64 = 0.0
    w: types.float64 = 1.0


@dataclass
@annotate.final
class Pose(idl.IdlStruct, typename="geometry_msgs.msg.dds_.Pose_"):
    position: Point = field(default_factory=Point)
    orientation: Quaternion = field(default_factory=Quaternion)


@dataclass
@annotate.final
class PoseStamped(idl.IdlStruct, typename="geometry_msgs.msg.dds_.PoseStamped_"):
    header: Header = field(default_factory=Header)
    pose: Pose = field(default_factory=Pose)


@dataclass
@annotate.final
class PointStamped(idl.IdlStruct, typename="geometry_msgs.msg.dds_.PointStamped_"):
    header: Header = field(default_factory=Header)
    point: Point = field(default_factory=Point)


@dataclass
@annotate.final
class Twist(idl.IdlStruct, typename="geometry_msgs.msg.dds_.Twist_"):
    linear: Vector3 = field(default_factory=Vector3)
    angular: Vector3 = field(default_factory=Vector3)


# ---------------------------------------------------------------------------------------------- sensor_msgs
@dataclass
@annotate.final
class JointState(idl.IdlStruct, typename="sensor_msgs.msg.dds_.JointState_"):
    header: Header = field(default_factory=Header)
    name: types.sequence[str] = field(default_factory=list)
    position: types.sequence[types.float64] = field(default_factory=list)
    velocity: types.sequence[types.float64] = field(default_factory=list)
    effort: types.sequence[types.float64] = field(default_factory=list)


@dataclass
@annotate.final
class CompressedImage(idl.IdlStruct, typename="sensor_msgs.msg.dds_.CompressedImage_"):
    header: Header = field(default_factory=Header)
    format: str = ""
    data: types.sequence[types.uint8] = field(default_factory=bytes)


def _zeros9() -> list[float]:
    return [0.0] * 9


@dataclass
@annotate.final
class Imu(idl.IdlStruct, typename="sensor_msgs.msg.dds_.Imu_"):
    header: Header = field(default_factory=Header)
    orientation: Quaternion = field(default_factory=Quaternion)
    orientation_covariance: types.array[types.float64, 9] = field(default_factory=_zeros9)
    angular_velocity: Vector3 = field(default_factory=Vector3)
    angular_velocity_covariance: types.array[types.float64, 9] = field(default_factory=_zeros9)
    linear_acceleration: Vector3 = field(default_factory=Vector3)
    linear_acceleration_covariance: types.array[types.float64, 9] = field(default_factory=_zeros9)


# ---------------------------------------------------------------------------------------------- trajectory_msgs
@dataclass
@annotate.final
class JointTrajectoryPoint(idl.IdlStruct, typename="trajectory_msgs.msg.dds_.JointTrajectoryPoint_"):
    positions: types.sequence[types.float64] = field(default_factory=list)
    velocities: types.sequence[types.float64] = field(default_factory=list)
    accelerations: types.sequence[types.float64] = field(default_factory=list)
    effort: types.sequence[types.float64] = field(default_factory=list)
    time_from_start: Duration = field(default_factory=Duration)


@dataclass
@annotate.final
class JointTrajectory(idl.IdlStruct, typename="trajectory_msgs.msg.dds_.JointTrajectory_"):
    header: Header = field(default_factory=Header)
    joint_names: types.sequence[str] = field(default_factory=list)
    points: types.sequence[JointTrajectoryPoint] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------- diagnostic_msgs
@dataclass
@annotate.final
class KeyValue(idl.IdlStruct, typename="diagnostic_msgs.msg.dds_.KeyValue_"):
    key: str = ""
    value: str = ""


@dataclass
@annotate.final
class DiagnosticStatus(idl.IdlStruct, typename="diagnostic_msgs.msg.dds_.DiagnosticStatus_"):
    level: types.uint8 = 0  # ROS `byte`: one octet on the wire
    name: str = ""
    message: str = ""
    hardware_id: str = ""
    values: types.sequence[KeyValue] = field(default_factory=list)


@dataclass
@annotate.final
class DiagnosticArray(idl.IdlStruct, typename="diagnostic_msgs.msg.dds_.DiagnosticArray_"):
    header: Header = field(default_factory=Header)
    status: types.sequence[DiagnosticStatus] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------- franka_msgs
# franka_ros2's franka_msgs: msg/GraspEpsilon.msg and the goal parts of action/Move.action and action/Grasp.action
# (ROS 2 generates a message <Action>_Goal of each; tests/deploy/test_dds_gripper.py checks the bytes with rosbags).
@dataclass
@annotate.final
class GraspEpsilon(idl.IdlStruct, typename="franka_msgs.msg.dds_.GraspEpsilon_"):
    inner: types.float64 = 0.0
    outer: types.float64 = 0.0


@dataclass
@annotate.final
class Move_Goal(idl.IdlStruct, typename="franka_msgs.action.dds_.Move_Goal_"):  # noqa: N801 (ROS's name)
    width: types.float64 = 0.0
    speed: types.float64 = 0.0


@dataclass
@annotate.final
class Grasp_Goal(idl.IdlStruct, typename="franka_msgs.action.dds_.Grasp_Goal_"):  # noqa: N801 (ROS's name)
    width: types.float64 = 0.0
    epsilon: GraspEpsilon = field(default_factory=GraspEpsilon)
    speed: types.float64 = 0.0
    force: types.float64 = 0.0


# ---------------------------------------------------------------------------------------------- unitree_go
UNITREE_MOTORS = 20
"""Motor slots in unitree_go LowState_ / LowCmd_ (a Go2 uses the first 12)."""


@dataclass
@annotate.final
class MotorCmd_(idl.IdlStruct, typename="unitree_go.msg.dds_.MotorCmd_"):
    mode: types.uint8 = 0
    q: types.float32 = 0.0
    dq: types.float32 = 0.0
    tau: types.float32 = 0.0
    kp: types.float32 = 0.0
    kd: types.float32 = 0.0
    reserve: types.array[types.uint32, 3] = field(default_factory=lambda: [0, 0, 0])


@dataclass
@annotate.final
class BmsCmd_(idl.IdlStruct, typename="unitree_go.msg.dds_.BmsCmd_"):
    off: types.uint8 = 0
    reserve: types.array[types.uint8, 3] = field(default_factory=lambda: [0, 0, 0])


@dataclass
@annotate.final
class LowCmd_(idl.IdlStruct, typename="unitree_go.msg.dds_.LowCmd_"):
    head: types.array[types.uint8, 2] = field(default_factory=lambda: [0, 0])
    level_flag: types.uint8 = 0
    frame_reserve: types.uint8 = 0
    sn: types.array[types.uint32, 2] = field(default_factory=lambda: [0, 0])
    version: types.array[types.uint32, 2] = field(default_factory=lambda: [0, 0])
    bandwidth: types.uint16 = 0
    motor_cmd: types.array[MotorCmd_, UNITREE_MOTORS] = field(
        default_factory=lambda: [MotorCmd_() for _ in range(UNITREE_MOTORS)])
    bms_cmd: BmsCmd_ = field(default_factory=BmsCmd_)
    wireless_remote: types.array[types.uint8, 40] = field(default_factory=lambda: [0] * 40)
    led: types.array[types.uint8, 12] = field(default_factory=lambda: [0] * 12)
    fan: types.array[types.uint8, 2] = field(default_factory=lambda: [0, 0])
    gpio: types.uint8 = 0
    reserve: types.uint32 = 0
    crc: types.uint32 = 0


@dataclass
@annotate.final
class IMUState_(idl.IdlStruct, typename="unitree_go.msg.dds_.IMUState_"):
    quaternion: types.array[types.float32, 4] = field(default_factory=lambda: [1.0, 0.0, 0.0, 0.0])
    gyroscope: types.array[types.float32, 3] = field(default_factory=lambda: [0.0] * 3)
    accelerometer: types.array[types.float32, 3] = field(default_factory=lambda: [0.0] * 3)
    rpy: types.array[types.float32, 3] = field(default_factory=lambda: [0.0] * 3)
    temperature: types.uint8 = 0


@dataclass
@annotate.final
class MotorState_(idl.IdlStruct, typename="unitree_go.msg.dds_.MotorState_"):
    mode: types.uint8 = 0
    q: types.float32 = 0.0
    dq: types.float32 = 0.0
    ddq: types.float32 = 0.0
    tau_est: types.float32 = 0.0
    q_raw: types.float32 = 0.0
    dq_raw: types.float32 = 0.0
    ddq_raw: types.float32 = 0.0
    temperature: types.uint8 = 0
    lost: types.uint32 = 0
    reserve: types.array[types.uint32, 2] = field(default_factory=lambda: [0, 0])


@dataclass
@annotate.final
class BmsState_(idl.IdlStruct, typename="unitree_go.msg.dds_.BmsState_"):
    version_high: types.uint8 = 0
    version_low: types.uint8 = 0
    status: types.uint8 = 0
    soc: types.uint8 = 0
    current: types.int32 = 0
    cycle: types.uint16 = 0
    bq_ntc: types.array[types.uint8, 2] = field(default_factory=lambda: [0, 0])
    mcu_ntc: types.array[types.uint8, 2] = field(default_factory=lambda: [0, 0])
    cell_vol: types.array[types.uint16, 15] = field(default_factory=lambda: [0] * 15)


@dataclass
@annotate.final
class LowState_(idl.IdlStruct, typename="unitree_go.msg.dds_.LowState_"):
    head: types.array[types.uint8, 2] = field(default_factory=lambda: [0, 0])
    level_flag: types.uint8 = 0
    frame_reserve: types.uint8 = 0
    sn: types.array[types.uint32, 2] = field(default_factory=lambda: [0, 0])
    version: types.array[types.uint32, 2] = field(default_factory=lambda: [0, 0])
    bandwidth: types.uint16 = 0
    imu_state: IMUState_ = field(default_factory=IMUState_)
    motor_state: types.array[MotorState_, UNITREE_MOTORS] = field(
        default_factory=lambda: [MotorState_() for _ in range(UNITREE_MOTORS)])
    bms_state: BmsState_ = field(default_factory=BmsState_)
    foot_force: types.array[types.int16, 4] = field(default_factory=lambda: [0] * 4)
    foot_force_est: types.array[types.int16, 4] = field(default_factory=lambda: [0] * 4)
    tick: types.uint32 = 0
    wireless_remote: types.array[types.uint8, 40] = field(default_factory=lambda: [0] * 40)
    bit_flag: types.uint8 = 0
    adc_reel: types.float32 = 0.0
    temperature_ntc1: types.uint8 = 0
    temperature_ntc2: types.uint8 = 0
    power_v: types.float32 = 0.0
    power_a: types.float32 = 0.0
    fan_frequency: types.array[types.uint16, 4] = field(default_factory=lambda: [0] * 4)
    reserve: types.uint32 = 0
    crc: types.uint32 = 0


# ---------------------------------------------------------------------------------------------- unitree_api
# The request / response pair of Unitree's RPC services over DDS (`rt/api/<service>/request` and `/response`),
# e.g. the motion switcher that releases the onboard sport-mode controller before low-level control.
@dataclass
@annotate.final
class RequestIdentity_(idl.IdlStruct, typename="unitree_api.msg.dds_.RequestIdentity_"):
    id: types.int64 = 0
    api_id: types.int64 = 0


@dataclass
@annotate.final
class RequestLease_(idl.IdlStruct, typename="unitree_api.msg.dds_.RequestLease_"):
    id: types.int64 = 0


@dataclass
@annotate.final
class RequestPolicy_(idl.IdlStruct, typename="unitree_api.msg.dds_.RequestPolicy_"):
    priority: types.int32 = 0
    noreply: bool = False


@dataclass
@annotate.final
class RequestHeader_(idl.IdlStruct, typename="unitree_api.msg.dds_.RequestHeader_"):
    identity: RequestIdentity_ = field(default_factory=RequestIdentity_)
    lease: RequestLease_ = field(default_factory=RequestLease_)
    policy: RequestPolicy_ = field(default_factory=RequestPolicy_)


@dataclass
@annotate.final
class Request_(idl.IdlStruct, typename="unitree_api.msg.dds_.Request_"):
    header: RequestHeader_ = field(default_factory=RequestHeader_)
    parameter: str = ""
    binary: types.sequence[types.uint8] = field(default_factory=list)


@dataclass
@annotate.final
class ResponseStatus_(idl.IdlStruct, typename="unitree_api.msg.dds_.ResponseStatus_"):
    code: types.int32 = 0


@dataclass
@annotate.final
class ResponseHeader_(idl.IdlStruct, typename="unitree_api.msg.dds_.ResponseHeader_"):
    identity: RequestIdentity_ = field(default_factory=RequestIdentity_)
    status: ResponseStatus_ = field(default_factory=ResponseStatus_)


@dataclass
@annotate.final
class Response_(idl.IdlStruct, typename="unitree_api.msg.dds_.Response_"):
    header: ResponseHeader_ = field(default_factory=ResponseHeader_)
    data: str = ""
    binary: types.sequence[types.uint8] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------- binding
def gripper_message_types() -> GripperTypes:
    """The franka_msgs structs above as the `GripperTypes` the gripper goal adapters build with."""
    return GripperTypes(Move_Goal=Move_Goal, Grasp_Goal=Grasp_Goal, GraspEpsilon=GraspEpsilon)


def dds_message_types() -> MessageTypes:
    """The structs above as the `MessageTypes` the ROS 2 message adapters build with."""
    return MessageTypes(
        Time=Time, Duration=Duration, Header=Header, JointState=JointState, Imu=Imu, Quaternion=Quaternion,
        Vector3=Vector3, Twist=Twist, Point=Point, PointStamped=PointStamped, Pose=Pose, PoseStamped=PoseStamped,
        MultiArrayDimension=MultiArrayDimension, MultiArrayLayout=MultiArrayLayout,
        Float64MultiArray=Float64MultiArray, Float32MultiArray=Float32MultiArray, JointTrajectory=JointTrajectory,
        JointTrajectoryPoint=JointTrajectoryPoint, Bool=Bool, String=String, KeyValue=KeyValue,
        DiagnosticStatus=DiagnosticStatus, DiagnosticArray=DiagnosticArray,
    )


ROS_STRUCTS = {
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
"""The struct of each ROS 2 message type in ros_interface.MESSAGE_TYPES."""
UNITREE_STRUCTS = {"unitree_go/msg/LowState": LowState_, "unitree_go/msg/LowCmd": LowCmd_}
IMAGE_STRUCTS = {"sensor_msgs/msg/CompressedImage": CompressedImage}
"""Camera frames (ros_interface.camera_topic; robo_rl.deploy.camera_frames builds and reads them)."""
FRANKA_STRUCTS = {"franka_msgs/action/Move_Goal": Move_Goal, "franka_msgs/action/Grasp_Goal": Grasp_Goal,
                  "franka_msgs/msg/GraspEpsilon": GraspEpsilon}
"""franka_gripper's goal messages (ros_interface.GRIPPER_TOPICS)."""
