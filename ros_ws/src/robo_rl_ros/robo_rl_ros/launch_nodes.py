"""The node actions every launch file starts (each launch file declares its own arguments and defaults)."""

from __future__ import annotations

from launch.conditions import IfCondition
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import LifecycleNode, Node
from launch_ros.parameter_descriptions import ParameterValue
from launch_ros.substitutions import FindPackageShare

from robo_rl.deploy import ros_interface as names


def policy_and_twin_nodes() -> list:
    """The lifecycle policy node and, when `use_sim` is true, the twin node, from the launch arguments
    policy, robot, use_sim, dry_run and command_interface. Both read the same hardware file (`robot`)."""
    robot = LaunchConfiguration("robot")
    interface = LaunchConfiguration("command_interface")
    config = PathJoinSubstitution([FindPackageShare(names.PACKAGE), "config"])
    return [
        LifecycleNode(
            package=names.PACKAGE, executable="policy_node", name=names.POLICY_NODE, namespace="", output="screen",
            parameters=[PathJoinSubstitution([config, "policy_node.yaml"]), {
                "policy_path": LaunchConfiguration("policy"),
                "hardware_config": robot,
                "command_interface": interface,
                "dry_run": ParameterValue(LaunchConfiguration("dry_run"), value_type=bool),
            }],
        ),
        Node(
            package=names.PACKAGE, executable="sim_robot_node", name=names.SIM_ROBOT_NODE, output="screen",
            condition=IfCondition(LaunchConfiguration("use_sim")),
            parameters=[PathJoinSubstitution([config, "sim_robot_node.yaml"]),
                        {"hardware_config": robot, "command_interface": interface}],
        ),
    ]
