"""launch_testing: sim_twin.launch.py brings up the policy node and the twin; after configure, activate and
~/start, commands flow to the twin; an e-stop makes them damping-only (kp = 0) and no stiff command follows.

Needs a sourced ROS 2 (Humble or Jazzy) workspace with robo_rl installed (pip install "robo_rl[train]"):

    cd ros_ws && colcon build --packages-select robo_rl_ros && source install/setup.bash
    colcon test --packages-select robo_rl_ros && colcon test-result --verbose

Without ROS 2 (no rclpy) the module is skipped: everything it drives is tested without ROS in robo_rl's
tests (test_deploy_runtime.py, test_dds_transport.py).
"""

import os
import time
import unittest

import pytest

rclpy = pytest.importorskip("rclpy", reason="needs ROS 2 (rclpy): run with `colcon test` in a sourced ROS 2 "
                                            "workspace")
launch_testing = pytest.importorskip("launch_testing", reason="needs ROS 2's launch_testing")

from ament_index_python.packages import get_package_share_directory  # noqa: E402
from launch import LaunchDescription  # noqa: E402
from launch.actions import IncludeLaunchDescription  # noqa: E402
from launch.launch_description_sources import PythonLaunchDescriptionSource  # noqa: E402
from lifecycle_msgs.msg import Transition  # noqa: E402
from lifecycle_msgs.srv import ChangeState  # noqa: E402
from robo_rl_ros.messages import CLASSES, qos  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402

from robo_rl.deploy import ros_interface as names  # noqa: E402
from robo_rl.deploy import ros_messages as rm  # noqa: E402

COMMANDS = names.COMMAND_TOPICS["pd_targets"]


@pytest.mark.launch_test
def generate_test_description():
    launch_file = os.path.join(get_package_share_directory(names.PACKAGE), "launch", "sim_twin.launch.py")
    return LaunchDescription([
        IncludeLaunchDescription(PythonLaunchDescriptionSource(launch_file),
                                 launch_arguments={"command_interface": "pd_targets"}.items()),
        launch_testing.actions.ReadyToTest(),
    ])


class TestSimTwin(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        rclpy.init()
        cls.node = rclpy.create_node("robo_rl_launch_test")

    @classmethod
    def tearDownClass(cls):
        cls.node.destroy_node()
        rclpy.shutdown()

    def _spin_until(self, condition, timeout: float, what: str):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            rclpy.spin_once(self.node, timeout_sec=0.05)
            if condition():
                return
        self.fail(f"timed out waiting for {what}")

    def _call(self, srv_type, name: str, request):
        client = self.node.create_client(srv_type, name)
        self.assertTrue(client.wait_for_service(timeout_sec=30.0), name)
        future = client.call_async(request)
        self._spin_until(future.done, 30.0, name)
        return future.result()

    def test_start_commands_flow_and_estop_stops_them(self):
        commands, modes = [], []
        self.node.create_subscription(CLASSES[COMMANDS.ros_type], COMMANDS.name, commands.append, qos(COMMANDS.qos))
        self.node.create_subscription(CLASSES[names.DIAGNOSTIC_ARRAY], names.DIAGNOSTICS.name,
                                      lambda m: modes.append(rm.read_diagnostics(m).get("mode")),
                                      qos(names.DIAGNOSTICS.qos))
        estop = self.node.create_publisher(CLASSES[names.BOOL], names.ESTOP.name, qos(names.ESTOP.qos))
        node = f"/{names.POLICY_NODE}"
        for transition in (Transition.TRANSITION_CONFIGURE, Transition.TRANSITION_ACTIVATE):
            result = self._call(ChangeState, f"{node}/change_state",
                                ChangeState.Request(transition=Transition(id=transition)))
            self.assertTrue(result.success, transition)
        self._spin_until(lambda: modes and modes[-1] == "READY", 30.0, "READY")
        self.assertTrue(self._call(Trigger, f"{node}/start", Trigger.Request()).success)
        self._spin_until(lambda: modes and modes[-1] == "POLICY", 10.0, "POLICY")
        n = len(commands)
        self._spin_until(lambda: len(commands) > n + 25, 5.0, "policy commands")
        estop.publish(CLASSES[names.BOOL](data=True))
        self._spin_until(lambda: modes and modes[-1] == "ESTOP", 10.0, "ESTOP")
        m = len(commands)
        self._spin_until(lambda: len(commands) > m + 10, 5.0, "commands after the e-stop")
        kp = [rm.read_multi_array(c)[1][2] for c in commands]  # row 2 of pd_targets: kp
        first_damping = next(i for i, row in enumerate(kp) if not row.any())
        self.assertGreater(first_damping, n)  # policy commands flowed first
        self.assertTrue(all(not row.any() for row in kp[first_damping:]))  # nothing stiff after the e-stop
        self.assertFalse(self._call(Trigger, f"{node}/start", Trigger.Request()).success)  # latched
