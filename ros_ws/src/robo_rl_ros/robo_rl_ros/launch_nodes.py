"""The node actions the launch files start (each launch file declares its own arguments and defaults).

Every node runs in the launch argument `namespace` (its relative topics, `~/` topics and services resolve there; the
robot's topics follow the hardware file's `transport.dds`, see DdsSettings.ros_topics) and takes the launch argument
`remappings` ("from:=to,from:=to", ROS 2's remapping syntax), applied to the policy node and the twin alike so they
still find each other.
"""

from __future__ import annotations

from launch.actions import OpaqueFunction
from launch.conditions import IfCondition
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import LifecycleNode, Node
from launch_ros.parameter_descriptions import ParameterValue
from launch_ros.substitutions import FindPackageShare

from robo_rl.deploy import ros_interface as names


def policy_and_twin_nodes() -> list:
    """The lifecycle policy node and, when `use_sim` is true, the twin node, from the launch arguments policy, robot,
    use_sim, dry_run, command_interface, estop_timeout_s, namespace, remappings and rewards. Both read
    the same hardware file (`robot`)."""
    return [OpaqueFunction(function=_policy_and_twin)]


def recorder_node() -> list:
    """demo_recorder_node from the launch arguments robot, dataset, bag, rate_hz, command_interface, camera_topics,
    namespace and remappings; with use_policy, the policy's ~/policy_step too (policy), scored when `rewards` is set."""
    return [OpaqueFunction(function=_recorder)]


def _placement(context) -> dict:
    """namespace and remappings of every node, from the launch arguments (a bad `remappings` fails the launch with one
    line)."""
    return {"namespace": LaunchConfiguration("namespace").perform(context),
            "remappings": names.parse_remappings(LaunchConfiguration("remappings").perform(context))}


def _text(argument: str) -> ParameterValue:
    """A launch argument as a string parameter (an empty one stays "", not YAML's null)."""
    return ParameterValue(LaunchConfiguration(argument), value_type=str)


def _policy_and_twin(context) -> list:
    robot = _text("robot")
    interface = _text("command_interface")
    config = PathJoinSubstitution([FindPackageShare(names.PACKAGE), "config"])
    place = _placement(context)
    return [
        LifecycleNode(
            package=names.PACKAGE, executable="policy_node", name=names.POLICY_NODE, output="screen", **place,
            parameters=[PathJoinSubstitution([config, "policy_node.yaml"]), {
                "policy_path": _text("policy"),
                "hardware_config": robot,
                "command_interface": interface,
                "dry_run": ParameterValue(LaunchConfiguration("dry_run"), value_type=bool),
                "estop_timeout_s": ParameterValue(LaunchConfiguration("estop_timeout_s"), value_type=float),
                "rewards": _text("rewards"),
            }],
        ),
        Node(
            package=names.PACKAGE, executable="sim_robot_node", name=names.SIM_ROBOT_NODE, output="screen", **place,
            condition=IfCondition(LaunchConfiguration("use_sim")),
            parameters=[PathJoinSubstitution([config, "sim_robot_node.yaml"]),
                        {"hardware_config": robot, "command_interface": interface}],
        ),
    ]


def _recorder(context) -> list:
    # with the policy node started here, its ~/policy_step is recorded too (observation.policy, action), and with its
    # reward modules (`rewards`) each step's outcome (next.reward, next.done, ...)
    with_policy = LaunchConfiguration("use_policy").perform(context).strip().lower() in ("true", "1", "yes")
    scored = with_policy and bool(LaunchConfiguration("rewards").perform(context).strip())
    return [Node(
        package=names.PACKAGE, executable="demo_recorder_node", name="robo_rl_demo_recorder", output="screen",
        **_placement(context),
        parameters=[{
            "hardware_config": _text("robot"),
            "dataset_path": _text("dataset"),
            "bag_path": _text("bag"),
            "rate_hz": ParameterValue(LaunchConfiguration("rate_hz"), value_type=float),
            "command_interface": _text("command_interface"),
            "camera_topics": _text("camera_topics"),
            "policy_path": LaunchConfiguration("policy").perform(context) if with_policy else "",
            "record_rewards": scored,
        }],
    )]
