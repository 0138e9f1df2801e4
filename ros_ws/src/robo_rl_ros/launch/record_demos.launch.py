"""Record demonstrations from ROS 2 topics into a LeRobot v3.0 dataset (and optionally a rosbag2 bag).

    ros2 launch robo_rl_ros record_demos.launch.py robot:=hardware/panda.yaml dataset:=demos/panda \\
        camera_topics:=/camera/color/image_raw/compressed,/wrist_camera/image_raw/compressed \\
        policy:=policies/panda_reach.onnx use_policy:=true use_sim:=true dry_run:=false \\
        rewards:="goal_distance:sigma=0.05"

Starts demo_recorder_node; with use_policy:=true also the lifecycle policy node and (use_sim:=true) the
MuJoCo twin, as sim_twin.launch.py does, and the recorder records the policy's observations and raw actions
(observation.policy, action) beside the commands (command.joint_position); with rewards:=SPECS the policy node scores
every tick with those reward modules and each frame carries the outcome (next.reward, next.done, next.terminated,
next.success), so RLPD takes the dataset as demonstrations. Episodes follow the policy node's episode events.
Each camera topic (sensor_msgs/CompressedImage) becomes the camera named by its path without the image suffixes
(camera_color, wrist_camera).
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, GroupAction
from launch.conditions import IfCondition
from launch.substitutions import LaunchConfiguration
from robo_rl_ros.launch_nodes import policy_and_twin_nodes, recorder_node


def generate_launch_description() -> LaunchDescription:
    return LaunchDescription([
        DeclareLaunchArgument("robot", default_value="hardware/panda.yaml", description="robo_rl hardware file"),
        DeclareLaunchArgument("dataset", default_value="demos/ros", description="new dataset folder"),
        DeclareLaunchArgument("bag", default_value="", description="also write a rosbag2 MCAP bag here"),
        DeclareLaunchArgument("rate_hz", default_value="50.0", description="frames per second"),
        DeclareLaunchArgument("camera_topics", default_value="",
                              description="sensor_msgs/CompressedImage topics, comma-separated"),
        DeclareLaunchArgument("command_interface", default_value="pd_targets",
                              description="forward_position, joint_trajectory or pd_targets; empty: the hardware "
                                          "file's"),
        DeclareLaunchArgument("use_policy", default_value="false", description="start the policy node too"),
        DeclareLaunchArgument("policy", default_value="policies/panda_reach.onnx", description="exported ONNX policy"),
        DeclareLaunchArgument("use_sim", default_value="true", description="with use_policy: the MuJoCo twin too"),
        DeclareLaunchArgument("dry_run", default_value="true",
                              description="policy node: send no command (on a real robot the first launch sends none)"),
        DeclareLaunchArgument("rewards", default_value="",
                              description="with use_policy: the policy node's reward modules, ';'-separated "
                                          "(goal_distance:sigma=0.05); each frame then carries its outcome"),
        DeclareLaunchArgument("estop_timeout_s", default_value="0.5",
                              description="policy node: e-stop heartbeat deadline (s); 0: none expected"),
        DeclareLaunchArgument("namespace", default_value="", description="namespace of the nodes"),
        DeclareLaunchArgument("remappings", default_value="", description="from:=to,from:=to for every node"),
        *recorder_node(),
        GroupAction(policy_and_twin_nodes(), condition=IfCondition(LaunchConfiguration("use_policy"))),
    ])
