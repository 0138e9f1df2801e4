"""Where the ROS 2 node finds the robot: the hardware file's transport.dds section (profile, namespace, topic
overrides) as ROS 2 names, the same section the plain-DDS path reads, and the launch files' remapping syntax."""

import pytest

from robo_rl.deploy import ros_interface as names
from robo_rl.deploy.dds_settings import DdsSettings, for_ros_node
from robo_rl.deploy.hardware import load_hardware
from tests.conftest import REPO

GO2 = load_hardware(REPO / "hardware" / "go2.yaml")
PANDA = load_hardware(REPO / "hardware" / "panda.yaml")


def test_without_a_namespace_names_stay_relative_and_match_the_dds_path():
    s = DdsSettings(command_interface="joint_trajectory")
    ros = s.ros_topics()
    assert ros == {"joints": "joint_states", "imu": "imu", "ee": "ee_position",
                   "command": "joint_trajectory_controller/joint_trajectory"}  # resolve in the node's namespace
    dds = s.state_topics()
    assert dds["joints"] == names.dds_topic_name(ros["joints"]) and s.command_topic_name() == names.dds_topic_name(
        ros["command"])


def test_a_namespace_in_the_hardware_file_makes_the_robots_topics_absolute():
    s = DdsSettings(namespace="/arm", state_topic="/franka/joint_states", ee_topic="tcp",
                    command_interface="pd_targets")
    assert s.ros_topics() == {"joints": "/franka/joint_states", "imu": "/arm/imu", "ee": "/arm/tcp",
                              "command": "/arm/pd_targets_controller/commands"}
    assert s.state_topics()["ee"] == "rt/arm/tcp"  # the DDS path: the same names


def test_unitree_profile_uses_unitree_ros2s_names_and_an_explicit_interface_selects_ros2():
    s = for_ros_node(GO2, None)
    assert s.profile == "unitree" and s.ros_topics() == {"joints": "/lowstate", "command": "/lowcmd"}
    forced = for_ros_node(GO2, "pd_targets")  # the twin node, or a ros2_control driver for the Go2
    assert forced.profile == "ros2" and forced.state_topic is None and forced.command_topic is None
    assert forced.ros_topics()["joints"] == "joint_states"
    assert for_ros_node(PANDA, None).command_interface == "joint_trajectory"  # what franka_ros2 ships
    with pytest.raises(ValueError, match="a ROS 2 node reaches only topics named 'rt/<name>'"):
        names.ros_topic_name("lowstate")


def test_remappings_syntax():
    assert names.parse_remappings("") == []
    assert names.parse_remappings("joint_states:=/franka/joint_states, estop:=/safety/estop") == [
        ("joint_states", "/franka/joint_states"), ("estop", "/safety/estop")]
    for bad in ("joint_states=/x", ":=/x", "a:=", "a:=b:=c"):
        with pytest.raises(ValueError, match="remappings entry .*: expected from:=to"):
            names.parse_remappings(bad)
