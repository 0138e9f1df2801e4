"""demo_recorder_node: record a robot's topics into a LeRobot v3.0 dataset at a fixed rate, never blocking.

Subscribes to joint_states, the command topic of `command_interface` (the policy node's or a teleop
driver's), each camera's sensor_msgs/CompressedImage topic and the policy node's episode events; a
timer at `rate_hz` samples the newest values into the dataset (robo_rl.demos.topic_recorder has the
logic, tested without ROS). With `bag_path` set, every subscribed message is also written, as received
(serialized), into a rosbag2 bag (MCAP) through `rosbags`. Dropped frames are counted in the log line
printed every few seconds and at shutdown. Parameters: hardware_config, dataset_path, rate_hz,
command_interface, camera_topics (list; camera name = the topic's first segment), image_size,
use_episode_events, task, bag_path.
"""

from __future__ import annotations

import numpy as np
import rclpy
from rclpy.node import Node
from sensor_msgs.msg import CompressedImage

from robo_rl.core.assets import find_asset
from robo_rl.demos.dataset_writer import DatasetWriter
from robo_rl.demos.recorder import robot_features
from robo_rl.demos.topic_recorder import TopicRecorder
from robo_rl.deploy import ros_interface as names
from robo_rl.deploy import ros_messages as rm
from robo_rl.deploy.hardware import load_hardware
from robo_rl_ros.messages import CLASSES, qos, spin_until_shutdown

PARAMETERS = {"hardware_config": "hardware/panda.yaml", "dataset_path": "demos/ros", "rate_hz": 50.0,
              "command_interface": "pd_targets", "camera_topics": [""], "image_size": 96,
              "use_episode_events": True, "task": "demonstration", "bag_path": ""}
EVENTS_TOPIC = f"/{names.POLICY_NODE}/episode_events"


def camera_name(topic: str) -> str:
    return topic.strip("/").split("/")[0]


class DemoRecorderNode(Node):
    def __init__(self):
        super().__init__("robo_rl_demo_recorder")
        for name, default in PARAMETERS.items():
            self.declare_parameter(name, default)
        p = {name: self.get_parameter(name).value for name in PARAMETERS}
        self.hw = load_hardware(find_asset(p["hardware_config"], what="hardware file"))
        interface = rm.check_command_interface(p["command_interface"])
        topics = [t for t in p["camera_topics"] if t]
        size = int(p["image_size"])
        cams = {camera_name(t): (size, size) for t in topics}
        writer = DatasetWriter(p["dataset_path"], fps=float(p["rate_hz"]),
                               features=robot_features(self.hw.joint_names, cams, float(p["rate_hz"])),
                               robot_type=self.hw.robot)
        self.recorder = TopicRecorder(writer, self.hw, interface, list(cams), task=p["task"],
                                      use_events=bool(p["use_episode_events"]))
        self.size = size
        self._bag = _BagWriter(p["bag_path"]) if p["bag_path"] else None
        sensor, spec = qos(names.SENSOR_QOS), names.COMMAND_TOPICS[interface]
        self._subscribe(CLASSES[names.JOINT_STATE], names.JOINT_STATES.name, self.recorder.on_joint_state, sensor)
        self._subscribe(CLASSES[spec.ros_type], spec.name, self.recorder.on_command, qos(spec.qos))
        self._subscribe(CLASSES[names.STRING], EVENTS_TOPIC, lambda m: self.recorder.on_event(m.data),
                        qos(names.EPISODE_EVENTS.qos))
        for topic in topics:
            cam = camera_name(topic)
            self._subscribe(CompressedImage, topic, lambda m, cam=cam: self.recorder.on_image(cam, self._decode(m)),
                            sensor)
        self.create_timer(1.0 / float(p["rate_hz"]), self.recorder.tick)
        self.create_timer(5.0, self._log)
        self.get_logger().info(f"recording {self.hw.robot} into {p['dataset_path']} at {p['rate_hz']} Hz")

    def _subscribe(self, cls, topic, callback, profile) -> None:
        self.create_subscription(cls, topic, callback, profile)
        if self._bag is not None:  # the same topic again, serialized, straight into the bag
            self.create_subscription(cls, topic, lambda raw, t=topic, c=cls: self._bag.write(t, c, raw,
                                                                                          self.get_clock()),
                                     profile, raw=True)

    def _decode(self, msg) -> np.ndarray:
        import cv2

        bgr = cv2.imdecode(np.frombuffer(bytes(msg.data), np.uint8), cv2.IMREAD_COLOR)
        return cv2.cvtColor(cv2.resize(bgr, (self.size, self.size)), cv2.COLOR_BGR2RGB)

    def _log(self) -> None:
        r = self.recorder.report()
        self.get_logger().info(f"frames {r['frames']}, dropped {r['dropped']}, episodes {r['episodes']}")

    def close(self) -> None:
        self.recorder.close()
        self._log()
        if self._bag is not None:
            self._bag.close()


class _BagWriter:
    """Serialized messages into a rosbag2 MCAP bag through rosbags (one connection per topic)."""

    def __init__(self, path: str):
        from rosbags.rosbag2 import StoragePlugin, Writer
        from rosbags.typesys import Stores, get_typestore

        self._store = get_typestore(Stores.LATEST)
        self._writer = Writer(path, version=8, storage_plugin=StoragePlugin.MCAP)
        self._writer.open()
        self._connections: dict = {}

    def write(self, topic: str, cls, raw: bytes, clock) -> None:
        if topic not in self._connections:
            msgtype = cls.__module__.split(".")[0] + "/msg/" + cls.__name__
            self._connections[topic] = self._writer.add_connection(topic, msgtype, typestore=self._store)
        self._writer.write(self._connections[topic], clock.now().nanoseconds, raw)

    def close(self) -> None:
        self._writer.close()


def main(args=None) -> None:
    rclpy.init(args=args)
    node = DemoRecorderNode()
    spin_until_shutdown(node, node.close)


if __name__ == "__main__":
    main()
