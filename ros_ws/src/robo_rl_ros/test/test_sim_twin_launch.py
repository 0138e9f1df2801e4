"""launch_testing: sim_twin.launch.py brings up the policy node and the twin; after configure, activate and
~/start, commands flow to the twin; an e-stop makes them damping-only (kp = 0) and no stiff command follows; a lost
e-stop heartbeat does the same; every process exits 0.

Needs a sourced ROS 2 (Humble or Jazzy) workspace with robo_rl installed (ros_ws/run_tests.sh, or the Dockerfile):

    cd ros_ws && colcon build --packages-select robo_rl_ros && source install/setup.bash
    colcon test --packages-select robo_rl_ros && colcon test-result --verbose

Without ROS 2 (no rclpy) the module is skipped: everything it drives is tested without ROS in robo_rl's
tests (test_deploy_runtime.py, test_dds_transport.py, tests/ros_ws).
"""

import os
import unittest

import pytest

rclpy = pytest.importorskip("rclpy", reason="needs ROS 2 (rclpy): run with `colcon test` in a sourced ROS 2 "
                                            "workspace")
launch_testing = pytest.importorskip("launch_testing", reason="needs ROS 2's launch_testing")

from ament_index_python.packages import get_package_share_directory  # noqa: E402
from launch import LaunchDescription  # noqa: E402
from launch.actions import IncludeLaunchDescription  # noqa: E402
from launch.launch_description_sources import PythonLaunchDescriptionSource  # noqa: E402
from launch_helpers import Operator  # noqa: E402
from launch_testing.actions import ReadyToTest  # noqa: E402
from launch_testing.asserts import assertExitCodes  # noqa: E402
from robo_rl_ros.messages import CLASSES  # noqa: E402

from robo_rl.deploy import ros_interface as names  # noqa: E402


@pytest.mark.launch_test
def generate_test_description():
    launch_file = os.path.join(get_package_share_directory(names.PACKAGE), "launch", "sim_twin.launch.py")
    return LaunchDescription([
        IncludeLaunchDescription(PythonLaunchDescriptionSource(launch_file),
                                 launch_arguments={"command_interface": "pd_targets", "dry_run": "false"}.items()),
        ReadyToTest(),
    ])


class TestSimTwin(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        rclpy.init()
        cls.node = rclpy.create_node("robo_rl_launch_test")
        cls.operator = Operator(cls.node)

    @classmethod
    def tearDownClass(cls):
        cls.operator.close()
        cls.node.destroy_node()
        rclpy.shutdown()

    def test_start_commands_flow_and_estop_stops_them(self):
        op = self.operator
        op.bring_up_to_policy()
        n = len(op.commands)
        self.assertTrue(op.kp_rows()[-1].any())  # policy commands flow (stiff)
        op.estop.publish(CLASSES[names.BOOL](data=True))
        op.spin_until(lambda: op.mode() == "ESTOP", 10.0, "ESTOP")
        m = len(op.commands)
        op.spin_until(lambda: len(op.commands) > m + 10, 5.0, "commands after the e-stop")
        after = op.kp_rows()[n:]
        first_damping = next(i for i, row in enumerate(after) if not row.any())
        self.assertTrue(all(not row.any() for row in after[first_damping:]))  # nothing stiff after the e-stop
        self.assertFalse(op.trigger("start"))  # latched
        # A lost heartbeat: reset_estop, ramp to READY, then the operator's station goes silent.
        self.assertTrue(op.trigger("reset_estop"))
        op.spin_until(lambda: op.mode() == "READY", 30.0, "READY again")
        op.close()
        op.spin_until(lambda: op.mode() == "ESTOP", 5.0, "ESTOP after the heartbeat stopped")
        self.assertFalse(op.trigger("reset_estop"))  # refused while the heartbeat is missing


@launch_testing.post_shutdown_test()
class TestExit(unittest.TestCase):
    def test_every_node_exits_0(self, proc_info):
        assertExitCodes(proc_info)
