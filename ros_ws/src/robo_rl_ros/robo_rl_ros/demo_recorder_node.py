"""demo_recorder_node: record a robot's topics into a LeRobot v3.0 dataset at a fixed rate, never blocking.

Subscribes to the robot's joint states and command topic (named by the hardware file's `transport.dds`, as the policy
node finds them; `command_interface` empty = the file's), each camera's sensor_msgs/CompressedImage topic and the policy
node's episode events; a timer at `rate_hz` samples the newest values into the dataset
(robo_rl.demos.topic_recorder has the logic, tested without ROS). With `bag_path` set, every subscribed message is
also written, as received (serialized), into a rosbag2 bag (MCAP) through `rosbags`. Dropped frames are counted in
the log line printed every few seconds and at shutdown. Parameters: hardware_config, dataset_path, rate_hz,
command_interface, camera_topics ("topic,topic"; camera name = the topic path without its image suffixes,
/camera/color/image_raw/compressed -> camera_color), image_size, use_episode_events, task, bag_path, policy_path (the
deployed policy: its ~/policy_step is recorded as observation.policy and action, the commands as
command.joint_position, so BC trains on the dataset), record_rewards (the policy node runs reward modules, parameter
`rewards`: one frame per policy step, with the outcome its next step carries as next.reward, next.done,
next.terminated and next.success; needs policy_path).

Threads (MultiThreadedExecutor, messages.run_node): the sampling timer has a callback group of its own, so decoding
images (a reentrant group: cameras in parallel) and writing the bag (an exclusive group: one writer) never delay a
frame; joint states, commands and events share a third group.
"""

from __future__ import annotations

import sys
import threading

import numpy as np
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.node import Node
from sensor_msgs.msg import CompressedImage

from robo_rl.core.assets import find_asset
from robo_rl.demos.dataset_writer import DatasetWriter
from robo_rl.demos.recorder import policy_dims, robot_features
from robo_rl.demos.topic_recorder import TopicRecorder, camera_names, split_topics
from robo_rl.deploy import ros_interface as names
from robo_rl.deploy.dds_settings import for_ros_node
from robo_rl.deploy.hardware import load_hardware
from robo_rl_ros.messages import CLASSES, qos, run_node

PARAMETERS = {"hardware_config": "hardware/panda.yaml", "dataset_path": "demos/ros", "rate_hz": 50.0,
              "command_interface": "", "camera_topics": "", "image_size": 96,
              "use_episode_events": True, "task": "demonstration", "bag_path": "", "policy_path": "",
              "record_rewards": False}
EVENTS_TOPIC = f"{names.POLICY_NODE}/episode_events"
"""The policy node's ~/episode_events, resolved in this node's namespace (both run in the same one)."""
POLICY_STEP_TOPIC = f"{names.POLICY_NODE}/policy_step"
"""The policy node's ~/policy_step (observation and raw actions), recorded when `policy_path` names its policy."""
CALLBACK_GROUPS = ("sample", "images", "bag", "inputs")
"""The recorder's callback groups: the sampling timer alone in `sample`."""


class DemoRecorderNode(Node):
    def __init__(self):
        super().__init__("robo_rl_demo_recorder")
        for name, default in PARAMETERS.items():
            self.declare_parameter(name, default)
        p = {name: self.get_parameter(name).value for name in PARAMETERS}
        self.hw = load_hardware(find_asset(p["hardware_config"], what="hardware file"))
        settings = for_ros_node(self.hw, p["command_interface"] or None)
        if settings.profile != "ros2":
            raise ValueError(f"hardware {self.hw.robot!r} uses the {settings.profile} profile: the recorder reads ros2 "
                             "command topics only; pass command_interface")
        interface = settings.command_interface
        topics = settings.ros_topics()
        cameras = camera_names(split_topics(p["camera_topics"]))
        size = int(p["image_size"])
        dims = None
        scored = bool(p["record_rewards"])
        if scored and not p["policy_path"]:
            raise ValueError("record_rewards: needs policy_path (the outcomes come on the policy's ~/policy_step)")
        if p["policy_path"]:  # the deployed policy: its observation names and action size (the contract only)
            from robo_rl.deploy.policy import OnnxPolicy

            dims = policy_dims(OnnxPolicy(find_asset(p["policy_path"], what="policy")).contract)
        writer = DatasetWriter(p["dataset_path"], fps=float(p["rate_hz"]),
                               features=robot_features(self.hw.joint_names, {c: (size, size) for c in cameras.values()},
                                                       float(p["rate_hz"]), dims, scored=scored),
                               robot_type=self.hw.robot)
        self.recorder = TopicRecorder(writer, self.hw, interface, list(cameras.values()), task=p["task"],
                                      use_events=bool(p["use_episode_events"]),
                                      policy=(len(dims[0]), dims[1]) if dims else None, scored=scored)
        self.size = size
        self._bag = _BagWriter(p["bag_path"]) if p["bag_path"] else None
        self.groups = {"sample": MutuallyExclusiveCallbackGroup(), "images": ReentrantCallbackGroup(),
                       "bag": MutuallyExclusiveCallbackGroup(), "inputs": ReentrantCallbackGroup()}
        sensor, spec = qos(names.SENSOR_QOS), names.COMMAND_TOPICS[interface]
        self._subscribe(CLASSES[names.JOINT_STATE], topics["joints"], self.recorder.on_joint_state, sensor, "inputs")
        self._subscribe(CLASSES[spec.ros_type], topics["command"], self.recorder.on_command, qos(spec.qos), "inputs")
        self._subscribe(CLASSES[names.STRING], EVENTS_TOPIC, lambda m: self.recorder.on_event(m.data),
                        qos(names.EPISODE_EVENTS.qos), "inputs")
        if dims:
            self._subscribe(CLASSES[names.FLOAT32_MULTI_ARRAY], POLICY_STEP_TOPIC, self.recorder.on_policy_step,
                            qos(names.POLICY_STEP.qos), "inputs")
        for topic, cam in cameras.items():
            self._subscribe(CompressedImage, topic,
                            lambda m, cam=cam: self.recorder.on_image(cam, self._decode(m)), sensor, "images")
        self._tick_lock = threading.Lock()  # close() waits for a frame being written, and no tick follows it
        self._closed = False
        self.create_timer(1.0 / float(p["rate_hz"]), self._tick, callback_group=self.groups["sample"])
        self.create_timer(5.0, self._log, callback_group=self.groups["inputs"])
        self.get_logger().info(f"recording {self.hw.robot} into {p['dataset_path']} at {p['rate_hz']} Hz"
                               f"{', cameras ' + ', '.join(cameras.values()) if cameras else ''}")

    def _subscribe(self, cls, topic, callback, profile, group: str) -> None:
        self.create_subscription(cls, topic, callback, profile, callback_group=self.groups[group])
        if self._bag is not None:  # the same topic again, serialized, straight into the bag (one writer thread)
            self.create_subscription(cls, topic, lambda raw, t=topic, c=cls: self._bag.write(t, c, raw,
                                                                                          self.get_clock()),
                                     profile, raw=True, callback_group=self.groups["bag"])

    def _tick(self) -> None:
        with self._tick_lock:
            if not self._closed:
                self.recorder.tick()

    def _decode(self, msg) -> np.ndarray:
        import cv2

        bgr = cv2.imdecode(np.frombuffer(bytes(msg.data), np.uint8), cv2.IMREAD_COLOR)
        return cv2.cvtColor(cv2.resize(bgr, (self.size, self.size)), cv2.COLOR_BGR2RGB)

    def _log(self) -> None:
        r = self.recorder.report()
        rejected = f", rejected {r['rejected']} ({self.recorder.last_error})" if r.get("rejected") else ""
        self.get_logger().info(f"frames {r['frames']}, dropped {r['dropped']}, episodes {r['episodes']}{rejected}")

    def close(self) -> None:
        """Commit the open episode and close the dataset (and the bag); no frame is sampled after this."""
        with self._tick_lock:
            self._closed = True
        self.recorder.close()
        self._log()
        if self._bag is not None:
            self._bag.close()


class _BagWriter:
    """Serialized messages into a rosbag2 MCAP bag through rosbags (one connection per topic); a message that
    arrives after `close` is dropped."""

    def __init__(self, path: str):
        from rosbags.rosbag2 import StoragePlugin, Writer
        from rosbags.typesys import Stores, get_typestore

        self._store = get_typestore(Stores.LATEST)
        self._writer = Writer(path, version=8, storage_plugin=StoragePlugin.MCAP)
        self._writer.open()
        self._connections: dict = {}
        self._lock = threading.Lock()
        self._open = True

    def write(self, topic: str, cls, raw: bytes, clock) -> None:
        with self._lock:
            if not self._open:
                return
            if topic not in self._connections:
                msgtype = cls.__module__.split(".")[0] + "/msg/" + cls.__name__
                self._connections[topic] = self._writer.add_connection(topic, msgtype, typestore=self._store)
            self._writer.write(self._connections[topic], clock.now().nanoseconds, raw)

    def close(self) -> None:
        with self._lock:
            if self._open:
                self._open = False
                self._writer.close()


def main(args=None) -> None:
    sys.exit(run_node("robo_rl_demo_recorder", DemoRecorderNode, lambda node: node.close(), args))


if __name__ == "__main__":
    main()
