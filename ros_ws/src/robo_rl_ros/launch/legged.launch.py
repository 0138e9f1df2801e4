"""A legged robot (default: the Unitree Go2): the robo_rl policy node, and with use_sim:=true the MuJoCo twin.

    ros2 launch robo_rl_ros legged.launch.py robot:=hardware/go2.yaml policy:=policies/go2_walk.onnx dry_run:=true

Joint names, limits, gains and topics come from the hardware file (`robot`), never from here. `command_interface`
empty (the default) takes the hardware file's: for the Go2 unitree_ros2's lowstate / lowcmd (unitree_go messages, CRC,
the sport mode released through the motion switcher before the first command). Against the twin node pass
`use_sim:=true command_interface:=pd_targets` (or rehearse the Go2's own topics with `robo-rl twin --transport dds`).
dry_run defaults to true: the node then runs everything but sends no command. An e-stop heartbeat is expected
(`estop_timeout_s`, 0 switches it off): publish std_msgs/Bool false on estop at least twice per timeout. The node
starts unconfigured: configure and activate it (ros2 lifecycle set /robo_rl_policy configure, then activate), then
call /robo_rl_policy/start once it reports READY on /diagnostics. `namespace` and `remappings` ("from:=to,...") place
the nodes.
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
        DeclareLaunchArgument("command_interface", default_value="",
                              description="empty: the hardware file's (Go2: unitree lowcmd); forward_position, "
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
