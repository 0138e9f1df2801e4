"""launch_testing: SIGINT (Ctrl-C, or `ros2 launch` stopping) while the policy drives the twin: the policy node
sends one last damping command (kp = 0) on a live context, then exits 0 (robo_rl.deploy.shutdown's order).

Needs a sourced ROS 2 (Humble or Jazzy) workspace with robo_rl installed (ros_ws/run_tests.sh, or the Dockerfile).
Without ROS 2 (no rclpy) the module is skipped: the same order is tested without ROS in tests/deploy/test_shutdown.py
and tests/ros_ws/test_nodes_without_ros.py.
"""

import os
import signal
import unittest

import pytest

rclpy = pytest.importorskip("rclpy", reason="needs ROS 2 (rclpy): run with `colcon test` in a sourced ROS 2 "
                                            "workspace")
launch_testing = pytest.importorskip("launch_testing", reason="needs ROS 2's launch_testing")

from ament_index_python.packages import get_package_share_directory  # noqa: E402
from launch import LaunchDescription  # noqa: E402
from launch.actions import IncludeLaunchDescription  # noqa: E402
from launch.launch_description_sources import PythonLaunchDescriptionSource  # noqa: E402
from launch_helpers import Operator, child_pid  # noqa: E402
from launch_testing.actions import ReadyToTest  # noqa: E402
from launch_testing.asserts import assertExitCodes  # noqa: E402

from robo_rl.deploy import ros_interface as names  # noqa: E402


@pytest.mark.launch_test
def generate_test_description():
    launch_file = os.path.join(get_package_share_directory(names.PACKAGE), "launch", "sim_twin.launch.py")
    return LaunchDescription([
        IncludeLaunchDescription(PythonLaunchDescriptionSource(launch_file),
                                 launch_arguments={"command_interface": "pd_targets", "dry_run": "false"}.items()),
        ReadyToTest(),
    ])


class TestSigint(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        rclpy.init()
        cls.node = rclpy.create_node("robo_rl_sigint_test")
        cls.operator = Operator(cls.node)

    @classmethod
    def tearDownClass(cls):
        cls.operator.close()
        cls.node.destroy_node()
        rclpy.shutdown()

    def test_sigint_sends_the_last_damping_command(self, proc_info):
        op = self.operator
        op.bring_up_to_policy()
        self.assertTrue(op.kp_rows()[-1].any())  # stiff: the policy drives the twin
        n = len(op.commands)
        os.kill(child_pid("policy_node"), signal.SIGINT)
        proc_info.assertWaitForShutdown(process="policy_node", timeout=10)
        op.spin_for(1.0)  # what was on its way
        self.assertGreater(len(op.commands), n)
        self.assertFalse(op.kp_rows()[-1].any())  # the last command heard is the damping command


@launch_testing.post_shutdown_test()
class TestExit(unittest.TestCase):
    def test_every_node_exits_0(self, proc_info):
        assertExitCodes(proc_info)  # the policy node after SIGINT too
