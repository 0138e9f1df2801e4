"""Every ROS 2 name the deploy side uses: topics, message types, QoS, services, parameters, commands.

One module, imported by the plain-DDS transport (`transports/dds.py`), the twin server and the rclpy
nodes in `ros_ws/src/robo_rl_ros`, so a name can never differ between them. Pure Python: importing it
needs neither numpy nor cyclonedds nor rclpy.

Plain DDS speaks ROS 2 by ROS 2's naming rules (rmw_cyclonedds_cpp): ROS topic `/a/b` is DDS topic
`rt/a/b`, message type `pkg/msg/Name` is DDS type `pkg::msg::dds_::Name_`.
"""

from __future__ import annotations

from dataclasses import dataclass

# ---------------------------------------------------------------------------------------------- node names
POLICY_NODE = "robo_rl_policy"
"""Name of the lifecycle policy node (and the namespace of its private `~/` topics and services)."""
SIM_ROBOT_NODE = "robo_rl_sim_robot"
"""Name of the sim-twin node."""
PACKAGE = "robo_rl_ros"
"""The ament_python package in ros_ws/src."""


# ---------------------------------------------------------------------------------------------- names
def dds_type_name(ros_type: str) -> str:
    """DDS type name of a ROS 2 message type: "sensor_msgs/msg/JointState" -> "sensor_msgs::msg::dds_::JointState_"."""
    parts = ros_type.split("/")
    if len(parts) != 3 or parts[1] not in ("msg", "srv", "action") or not all(parts):
        raise ValueError(f"ROS type {ros_type!r}: expected 'package/msg/Name'")
    package, kind, name = parts
    return f"{package}::{kind}::dds_::{name}_"


def resolve_topic(topic: str, namespace: str = "", node: str = POLICY_NODE) -> str:
    """Fully qualified ROS 2 topic name: `~/x` -> `/<ns>/<node>/x`, `x` -> `/<ns>/x`, `/x` stays.

    Raises:
        ValueError: an empty topic or a namespace that does not start with "/" (when given).
    """
    if not topic:
        raise ValueError("topic name is empty")
    if namespace and not namespace.startswith("/"):
        raise ValueError(f"namespace {namespace!r}: must start with '/'")
    ns = namespace.rstrip("/")
    if topic.startswith("~/"):
        return f"{ns}/{node}/{topic[2:]}"
    if topic.startswith("/"):
        return topic
    return f"{ns}/{topic}"


def dds_topic_name(topic: str, namespace: str = "", node: str = POLICY_NODE) -> str:
    """DDS topic name of a ROS 2 topic: "joint_states" -> "rt/joint_states", "~/x" -> "rt/robo_rl_policy/x"."""
    return "rt" + resolve_topic(topic, namespace, node)


def ros_topic_name(dds_topic: str) -> str:
    """ROS 2 name of a DDS topic that follows ROS 2's naming: "rt/lowstate" -> "/lowstate".

    Raises:
        ValueError: a DDS name without the "rt/" prefix (no ROS 2 node can reach it).
    """
    if not dds_topic.startswith("rt/") or len(dds_topic) == 3:
        raise ValueError(f"DDS topic {dds_topic!r}: a ROS 2 node reaches only topics named 'rt/<name>'")
    return dds_topic[2:]


# ---------------------------------------------------------------------------------------------- QoS
@dataclass(frozen=True)
class QosSpec:
    """A QoS profile as ROS 2 writes it."""

    reliable: bool
    """True: reliable; False: best effort."""
    depth: int
    """History keep-last depth."""


SENSOR_QOS = QosSpec(reliable=False, depth=1)
"""ROS 2's sensor-data profile for state: best effort, keep last 1 (a best-effort reader hears reliable writers)."""
COMMAND_QOS = QosSpec(reliable=True, depth=1)
"""Commands and operator inputs: reliable, keep last 1 (only the newest command matters)."""
EVENT_QOS = QosSpec(reliable=True, depth=100)
"""Episode events and diagnostics: reliable, enough history that a slow reader misses none."""


# ---------------------------------------------------------------------------------------------- topics
@dataclass(frozen=True)
class TopicSpec:
    """One topic: its ROS 2 name (relative names resolve in the node's namespace), type and QoS."""

    name: str
    ros_type: str
    qos: QosSpec

    @property
    def dds_type(self) -> str:
        """DDS type name, e.g. "sensor_msgs::msg::dds_::JointState_"."""
        return dds_type_name(self.ros_type)

    def dds_name(self, namespace: str = "", node: str = POLICY_NODE) -> str:
        """DDS topic name ("rt/..."), resolved in `namespace`."""
        return dds_topic_name(self.name, namespace, node)


JOINT_STATE = "sensor_msgs/msg/JointState"
IMU = "sensor_msgs/msg/Imu"
TWIST = "geometry_msgs/msg/Twist"
POINT_STAMPED = "geometry_msgs/msg/PointStamped"
POSE_STAMPED = "geometry_msgs/msg/PoseStamped"
FLOAT64_MULTI_ARRAY = "std_msgs/msg/Float64MultiArray"
FLOAT32_MULTI_ARRAY = "std_msgs/msg/Float32MultiArray"
JOINT_TRAJECTORY = "trajectory_msgs/msg/JointTrajectory"
BOOL = "std_msgs/msg/Bool"
STRING = "std_msgs/msg/String"
DIAGNOSTIC_ARRAY = "diagnostic_msgs/msg/DiagnosticArray"
FRANKA_MOVE_GOAL = "franka_msgs/action/Move_Goal"
FRANKA_GRASP_GOAL = "franka_msgs/action/Grasp_Goal"
FRANKA_GRASP_EPSILON = "franka_msgs/msg/GraspEpsilon"
COMPRESSED_IMAGE = "sensor_msgs/msg/CompressedImage"
UNITREE_LOW_STATE = "unitree_go/msg/LowState"
UNITREE_LOW_CMD = "unitree_go/msg/LowCmd"
MESSAGE_TYPES = (JOINT_STATE, IMU, TWIST, POINT_STAMPED, POSE_STAMPED, FLOAT64_MULTI_ARRAY, FLOAT32_MULTI_ARRAY,
                 JOINT_TRAJECTORY, BOOL, STRING, DIAGNOSTIC_ARRAY)
"""The ROS 2 message types the deploy side sends or receives (the wire-format test covers each)."""

# Robot state (what the robot or its twin publishes).
JOINT_STATES = TopicSpec("joint_states", JOINT_STATE, SENSOR_QOS)
"""Joint positions, velocities, efforts; mapped onto the hardware file's joints by name."""
IMU_TOPIC = TopicSpec("imu", IMU, SENSOR_QOS)
"""Base orientation and angular velocity (legged robots)."""
EE_POSITION = TopicSpec("ee_position", POINT_STAMPED, SENSOR_QOS)
"""End-effector position in the robot base frame (arms whose policy observes `ee_pos`)."""
TWIN_BASE_TWIST = TopicSpec("twin/base_twist", TWIST, SENSOR_QOS)
"""Sim twin only: ground-truth base velocity in the base frame (for evaluation; never used for control)."""

# Operator inputs.
CMD_VEL = TopicSpec("cmd_vel", TWIST, COMMAND_QOS)
"""Velocity command (linear.x, linear.y, angular.z) for legged policies; zeroed after `cmd_vel_timeout_s`."""
TARGET_POSE = TopicSpec("target_pose", POSE_STAMPED, COMMAND_QOS)
"""End-effector target (position used) for reaching policies, robot base frame."""
ESTOP = TopicSpec("estop", BOOL, COMMAND_QOS)
"""True latches ESTOP (damping only) until `reset_estop`; False does not release it. Also a heartbeat: with the
policy node's `estop_timeout_s` > 0, every message (True or False) counts, and none for that long latches ESTOP
(activate refuses until one arrived). Publish at least twice per timeout, e.g. `ros2 topic pub -r 10 /estop
std_msgs/msg/Bool "{data: false}"` from the operator's station.

The deadline is checked by the node itself (robo_rl.deploy.estop_heartbeat), not requested as a DDS deadline or
liveliness QoS: a subscription requesting a finite deadline or lease does not match a publisher that offers none
(request-vs-offer), which is every `ros2 topic pub` and most e-stop bridges, so the e-stop would go deaf."""
OPERATOR = TopicSpec("robo_rl/operator", STRING, COMMAND_QOS)
"""Plain-DDS stand-in for the node's services: one of OPERATOR_REQUESTS as the string."""

# Commands, one per command interface (ros2_control controllers).
COMMAND_TOPICS = {
    "forward_position": TopicSpec("forward_position_controller/commands", FLOAT64_MULTI_ARRAY, COMMAND_QOS),
    "joint_trajectory": TopicSpec("joint_trajectory_controller/joint_trajectory", JOINT_TRAJECTORY, COMMAND_QOS),
    "pd_targets": TopicSpec("pd_targets_controller/commands", FLOAT64_MULTI_ARRAY, COMMAND_QOS),
}
"""Command topic of each command interface:

- forward_position: a ros2_control forward_command_controller on position interfaces; data = q* in the
  hardware file's joint order. The robot's own position loop applies its own gains, so kp / kd / tau are
  not sent: DAMP and ESTOP send the measured pose (the robot holds where it is), not zero stiffness.
  The controller holds the last command forever: the deploy core keeps sending, and stops on its own.
- joint_trajectory: one JointTrajectoryPoint (positions, velocities) reached one control period later.
- pd_targets: Float64MultiArray of shape (5, J), rows PD_TARGET_ROWS, for drivers that take per-joint
  PD targets and gains (the sim twin, low-level motor drivers). Damping is exact here (kp = 0).
"""
COMMAND_INTERFACES = tuple(COMMAND_TOPICS)
PD_TARGET_ROWS = ("q", "dq", "kp", "kd", "tau")
"""Row labels of a pd_targets command (layout.dim[0]); layout.dim[1] is labelled "joints"."""

# Recording and monitoring (published by the policy node / the DDS deploy session).
DIAGNOSTICS = TopicSpec("/diagnostics", DIAGNOSTIC_ARRAY, EVENT_QOS)
"""Loop-period statistics, intervention counters and the state-machine mode, once per diagnostics period."""
OBSERVATION = TopicSpec("~/observation", FLOAT32_MULTI_ARRAY, SENSOR_QOS)
"""The policy input of each POLICY tick (contract order)."""
ACTION = TopicSpec("~/action", FLOAT64_MULTI_ARRAY, SENSOR_QOS)
"""The filtered command of each POLICY tick: pd_targets layout, robot joint order."""
POLICY_STEP = TopicSpec("~/policy_step", FLOAT32_MULTI_ARRAY, SENSOR_QOS)
"""The policy's observation (O,) and raw actions (A,) of each POLICY tick in one message (O + A values, one dimension
labelled "obs+action"; split by the contract's O): what a recorder pairs as `observation.policy` and `action`."""
EPISODE_EVENTS = TopicSpec("~/episode_events", STRING, EVENT_QOS)
"""One JSON object per episode event (start, success, failure, reset, intervention)."""

# The Franka Hand's own node (franka_gripper, named <arm_id>_gripper): actions <namespace>/move and <namespace>/grasp,
# state <namespace>/joint_states (both fingers at width / 2). Plain DDS carries the goals as messages on the topics
# below (the action protocol itself is three services and two topics keyed by goal ids: the rclpy node's business).
GRIPPER_TOPICS = {
    "move": ("move_goal", FRANKA_MOVE_GOAL),
    "grasp": ("grasp_goal", FRANKA_GRASP_GOAL),
    "state": ("joint_states", JOINT_STATE),
}
"""Role -> (name under the gripper's namespace, ROS type) of each gripper topic."""
GRIPPER_ACTIONS = {"move": "move", "grasp": "grasp"}
"""Goal kind -> franka_gripper's action name under its namespace (franka_msgs/action/Move, Grasp)."""


def camera_topic(camera: str) -> TopicSpec:
    """The default topic of camera `camera`'s frames: `<camera>/image/compressed` (image_transport's compressed
    stream; the rosbag export and the recorder name cameras the same way)."""
    return TopicSpec(f"{camera}/image/compressed", COMPRESSED_IMAGE, SENSOR_QOS)


def gripper_topic(namespace: str, role: str) -> TopicSpec:
    """The gripper topic of `role` (GRIPPER_TOPICS) under franka_gripper's `namespace`."""
    name, ros_type = GRIPPER_TOPICS[role]
    return TopicSpec(f"{namespace.rstrip('/')}/{name}", ros_type, SENSOR_QOS if role == "state" else COMMAND_QOS)


# Unitree low-level SDK (plain DDS, no ROS): DDS names are used as they are.
UNITREE_STATE_TOPIC = "rt/lowstate"
UNITREE_COMMAND_TOPIC = "rt/lowcmd"

# ---------------------------------------------------------------------------------------------- services
START_SERVICE = "~/start"
"""std_srvs/Trigger: READY -> POLICY (the only way POLICY starts)."""
STOP_SERVICE = "~/stop"
"""std_srvs/Trigger: -> DAMP."""
RESET_ESTOP_SERVICE = "~/reset_estop"
"""std_srvs/Trigger: ESTOP -> PASSIVE -> RAMP (soft start again; POLICY still needs `~/start`)."""
RESET_SERVICE = "~/reset"
"""std_srvs/Trigger: end the episode and run the reset module (READY / POLICY), or leave DAMP (-> RAMP)."""
OPERATOR_REQUESTS = ("start", "stop", "estop", "reset_estop", "reset")
"""What an operator may ask for: the services above, the e-stop, as words on OPERATOR (and keys in the CLI)."""

# ---------------------------------------------------------------------------------------------- parameters
PARAMETERS = {
    "policy_path": "policies/go2_walk.onnx",
    "hardware_config": "hardware/go2.yaml",
    "command_interface": "",
    "dry_run": True,
    "cmd_vel_timeout_s": 0.5,
    "diagnostics_period_s": 1.0,
    "reset_module": "home",
    "rewards": "",
    "realtime_priority": 50,
    "estop_timeout_s": 0.5,
}
"""Parameters of the policy node and their defaults (see robo_rl.deploy.runtime_config.RuntimeConfig). `dry_run` is
True: `ros2 run` without the launch file sends no command."""
PARAMETER_DESCRIPTIONS = {
    "policy_path": "exported ONNX policy (policies/<name>.onnx); read at configure",
    "hardware_config": "robot description (hardware/<robot>.yaml): joints, limits, gains, topics; fixed at launch",
    "command_interface": "forward_position, joint_trajectory or pd_targets (the ros2 profile with that controller); "
                         "empty: the hardware file's transport.dds (a Go2: unitree lowcmd); fixed at launch",
    "dry_run": "run everything but send no command; read at configure (cleanup, set, configure to change it)",
    "cmd_vel_timeout_s": "a velocity command older than this (s) becomes zero; read at configure",
    "diagnostics_period_s": "period of /diagnostics (s); read at configure",
    "reset_module": "what ~/reset runs: home, random or operator; read at configure",
    "rewards": "reward modules scored every POLICY tick, ';'-separated (goal_distance:sigma=0.05;operator); their "
               "outcome ends episodes and rides on ~/policy_step for the recorder; empty: none; read at configure",
    "realtime_priority": "SCHED_FIFO priority of the control thread (1-99; 0: normal scheduling); read at configure",
    "estop_timeout_s": "e-stop heartbeat deadline (s): no message on estop for this long latches ESTOP and activate "
                       "refuses without one; 0: no heartbeat expected; read at configure",
}
"""What `ros2 param describe` shows for each parameter (the node's ParameterDescriptors)."""
READ_ONLY_PARAMETERS = ("hardware_config", "command_interface")
"""Parameters fixed for the node's life (read-only descriptors): the robot and the controller it talks to are set by
the launch, with the twin or the robot's drivers beside it. The others may change only while unconfigured
(robo_rl.deploy.ros_parameters)."""
LAUNCH_ARGUMENTS = ("policy", "robot", "use_sim", "dry_run", "command_interface", "namespace", "remappings",
                    "estop_timeout_s", "rewards")
"""Launch arguments every launch file declares."""


def parse_remappings(text: str) -> list[tuple[str, str]]:
    """Launch argument `remappings` ("from:=to,from:=to", ROS 2's remapping syntax) as (from, to) pairs.

    Raises:
        ValueError: an entry that is not `from:=to` with both names non-empty (one line naming it).
    """
    pairs = []
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        source, sep, target = (s.strip() for s in entry.partition(":="))
        if not sep or not source or not target or ":=" in target:
            raise ValueError(f"remappings entry {entry!r}: expected from:=to (entries separated by commas)")
        pairs.append((source, target))
    return pairs
