"""Record demonstrations from ROS 2 topics into a LeRobot v3.0 dataset (and optionally a rosbag2 bag).

    ros2 launch robo_rl_ros record_demos.launch.py robot:=hardware/panda.yaml dataset:=demos/panda \\
        policy:=policies/panda_reach.onnx use_policy:=true use_sim:=true dry_run:=false

Starts demo_recorder_node; with use_policy:=true also the lifecycle policy node and (use_sim:=true) the
MuJoCo twin, as sim_twin.launch.py does. Episodes follow the policy node's episode events.
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, GroupAction
from launch.conditions import IfCondition
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node
from launch_ros.parameter_descriptions import ParameterValue
from robo_rl_ros.launch_nodes import policy_and_twin_nodes


def generate_launch_description() -> LaunchDescription:
    return LaunchDescription([
        DeclareLaunchArgument("robot", default_value="hardware/panda.yaml", description="robo_rl hardware file"),
        DeclareLaunchArgument("dataset", default_value="demos/ros", description="new dataset folder"),
        DeclareLaunchArgument("bag", default_value="", description="also write a rosbag2 MCAP bag here"),
        DeclareLaunchArgument("rate_hz", default_value="50.0", description="frames per second"),
        DeclareLaunchArgument("command_interface", default_value="pd_targets",
                              description="forward_position, joint_trajectory or pd_targets"),
        DeclareLaunchArgument("use_policy", default_value="false", description="start the policy node too"),
        DeclareLaunchArgument("policy", default_value="policies/panda_reach.onnx", description="exported ONNX policy"),
        DeclareLaunchArgument("use_sim", default_value="true", description="with use_policy: the MuJoCo twin too"),
        DeclareLaunchArgument("dry_run", default_value="true",
                              description="policy node: send no command (on a real robot the first launch sends none)"),
        Node(
            package="robo_rl_ros", executable="demo_recorder_node", name="robo_rl_demo_recorder", output="screen",
            parameters=[{
                "hardware_config": LaunchConfiguration("robot"),
                "dataset_path": LaunchConfiguration("dataset"),
                "bag_path": LaunchConfiguration("bag"),
                "rate_hz": ParameterValue(LaunchConfiguration("rate_hz"), value_type=float),
                "command_interface": LaunchConfiguration("command_interface"),
            }],
        ),
        GroupAction(policy_and_twin_nodes(), condition=IfCondition(LaunchConfiguration("use_policy"))),
    ])
