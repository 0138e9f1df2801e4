"""A legged robot (default: the Unitree Go2): the robo_rl policy node, and with use_sim:=true the MuJoCo twin.

    ros2 launch robo_rl_ros legged.launch.py robot:=hardware/go2.yaml policy:=policies/go2_walk.onnx dry_run:=true

Joint names, limits and gains come from the hardware file (`robot`), never from here. dry_run defaults to
true on a real robot: the node then runs everything but sends no command. The node starts unconfigured:
configure and activate it (ros2 lifecycle set /robo_rl_policy configure, then activate), then call
/robo_rl_policy/start once it reports READY on /diagnostics.
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from robo_rl_ros.launch_nodes import policy_and_twin_nodes


def generate_launch_description() -> LaunchDescription:
    return LaunchDescription([
        DeclareLaunchArgument("policy", default_value="policies/go2_walk.onnx", description="exported ONNX policy"),
        DeclareLaunchArgument("robot", default_value="hardware/go2.yaml", description="robo_rl hardware file"),
        DeclareLaunchArgument("use_sim", default_value="false", description="start the MuJoCo twin node"),
        DeclareLaunchArgument("dry_run", default_value="true", description="run everything, send no command"),
        DeclareLaunchArgument("command_interface", default_value="pd_targets",
                              description="forward_position, joint_trajectory or pd_targets"),
        *policy_and_twin_nodes(),
    ])
