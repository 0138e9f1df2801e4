"""The import mapping of a rosbag2 bag: which topic (and field) fills which dataset feature, checked against the bag.

`rosbag_import.bag_to_dataset` takes a mapping (a dict, or a YAML file) from topics to features;
`rosbag_export.dataset_mapping(root)` gives the one that reads an exported bag back into the same features:

    fps: 50
    joints: [joint1, joint2, joint3, joint4, joint5, joint6, joint7]  # dataset joint order
    features:
      observation.state: {topic: /joint_states, field: position}
      observation.velocity: {topic: /joint_states, field: velocity}
      action: {topic: /joint_commands}                     # the commanded target
      observation.images.front: {topic: /front/image/compressed, height: 96, width: 96}
      next.reward: {topic: /robo_rl/feature/next/reward}   # optional: dtype (float32), names, shape
    episodes: {topic: /robo_rl/episode}                    # optional; else the whole bag is one episode
    task: "reach"                                          # optional; else each start event's task
    robot_type: panda                                      # optional

Feature spec keys: `topic` (required); `field`; `names` (component names; default `joints` for joint
messages and for command arrays whose label names the joints); `dtype` (float32 | float64 | int64 |
int32 | bool, default float32); `shape`; `height` and `width` (images, required: decoded images of
another size are resized). What each message type gives:

- sensor_msgs/msg/JointState: `field` position (default) | velocity | effort, reordered by name into
  the feature's names: any order and extra joints are fine, a missing joint is an error.
- trajectory_msgs/msg/JointTrajectory: the first point's `field` positions (default) | velocities, by
  joint_names.
- std_msgs/msg/Float64MultiArray, Float32MultiArray: by name when the one dimension's label lists
  as many comma-separated names as there are values (what the export writes), else in order (then
  the size must match). A (5, J) pd_targets array (layout "command", "joints", robo_rl's deploy side)
  gives its row `field` q (default) | dq | kp | kd | tau.
- sensor_msgs/msg/CompressedImage (JPEG, PNG, whatever OpenCV decodes), sensor_msgs/msg/Image (rgb8,
  bgr8, rgba8, bgra8, mono8): (height, width, 3) uint8 RGB.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from robo_rl.core.config import load_yaml
from robo_rl.demos.dataset_metadata import DEFAULT_FEATURES, NUMERIC_DTYPES
from robo_rl.demos.errors import DatasetError
from robo_rl.demos.rosbag_format import COMPRESSED_IMAGE, IMAGE_PREFIX, RAW_IMAGE
from robo_rl.deploy import ros_interface as ri

MULTI_ARRAYS = (ri.FLOAT64_MULTI_ARRAY, ri.FLOAT32_MULTI_ARRAY)
_JOINT_FIELDS = ("position", "velocity", "effort")
_TRAJECTORY_FIELDS = ("positions", "velocities")
_SPEC_KEYS = ("topic", "field", "names", "dtype", "shape", "height", "width")
_MAPPING_KEYS = ("fps", "joints", "features", "episodes", "task", "robot_type")


@dataclass
class FeatureSource:
    """One feature of the mapping, resolved against the bag; the import fills `stamps` and `values` from the bag."""

    key: str
    topic: str
    msgtype: str
    field: str | None
    names: list[str] | None
    dtype: str
    shape: list[int] | None
    height: int = 0
    width: int = 0
    stamps: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    values: Any = None  # (N, D) float64 for numeric streams, list of messages for images
    joints: list[str] | None = None  # the mapping's joints
    label_names: list[str] | None = None  # names a multi-array's label gave (when not matched to joints)

    @property
    def is_image(self) -> bool:
        """Whether its topic carries images (compressed or raw)."""
        return self.msgtype in (COMPRESSED_IMAGE, RAW_IMAGE)


def load_mapping(mapping: Mapping[str, Any] | str | Path) -> dict[str, Any]:
    """The mapping as a dict: read from a YAML file path, or copied from a dict."""
    if isinstance(mapping, (str, Path)):
        return load_yaml(mapping)
    if not isinstance(mapping, Mapping):
        raise DatasetError(f"mapping: expected a dict or a YAML file path, got {type(mapping).__name__}")
    return dict(mapping)


def parse_sources(mapping: Mapping[str, Any], topics: Mapping[str, str]) -> list[FeatureSource]:
    """The mapping's features, checked against the bag's topics (name -> message type)."""
    unknown = [k for k in mapping if k not in _MAPPING_KEYS]
    if unknown:
        raise DatasetError(f"mapping: unknown key(s) {', '.join(map(str, unknown))} "
                           f"(allowed: {', '.join(_MAPPING_KEYS)})")
    joints = mapping.get("joints")
    if joints is not None and (not isinstance(joints, (list, tuple)) or not joints or
                               not all(isinstance(j, str) and j for j in joints)):
        raise DatasetError("mapping: joints must be a non-empty list of joint names")
    if joints is not None and len(set(joints)) != len(joints):
        raise DatasetError(f"mapping: joints {list(joints)} repeat a name")
    features = mapping.get("features")
    if not isinstance(features, Mapping) or not features:
        raise DatasetError("mapping: features must map feature names to {topic: ...} (none given)")
    sources = []
    for key, spec in features.items():
        where = f"mapping: feature {key}"
        if key in DEFAULT_FEATURES:
            raise DatasetError(f"{where}: is filled by the dataset writer; leave it out")
        if not isinstance(spec, Mapping) or not spec.get("topic"):
            raise DatasetError(f"{where}: needs a topic ({{topic: /name}})")
        bad = [k for k in spec if k not in _SPEC_KEYS]
        if bad:
            raise DatasetError(f"{where}: unknown key(s) {', '.join(map(str, bad))} (allowed: {', '.join(_SPEC_KEYS)})")
        topic = str(spec["topic"])
        if topic not in topics:
            have = ", ".join(sorted(topics)) or "no topics"
            raise DatasetError(f"{where}: topic {topic} is not in the bag (it has {have})")
        msgtype = topics[topic]
        src = FeatureSource(key, topic, msgtype, spec.get("field"), None, str(spec.get("dtype", "float32")), None,
                      joints=list(joints) if joints else None)
        if msgtype in (COMPRESSED_IMAGE, RAW_IMAGE):
            if not key.startswith(IMAGE_PREFIX):
                raise DatasetError(f"{where}: topic {topic} carries images; image features are named "
                                   f"{IMAGE_PREFIX}<camera>")
            try:
                src.height, src.width = int(spec["height"]), int(spec["width"])
            except (KeyError, TypeError, ValueError):
                raise DatasetError(f"{where}: an image feature needs integer height and width") from None
            if src.height <= 0 or src.width <= 0 or src.height % 2 or src.width % 2:
                raise DatasetError(f"{where}: height {src.height} and width {src.width} must be positive and even "
                                   f"(the video encoder's yuv420p)")
            sources.append(src)
            continue
        if key.startswith(IMAGE_PREFIX):
            raise DatasetError(f"{where}: topic {topic} is {msgtype}, not an image ({COMPRESSED_IMAGE} or {RAW_IMAGE})")
        if src.dtype not in NUMERIC_DTYPES:
            raise DatasetError(f"{where}: dtype {src.dtype!r} is not one of {', '.join(NUMERIC_DTYPES)}")
        names = spec.get("names")
        if names is not None and (not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names)):
            raise DatasetError(f"{where}: names must be a list of strings")
        if msgtype == ri.JOINT_STATE:
            src.field = src.field or "position"
            if src.field not in _JOINT_FIELDS:
                raise DatasetError(f"{where}: field {src.field!r} of {topic} (JointState) is not one of "
                                   f"{', '.join(_JOINT_FIELDS)}")
        elif msgtype == ri.JOINT_TRAJECTORY:
            src.field = src.field or "positions"
            if src.field not in _TRAJECTORY_FIELDS:
                raise DatasetError(f"{where}: field {src.field!r} of {topic} (JointTrajectory) is not one of "
                                   f"{', '.join(_TRAJECTORY_FIELDS)}")
        elif msgtype in MULTI_ARRAYS:
            if src.field is not None and src.field not in ri.PD_TARGET_ROWS:
                raise DatasetError(f"{where}: field {src.field!r} of {topic} (a multi-array) is not one of "
                                   f"{', '.join(ri.PD_TARGET_ROWS)} (pd_targets rows; leave it out for a flat array)")
        else:
            raise DatasetError(f"{where}: topic {topic} is {msgtype}; numeric features read {ri.JOINT_STATE}, "
                               f"{ri.JOINT_TRAJECTORY}, {', '.join(MULTI_ARRAYS)}")
        if names is not None:
            src.names = [str(n) for n in names]
        elif msgtype in (ri.JOINT_STATE, ri.JOINT_TRAJECTORY):
            if joints is None:
                raise DatasetError(f"{where}: {topic} is matched by joint name; give the mapping's joints "
                                   f"(or the feature's names)")
            src.names = list(joints)
        if spec.get("shape") is not None:
            shape = spec["shape"]
            if not isinstance(shape, (list, tuple)) or not shape or not all(
                    isinstance(d, int) and d > 0 for d in shape):
                raise DatasetError(f"{where}: shape {shape!r} must be a list of positive integers")
            src.shape = list(shape)
            if src.names is not None and math.prod(src.shape) != len(src.names):
                raise DatasetError(f"{where}: shape {src.shape} does not hold its {len(src.names)} names")
        sources.append(src)
    return sources


def mapping_fps(mapping: Mapping[str, Any], fps: float | None) -> float:
    """The dataset rate: `fps` when given, else the mapping's; DatasetError unless a finite number > 0."""
    fps = mapping.get("fps") if fps is None else fps
    try:
        fps = float(fps)
    except (TypeError, ValueError):
        raise DatasetError(f"fps {fps!r}: give a frame rate (the mapping's fps or the fps argument)") from None
    if not (math.isfinite(fps) and fps > 0):
        raise DatasetError(f"fps {fps}: must be a finite number > 0")
    return fps


def events_topic(mapping: Mapping[str, Any], topics: Mapping[str, str]) -> str | None:
    """The mapping's episode events topic, checked against the bag's topics (name -> message type); None: none."""
    events_spec = mapping.get("episodes")
    if events_spec is None:
        return None
    if not isinstance(events_spec, Mapping) or not events_spec.get("topic"):
        raise DatasetError("mapping: episodes needs a topic ({topic: /robo_rl/episode})")
    topic = str(events_spec["topic"])
    if topic not in topics:
        raise DatasetError(f"mapping: episodes topic {topic} is not in the bag (it has {', '.join(sorted(topics))})")
    if topics[topic] != ri.STRING:
        raise DatasetError(f"mapping: episodes topic {topic} is {topics[topic]}, not {ri.STRING}")
    return topic
