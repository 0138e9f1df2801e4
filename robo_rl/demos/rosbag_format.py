"""What a robo_rl rosbag2 bag holds, shared by the export (`rosbag_export`) and the import (`rosbag_import`).

No ROS install is needed: `rosbags` (pure Python) reads and writes the bags (MCAP or sqlite3), with its own
copy of the standard message definitions; the messages are built and read by `robo_rl.deploy.ros_messages`,
the same adapters the deploy side uses. Both are optional dependencies, loaded when a bag is opened.

The topics a dataset's features go to (and what `rosbag_export.dataset_mapping` reads back):

    feature                            topic                                   message type
    observation.state (+ .velocity)    /joint_states                           sensor_msgs/msg/JointState
    action                             /joint_commands                         std_msgs/msg/Float64MultiArray
    observation.images.<cam>           /<cam>/image/compressed                 sensor_msgs/msg/CompressedImage
    every other numeric feature        /robo_rl/feature/<key, "." -> "/">      std_msgs/msg/Float64MultiArray
    episode events                     /robo_rl/episode                        std_msgs/msg/String

Frame `k` of an episode is at `episode start + k / fps` (`frame_offset_ns`, in integer nanoseconds, the
one formula both directions use, so that an import at the same fps meets every exported frame exactly).
A multi-array's one layout dimension is labelled with its component names joined by commas
(`names_label`, read back by `label_names`). Episode events are "start <episode index> <task>" and
"end <episode index>" (`start_event`, `end_event`, read back by `parse_event`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from robo_rl.demos.errors import DatasetError
from robo_rl.deploy import ros_interface as ri
from robo_rl.deploy import ros_messages as rm

STATE_TOPIC = ri.resolve_topic(ri.JOINT_STATES.name)
"""/joint_states (ros_interface.JOINT_STATES, absolute)."""
COMMAND_TOPIC = "/joint_commands"
EPISODE_TOPIC = "/robo_rl/episode"
FEATURE_TOPIC_PREFIX = "/robo_rl/feature/"
IMAGE_PREFIX = "observation.images."
COMPRESSED_IMAGE = "sensor_msgs/msg/CompressedImage"
RAW_IMAGE = "sensor_msgs/msg/Image"

_START = re.compile(r"^start\s+(\S+)(?:\s+(.*))?$", re.S)
_END = re.compile(r"^end(?:\s+(\S+))?\s*$")


# ---------------------------------------------------------------------------------------------- optional libraries
def load_rosbags() -> tuple[Any, Any, Any, Any]:
    """(Reader, Writer, StoragePlugin, typestore); DatasetError when rosbags is not installed."""
    try:
        from rosbags.rosbag2 import Reader, StoragePlugin, Writer  # optional: pip install rosbags
        from rosbags.typesys import Stores, get_typestore
    except ImportError:
        raise DatasetError("rosbag import/export needs the `rosbags` package (pip install rosbags)") from None
    return Reader, Writer, StoragePlugin, get_typestore(Stores.ROS2_HUMBLE)


def load_cv2() -> Any:
    """The OpenCV module (images are JPEG / PNG in a bag); DatasetError when it is not installed."""
    try:
        import cv2  # optional: opencv-python-headless (the demos extra)
    except ImportError:
        raise DatasetError("rosbag images need OpenCV (pip install opencv-python-headless)") from None
    return cv2


def message_types(typestore: Any) -> rm.MessageTypes:
    """The `MessageTypes` bundle of a rosbags typestore (its classes take numpy arrays for float arrays)."""
    t = typestore.types
    return rm.MessageTypes(
        Time=t["builtin_interfaces/msg/Time"], Duration=t["builtin_interfaces/msg/Duration"],
        Header=t["std_msgs/msg/Header"], JointState=t[ri.JOINT_STATE], Imu=t[ri.IMU],
        Quaternion=t["geometry_msgs/msg/Quaternion"], Vector3=t["geometry_msgs/msg/Vector3"],
        Twist=t[ri.TWIST], Point=t["geometry_msgs/msg/Point"], PointStamped=t[ri.POINT_STAMPED],
        Pose=t["geometry_msgs/msg/Pose"], PoseStamped=t[ri.POSE_STAMPED],
        MultiArrayDimension=t["std_msgs/msg/MultiArrayDimension"], MultiArrayLayout=t["std_msgs/msg/MultiArrayLayout"],
        Float64MultiArray=t[ri.FLOAT64_MULTI_ARRAY], Float32MultiArray=t[ri.FLOAT32_MULTI_ARRAY],
        JointTrajectory=t[ri.JOINT_TRAJECTORY], JointTrajectoryPoint=t["trajectory_msgs/msg/JointTrajectoryPoint"],
        Bool=t[ri.BOOL], String=t[ri.STRING], KeyValue=t["diagnostic_msgs/msg/KeyValue"],
        DiagnosticStatus=t["diagnostic_msgs/msg/DiagnosticStatus"], DiagnosticArray=t[ri.DIAGNOSTIC_ARRAY],
        float64_array=lambda a: np.asarray(a, dtype=np.float64),
        float32_array=lambda a: np.asarray(a, dtype=np.float32),
    )


# ---------------------------------------------------------------------------------------------- names, time
def image_topic(camera_name: str) -> str:
    """/<cam>/image/compressed: image_transport's compressed topic of camera `cam`."""
    return f"/{camera_name}/image/compressed"


def feature_topic(key: str) -> str:
    """/robo_rl/feature/next/reward for `next.reward` ("." is not allowed in ROS 2 names)."""
    return FEATURE_TOPIC_PREFIX + key.replace(".", "/")


def frame_offset_ns(k: int | np.ndarray, fps: float) -> Any:
    """Nanoseconds of frame `k` after its episode's start (the one formula both directions use)."""
    return np.round(np.asarray(k, dtype=np.float64) * (1e9 / fps)).astype(np.int64)


def names_label(names: Sequence[str] | None) -> str:
    """A multi-array's layout label for component `names`: joined by commas ("" when there are none)."""
    return ",".join(str(n) for n in names) if names else ""


def label_names(labels: tuple[str, ...], size: int) -> list[str] | None:
    """Component names a one-dimensional layout's label lists (comma-separated, one per value), else None."""
    if len(labels) != 1 or size < 2:
        return None
    parts = [p.strip() for p in labels[0].split(",")]
    return parts if len(parts) == size and all(parts) else None


# ---------------------------------------------------------------------------------------------- episode events
def start_event(index: int, task: str) -> str:
    """The event at an episode's first frame: "start <index> <task>" ("start <index>" without a task)."""
    return f"start {index} {task}".rstrip()


def end_event(index: int) -> str:
    """The event at an episode's last frame: "end <index>"."""
    return f"end {index}"


def parse_event(text: str) -> tuple[str, str] | None:
    """("start", task) or ("end", "") of an event's text (surrounding spaces ignored); None for anything else."""
    text = text.strip()
    if m := _START.match(text):
        return "start", (m.group(2) or "").strip()
    if _END.match(text):
        return "end", ""
    return None
