"""The policy node against the MuJoCo twin node: the whole ROS 2 path with no robot.

    ros2 launch robo_rl_ros sim_twin.launch.py robot:=hardware/panda.yaml policy:=policies/panda_reach.onnx \
        dry_run:=false
    ros2 topic pub -r 10 /estop std_msgs/msg/Bool "{data: false}"   # the e-stop heartbeat

The twin accepts the command interface the policy node sends (pd_targets by default: exact damping). dry_run defaults
to true here too (nothing moves until dry_run:=false). Configure and activate /robo_rl_policy, then call
/robo_rl_policy/start once READY (test/test_sim_twin_launch.py does).
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from robo_rl_ros.launch_nodes import policy_and_twin_nodes


def generate_launch_description() -> LaunchDescription:
    return LaunchDescription([
        DeclareLaunchArgument("policy", default_value="policies/panda_reach.onnx", description="exported ONNX policy"),
        DeclareLaunchArgument("robot", default_value="hardware/panda.yaml", description="robo_rl hardware file"),
        DeclareLaunchArgument("use_sim", default_value="true", description="start the MuJoCo twin node"),
        DeclareLaunchArgument("dry_run", default_value="true", description="run everything, send no command"),
        DeclareLaunchArgument("command_interface", default_value="pd_targets",
                              description="forward_position, joint_trajectory or pd_targets (what the twin takes)"),
        DeclareLaunchArgument("rewards", default_value="",
                              description="policy node: reward modules, ';'-separated (goal_distance:sigma=0.05); "
                                          "their success or failure ends an episode; empty: none"),
        DeclareLaunchArgument("estop_timeout_s", default_value="0.5",
                              description="e-stop heartbeat deadline (s); 0: none expected"),
        DeclareLaunchArgument("namespace", default_value="", description="namespace of the nodes"),
        DeclareLaunchArgument("remappings", default_value="", description="from:=to,from:=to for every node"),
        *policy_and_twin_nodes(),
    ])
