"""launch_testing: record_demos.launch.py with the policy node and the twin records POLICY ticks into a dataset.

Configure, activate and start the policy node (with a goal_distance reward module), let it run, stop it; after
shutdown the recorder's dataset holds the episode's joint states, the policy's observations and raw actions, the
commands and each frame's outcome (the policy node's episode events start it).
Needs a sourced ROS 2 workspace with robo_rl installed (pip install "robo_rl[train,demos]"); run with
`colcon test`. Without ROS 2 the
module is skipped: its logic is tested without ROS (tests/demos/test_topic_recorder.py).
"""

import os
import tempfile
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
from launch_testing.actions import ReadyToTest  # noqa: E402
from lifecycle_msgs.msg import Transition  # noqa: E402
from lifecycle_msgs.srv import ChangeState  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402

from robo_rl.demos.dataset_reader import DatasetReader  # noqa: E402
from robo_rl.deploy import ros_interface as names  # noqa: E402

DATASET = os.path.join(tempfile.mkdtemp(), "ros_demos")


@pytest.mark.launch_test
def generate_test_description():
    launch_file = os.path.join(get_package_share_directory(names.PACKAGE), "launch", "record_demos.launch.py")
    return LaunchDescription([
        IncludeLaunchDescription(PythonLaunchDescriptionSource(launch_file), launch_arguments={
            "dataset": DATASET, "use_policy": "true", "use_sim": "true", "dry_run": "false",
            "estop_timeout_s": "0",  # this test is about recording: no e-stop heartbeat expected
            "rewards": "goal_distance:threshold=0.001"}.items()),  # scored frames; a success this tight ends nothing
        ReadyToTest(),
    ])


class TestRecordDemos(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        rclpy.init()
        cls.node = rclpy.create_node("robo_rl_record_test")

    @classmethod
    def tearDownClass(cls):
        cls.node.destroy_node()
        rclpy.shutdown()

    def _call(self, srv_type, name: str, request):
        client = self.node.create_client(srv_type, name)
        self.assertTrue(client.wait_for_service(timeout_sec=30.0), name)
        future = client.call_async(request)
        end = time.monotonic() + 30.0
        while not future.done() and time.monotonic() < end:
            rclpy.spin_once(self.node, timeout_sec=0.05)
        return future.result()

    def test_policy_ticks_are_recorded(self):
        node = f"/{names.POLICY_NODE}"
        for transition in (Transition.TRANSITION_CONFIGURE, Transition.TRANSITION_ACTIVATE):
            result = self._call(ChangeState, f"{node}/change_state",
                                ChangeState.Request(transition=Transition(id=transition)))
            self.assertTrue(result.success, transition)
        end = time.monotonic() + 30.0
        while time.monotonic() < end and not self._call(Trigger, f"{node}/start", Trigger.Request()).success:
            time.sleep(0.5)  # READY comes after the soft start
        time.sleep(3.0)
        self.assertTrue(self._call(Trigger, f"{node}/stop", Trigger.Request()).success)


@launch_testing.post_shutdown_test()
class TestDatasetAfterShutdown(unittest.TestCase):
    def test_the_dataset_holds_the_recorded_ticks(self):
        reader = DatasetReader(DATASET)  # the recorder commits its open episode when it shuts down
        self.assertGreaterEqual(reader.num_episodes, 1)
        self.assertGreater(reader.num_frames, 100)  # ~3 s of POLICY at 50 Hz
        # with the policy: its observation and raw actions, the joint targets as command.joint_position
        self.assertEqual(reader.features["command.joint_position"]["names"],
                         reader.features["observation.state"]["names"])
        self.assertEqual(reader.features["observation.policy"]["shape"], [27])  # policies/panda_reach.onnx
        episode = reader.episode(0, images=False)  # each frame scored by the next policy step's outcome
        self.assertTrue(((episode["next.reward"] > 0) & (episode["next.reward"] <= 1)).all())
        self.assertFalse(episode["next.done"].any())
