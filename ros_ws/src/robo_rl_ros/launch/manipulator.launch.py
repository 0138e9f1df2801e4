"""A manipulator (default: the Franka Panda): the robo_rl policy node, and with use_sim:=true the MuJoCo twin.

    ros2 launch robo_rl_ros manipulator.launch.py robot:=hardware/panda.yaml policy:=policies/panda_reach.onnx \
        dry_run:=true

Joint names, limits, gains and topics come from the hardware file (`robot`), never from here. `command_interface`
empty (the default) takes the hardware file's: for the Panda `joint_trajectory`, franka_ros2's
joint_trajectory_controller (remap its topic with remappings:=joint_trajectory_controller/joint_trajectory:=
fr3_arm_controller/joint_trajectory for the MoveIt configuration's controller). dry_run defaults to true: the node then
runs everything but sends no command. An e-stop heartbeat is expected (`estop_timeout_s`, 0 switches it off). The node
starts unconfigured: configure and activate it (ros2 lifecycle set /robo_rl_policy configure, then activate), then
call /robo_rl_policy/start once it reports READY on /diagnostics.
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from robo_rl_ros.launch_nodes import policy_and_twin_nodes


def generate_launch_description() -> LaunchDescription:
    return LaunchDescription([
        DeclareLaunchArgument("policy", default_value="policies/panda_reach.onnx", description="exported ONNX policy"),
        DeclareLaunchArgument("robot", default_value="hardware/panda.yaml", description="robo_rl hardware file"),
        DeclareLaunchArgument("use_sim", default_value="false", description="start the MuJoCo twin node"),
        DeclareLaunchArgument("dry_run", default_value="true", description="run everything, send no command"),
        DeclareLaunchArgument("command_interface", default_value="",
                              description="empty: the hardware file's (Panda: joint_trajectory); forward_position, "
                                          "joint_trajectory or pd_targets"),
        DeclareLaunchArgument("rewards", default_value="",
                              description="policy node: reward modules, ';'-separated (goal_distance:sigma=0.05); "
                                          "their success or failure ends an episode; empty: none"),
        DeclareLaunchArgument("estop_timeout_s", default_value="0.5",
                              description="e-stop heartbeat deadline (s); 0: none expected"),
        DeclareLaunchArgument("namespace", default_value="", description="namespace of the nodes"),
        DeclareLaunchArgument("remappings", default_value="", description="from:=to,from:=to for every node"),
        *policy_and_twin_nodes(),
    ])
