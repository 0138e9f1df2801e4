"""LeRobot v3.0 datasets <-> rosbag2 bags (MCAP or sqlite3) of standard ROS 2 messages. numpy, rosbags, OpenCV.

No ROS install is needed: `rosbags` (pure Python) reads and writes the bags, with its own copy of the
standard message definitions; the messages are built and read by `robo_rl.deploy.ros_messages`, the
same adapters the deploy side uses.

**Export** (`dataset_to_bag`): the chosen episodes one after another, `EPISODE_GAP_S` apart, frame
`k` of an episode at `episode start + k / fps` (the frame's timestamp; computed from the frame index in
integer nanoseconds rather than read back from the float32 `timestamp` column, so that an import at
the same fps meets every frame exactly). Header stamps equal the bag (receive) timestamps.

    feature                            topic                                   message type
    observation.state (+ .velocity)    /joint_states                           sensor_msgs/msg/JointState
    action                             /joint_commands                         std_msgs/msg/Float64MultiArray
    observation.images.<cam>           /<cam>/image/compressed                 sensor_msgs/msg/CompressedImage
    every other numeric feature        /robo_rl/feature/<key, "." -> "/">      std_msgs/msg/Float64MultiArray
    episode events                     /robo_rl/episode                        std_msgs/msg/String

- `/joint_states`: name = the state feature's names, position = observation.state, velocity =
  observation.velocity (empty when the dataset has none), effort empty.
- `/joint_commands` (the commanded joint targets, as a forward_position controller takes them):
  one layout dimension whose label is the component names joined by commas ("joint1,joint2,...")
  and whose size is their count, data = the action in that order. An importer matches by name.
- other numeric features (next.reward, next.done, observation.policy, ...): a Float64MultiArray,
  flattened, label = the names joined by commas ("" when the feature has none); bools as 0.0 / 1.0.
  The writer's own columns (timestamp, frame_index, episode_index, index, task_index) are not exported.
- images: JPEG (default, quality 95) or PNG, `format` as image_transport writes it
  ("rgb8; jpeg compressed bgr8"), frame_id = the camera name.
- events: "start <episode index> <task>" at the episode's first frame time (before its messages),
  "end <episode index>" at its last frame time (after them).

**Import** (`bag_to_dataset`) takes a mapping (a dict, or a YAML file) from topics to features;
`dataset_mapping(root)` gives the one that reads an exported bag back into the same features:

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

Resampling: every stream is resampled onto the frame grid `start + k / fps` by holding its last value
(a frame at time t takes the newest message with bag timestamp <= t); frames before every stream has
had a first message are skipped (values are held across episode boundaries). Episodes come from
the events topic ("start ..." to the matching "end ...", both frame times included; a start without
an end runs to the next start or the bag's last mapped message), else the whole bag is one episode
from the first mapped message to the last. Every mapped message is read into memory (images stay
compressed until a frame uses them).
"""

from __future__ import annotations

import math
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from robo_rl.core.config import load_yaml
from robo_rl.demos.dataset_metadata import DEFAULT_FEATURES, NUMERIC_DTYPES, camera
from robo_rl.demos.dataset_reader import DatasetReader
from robo_rl.demos.dataset_writer import DatasetWriter
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
STORAGES = ("mcap", "sqlite3")
IMAGE_FORMATS = ("jpeg", "png")
EPISODE_GAP_S = 1.0
"""Bag time between one exported episode's last frame and the next one's first."""
BAG_VERSION = 8
"""rosbag2 metadata version written (read by Iron, Jazzy and later)."""
MAPPING_FILE = "robo_rl_mapping.yaml"
"""`cmd_to_rosbag` writes the import mapping of the bag into the bag folder under this name."""

_MULTI_ARRAYS = (ri.FLOAT64_MULTI_ARRAY, ri.FLOAT32_MULTI_ARRAY)
_JOINT_FIELDS = ("position", "velocity", "effort")
_TRAJECTORY_FIELDS = ("positions", "velocities")
_SPEC_KEYS = ("topic", "field", "names", "dtype", "shape", "height", "width")
_MAPPING_KEYS = ("fps", "joints", "features", "episodes", "task", "robot_type")


# ---------------------------------------------------------------------------------------------- rosbags
def _rosbags() -> tuple[Any, Any, Any, Any]:
    """(Reader, Writer, StoragePlugin, typestore); DatasetError when rosbags is not installed."""
    try:
        from rosbags.rosbag2 import Reader, StoragePlugin, Writer  # optional: pip install rosbags
        from rosbags.typesys import Stores, get_typestore
    except ImportError:
        raise DatasetError("rosbag import/export needs the `rosbags` package (pip install rosbags)") from None
    return Reader, Writer, StoragePlugin, get_typestore(Stores.ROS2_HUMBLE)


def _cv2() -> Any:
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


def _label(names: Sequence[str] | None) -> str:
    return ",".join(str(n) for n in names) if names else ""


def _label_names(labels: tuple[str, ...], size: int) -> list[str] | None:
    """Component names a one-dimensional layout's label lists (comma-separated, one per value), else None."""
    if len(labels) != 1 or size < 2:
        return None
    parts = [p.strip() for p in labels[0].split(",")]
    return parts if len(parts) == size and all(parts) else None


# ---------------------------------------------------------------------------------------------- export
def _check_episodes(episodes: Sequence[int] | None, total: int) -> list[int]:
    if episodes is None:
        return list(range(total))
    chosen = [int(e) for e in episodes]
    bad = [e for e in chosen if not 0 <= e < total]
    if bad:
        raise DatasetError(f"episode(s) {', '.join(map(str, bad))}: the dataset has {total} episodes (0..{total - 1})")
    if len(set(chosen)) != len(chosen):
        raise DatasetError(f"episodes {chosen}: each episode may be given once")
    return chosen


def _encode_image(cv2: Any, image: np.ndarray, image_format: str, quality: int) -> bytes:
    bgr = cv2.cvtColor(np.ascontiguousarray(image), cv2.COLOR_RGB2BGR)
    if image_format == "jpeg":
        ok, buf = cv2.imencode(".jpg", bgr, [int(cv2.IMWRITE_JPEG_QUALITY), int(quality)])
    else:
        ok, buf = cv2.imencode(".png", bgr)
    if not ok:
        raise DatasetError(f"OpenCV could not encode a {image.shape} image as {image_format}")
    return buf.tobytes()


def dataset_to_bag(dataset_root: str | Path, bag_path: str | Path, *, episodes: Sequence[int] | None = None,
                   storage: str = "mcap", image_format: str = "jpeg", jpeg_quality: int = 95) -> dict[str, Any]:
    """Write episodes (default all) of a dataset into a new rosbag2 bag; see the module docstring.

    Returns:
        {"episodes": count, "frames": count, "topics": {topic: message count}, "duration_s": bag span}.

    Raises:
        DatasetError: not a dataset, an episode index out of range, the bag path exists, an unknown
            storage or image format, state and velocity with different joint names.
    """
    if storage not in STORAGES:
        raise DatasetError(f"storage {storage!r}: allowed values are {', '.join(STORAGES)}")
    if image_format not in IMAGE_FORMATS:
        raise DatasetError(f"image format {image_format!r}: allowed values are {', '.join(IMAGE_FORMATS)}")
    bag_path = Path(bag_path)
    if bag_path.exists():
        raise DatasetError(f"{bag_path}: exists; a bag is written into a new folder")
    reader = DatasetReader(dataset_root)
    chosen = _check_episodes(episodes, reader.num_episodes)
    features, fps = reader.features, reader.fps
    Reader, Writer, StoragePlugin, ts = _rosbags()
    types = message_types(ts)
    cameras = [k for k in reader.video_keys if k.startswith(IMAGE_PREFIX)]
    state_names = None
    if "observation.state" in features:
        state_names = list(features["observation.state"].get("names") or
                           [f"joint_{i}" for i in range(int(np.prod(features["observation.state"]["shape"])))])
    has_velocity = state_names is not None and "observation.velocity" in features
    if has_velocity and (features["observation.velocity"].get("names") or state_names) != state_names:
        raise DatasetError("observation.velocity: its names differ from observation.state's; a JointState needs one "
                           "name list")
    has_action = "action" in features
    action_label = _label(features["action"].get("names")) if has_action else ""
    skip = {"observation.state", "observation.velocity", "action", *DEFAULT_FEATURES}
    others = [k for k, f in features.items() if f["dtype"] != "video" and k not in skip]
    cv2 = _cv2() if cameras else None

    counts: dict[str, int] = {}
    storage_plugin = StoragePlugin.MCAP if storage == "mcap" else StoragePlugin.SQLITE3
    frames = 0
    t_start = 0
    try:
        with Writer(bag_path, version=BAG_VERSION, storage_plugin=storage_plugin) as writer:
            conns: dict[str, Any] = {}

            def put(topic: str, msgtype: str, msg: Any, t_ns: int) -> None:
                if topic not in conns:
                    conns[topic] = writer.add_connection(topic, msgtype, typestore=ts)
                writer.write(conns[topic], int(t_ns), ts.serialize_cdr(msg, msgtype))
                counts[topic] = counts.get(topic, 0) + 1

            for i in chosen:
                ep = reader.episode(i)
                length = int(reader.meta.episodes[i]["length"])
                task = (reader.meta.episodes[i].get("tasks") or [""])[0]
                stamps = t_start + frame_offset_ns(np.arange(length), fps)
                put(EPISODE_TOPIC, ri.STRING, rm.string_message(types, f"start {i} {task}".rstrip()), stamps[0])
                for k in range(length):
                    t_ns = int(stamps[k])
                    t_s = t_ns * 1e-9
                    if state_names is not None:
                        q = ep["observation.state"][k].reshape(-1)
                        dq = ep["observation.velocity"][k].reshape(-1) if has_velocity else np.zeros(0)
                        put(STATE_TOPIC, ri.JOINT_STATE,
                            rm.joint_state_message(types, state_names, q, dq, None, t_s), t_ns)
                    if has_action:
                        put(COMMAND_TOPIC, ri.FLOAT64_MULTI_ARRAY,
                            rm.multi_array_message(types, ep["action"][k].reshape(-1), (action_label,)), t_ns)
                    for key in others:
                        values = np.asarray(ep[key][k], dtype=np.float64).reshape(-1)
                        put(feature_topic(key), ri.FLOAT64_MULTI_ARRAY,
                            rm.multi_array_message(types, values, (_label(features[key].get("names")),)), t_ns)
                    for key in cameras:
                        name = key[len(IMAGE_PREFIX):]
                        msg = ts.types[COMPRESSED_IMAGE](
                            header=rm.make_header(types, t_s, name),
                            format=f"rgb8; {image_format} compressed bgr8",
                            data=np.frombuffer(_encode_image(cv2, ep[key][k], image_format, jpeg_quality), np.uint8))
                        put(image_topic(name), COMPRESSED_IMAGE, msg, t_ns)
                put(EPISODE_TOPIC, ri.STRING, rm.string_message(types, f"end {i}"), stamps[-1])
                frames += length
                t_start = int(stamps[-1]) + round(EPISODE_GAP_S * 1e9)
    except BaseException:
        shutil.rmtree(bag_path, ignore_errors=True)  # no half-written bag left behind
        raise
    return {"episodes": len(chosen), "frames": frames, "topics": counts,
            "duration_s": max(0.0, (t_start - round(EPISODE_GAP_S * 1e9)) * 1e-9) if chosen else 0.0}


def dataset_mapping(dataset_root: str | Path) -> dict[str, Any]:
    """The import mapping that reads a bag written by `dataset_to_bag` back into the dataset's features."""
    reader = DatasetReader(dataset_root)
    features = reader.features
    out: dict[str, Any] = {"fps": reader.fps}
    if "observation.state" in features:
        spec = features["observation.state"]
        out["joints"] = list(spec.get("names") or [f"joint_{i}" for i in range(int(np.prod(spec["shape"])))])
    out.update({"features": {}, "episodes": {"topic": EPISODE_TOPIC}})
    if reader.meta.info.get("robot_type"):
        out["robot_type"] = reader.meta.info["robot_type"]
    mapped = out["features"]
    if "observation.state" in features:
        mapped["observation.state"] = {"topic": STATE_TOPIC, "field": "position", "dtype": spec["dtype"]}
        if "observation.velocity" in features:
            mapped["observation.velocity"] = {"topic": STATE_TOPIC, "field": "velocity",
                                              "dtype": features["observation.velocity"]["dtype"]}
    for key, spec in features.items():
        if key in DEFAULT_FEATURES or key in mapped:
            continue
        if spec["dtype"] == "video":
            if key.startswith(IMAGE_PREFIX):
                h, w, _ = spec["shape"]
                mapped[key] = {"topic": image_topic(key[len(IMAGE_PREFIX):]), "height": int(h), "width": int(w)}
            continue
        entry: dict[str, Any] = {"topic": COMMAND_TOPIC if key == "action" else feature_topic(key),
                                 "dtype": spec["dtype"], "shape": list(spec["shape"])}
        if spec.get("names"):
            entry["names"] = list(spec["names"])
        mapped[key] = entry
    return out


# ---------------------------------------------------------------------------------------------- import: mapping
@dataclass
class _Source:
    """One feature of the mapping, resolved against the bag."""

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
        return self.msgtype in (COMPRESSED_IMAGE, RAW_IMAGE)


def _load_mapping(mapping: Mapping[str, Any] | str | Path) -> dict[str, Any]:
    if isinstance(mapping, (str, Path)):
        return load_yaml(mapping)
    if not isinstance(mapping, Mapping):
        raise DatasetError(f"mapping: expected a dict or a YAML file path, got {type(mapping).__name__}")
    return dict(mapping)


def _parse_sources(mapping: Mapping[str, Any], topics: Mapping[str, str]) -> list[_Source]:
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
        src = _Source(key, topic, msgtype, spec.get("field"), None, str(spec.get("dtype", "float32")), None,
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
        elif msgtype in _MULTI_ARRAYS:
            if src.field is not None and src.field not in ri.PD_TARGET_ROWS:
                raise DatasetError(f"{where}: field {src.field!r} of {topic} (a multi-array) is not one of "
                                   f"{', '.join(ri.PD_TARGET_ROWS)} (pd_targets rows; leave it out for a flat array)")
        else:
            raise DatasetError(f"{where}: topic {topic} is {msgtype}; numeric features read {ri.JOINT_STATE}, "
                               f"{ri.JOINT_TRAJECTORY}, {', '.join(_MULTI_ARRAYS)}")
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


# ---------------------------------------------------------------------------------------------- import: values
def _reorder(values: np.ndarray, have: Sequence[str], want: Sequence[str], what: str, cache: dict) -> np.ndarray:
    """`values` (one per name in `have`) in the order of `want`; DatasetError naming a missing name."""
    key = tuple(have)
    idx = cache.get(key)
    if idx is None:
        pos = {n: i for i, n in enumerate(have)}
        missing = [n for n in want if n not in pos]
        if missing:
            raise DatasetError(f"{what}: joint(s) {', '.join(missing)} not in its names ({', '.join(have)})")
        idx = cache[key] = np.array([pos[n] for n in want], dtype=np.int64)
    return values[idx]


def _numeric(src: _Source, msg: Any, t_ns: int, cache: dict) -> np.ndarray:
    """One message's values as the feature's flat float64 vector (in the feature's name order)."""
    what = f"{src.topic} at {t_ns * 1e-9:.3f} s"
    if src.msgtype == ri.JOINT_STATE:
        names = [str(n) for n in msg.name]
        values = np.asarray(getattr(msg, src.field), dtype=np.float64)
        if values.shape != (len(names),):
            raise DatasetError(f"{what}: {values.size} {src.field} values for {len(names)} joint names")
        return _reorder(values, names, src.names, what, cache)
    if src.msgtype == ri.JOINT_TRAJECTORY:
        names = [str(n) for n in msg.joint_names]
        if not msg.points:
            raise DatasetError(f"{what}: a JointTrajectory without points")
        values = np.asarray(getattr(msg.points[0], src.field), dtype=np.float64)
        if values.shape != (len(names),):
            raise DatasetError(f"{what}: {values.size} {src.field} for {len(names)} joint names")
        return _reorder(values, names, src.names, what, cache)
    try:
        labels, data = rm.read_multi_array(msg)
    except ValueError as exc:
        raise DatasetError(f"{what}: {exc}") from None
    if src.field is not None or (data.ndim == 2 and labels[:1] == ("command",)):
        if data.ndim != 2 or data.shape[0] != len(ri.PD_TARGET_ROWS):
            raise DatasetError(f"{what}: field {src.field} needs a ({len(ri.PD_TARGET_ROWS)}, J) pd_targets array, "
                               f"got shape {data.shape}")
        data = data[ri.PD_TARGET_ROWS.index(src.field or "q")]
        labels = labels[1:]
    flat = data.reshape(-1)
    have = _label_names(labels, flat.size)
    if src.names is None:
        if have is not None and src.joints and set(have) & set(src.joints):
            src.names = list(src.joints)  # a command array naming the joints: into the dataset's joint order
        else:
            if src.label_names is None:
                src.label_names = have
            return flat
    if have is not None:
        return _reorder(flat, have, src.names, what, cache)
    if flat.size != len(src.names):
        raise DatasetError(f"{what}: {flat.size} values for the {len(src.names)} names of {src.key}")
    return flat


def _decode_image(cv2: Any, src: _Source, msg: Any, t_ns: int) -> np.ndarray:
    what = f"{src.topic} at {t_ns * 1e-9:.3f} s"
    if src.msgtype == COMPRESSED_IMAGE:
        bgr = cv2.imdecode(np.frombuffer(bytes(np.asarray(msg.data, np.uint8)), np.uint8), cv2.IMREAD_COLOR)
        if bgr is None:
            raise DatasetError(f"{what}: the image (format {msg.format!r}) could not be decoded")
        rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
    else:
        channels = {"rgb8": 3, "bgr8": 3, "rgba8": 4, "bgra8": 4, "mono8": 1}.get(str(msg.encoding))
        if channels is None:
            raise DatasetError(f"{what}: image encoding {msg.encoding!r} is not one of rgb8, bgr8, rgba8, bgra8, mono8")
        h, w, step = int(msg.height), int(msg.width), int(msg.step)
        raw = np.asarray(msg.data, np.uint8)
        if raw.size < h * step or step < w * channels:
            raise DatasetError(f"{what}: {raw.size} bytes for a {w}x{h} {msg.encoding} image (step {step})")
        img = raw[: h * step].reshape(h, step)[:, : w * channels].reshape(h, w, channels)
        conv = {"rgb8": None, "bgr8": cv2.COLOR_BGR2RGB, "rgba8": cv2.COLOR_RGBA2RGB, "bgra8": cv2.COLOR_BGRA2RGB,
                "mono8": cv2.COLOR_GRAY2RGB}[str(msg.encoding)]
        rgb = img if conv is None else cv2.cvtColor(np.ascontiguousarray(img), conv)
    if rgb.shape[:2] != (src.height, src.width):
        rgb = cv2.resize(rgb, (src.width, src.height), interpolation=cv2.INTER_AREA)
    return np.ascontiguousarray(rgb, dtype=np.uint8)


_START = re.compile(r"^start\s+(\S+)(?:\s+(.*))?$", re.S)
_END = re.compile(r"^end(?:\s+(\S+))?\s*$")


def _episodes_from_events(events: list[tuple[int, str]], topic: str, last_ns: int) -> list[tuple[int, int, str]]:
    """(start ns, end ns inclusive, task) of each episode the events describe."""
    out: list[tuple[int, int, str]] = []
    open_: tuple[int, str] | None = None
    for t_ns, text in events:
        text = text.strip()
        if m := _START.match(text):
            if open_ is not None:
                out.append((open_[0], t_ns - 1, open_[1]))
            open_ = (t_ns, (m.group(2) or "").strip())
        elif _END.match(text):
            if open_ is None:
                raise DatasetError(f"{topic} at {t_ns * 1e-9:.3f} s: 'end' without a 'start' before it")
            out.append((open_[0], t_ns, open_[1]))
            open_ = None
        else:
            raise DatasetError(f"{topic} at {t_ns * 1e-9:.3f} s: event {text[:60]!r} is not 'start <index> <task>' "
                               f"or 'end <index>'")
    if open_ is not None:
        out.append((open_[0], max(open_[0], last_ns), open_[1]))
    return out


# ---------------------------------------------------------------------------------------------- import
def bag_to_dataset(bag_path: str | Path, out_root: str | Path, mapping: Mapping[str, Any] | str | Path, *,
                   fps: float | None = None) -> dict[str, Any]:
    """Import a rosbag2 bag into a new dataset at `out_root`; see the module docstring.

    Args:
        bag_path: the bag folder (metadata.yaml and its MCAP or sqlite3 files).
        out_root: a new (or empty) folder.
        mapping: topics -> features (a dict, or the path of a YAML file).
        fps: the dataset rate; default the mapping's `fps`.

    Returns:
        {"episodes": count, "frames": count, "skipped": frames skipped before every stream started,
        "empty": episodes with no complete frame (not written)}.

    Raises:
        DatasetError: one line naming the missing topic, joint, field or key, or a message that does not fit.
    """
    mapping = _load_mapping(mapping)
    fps = mapping.get("fps") if fps is None else fps
    try:
        fps = float(fps)
    except (TypeError, ValueError):
        raise DatasetError(f"fps {fps!r}: give a frame rate (the mapping's fps or the fps argument)") from None
    if not (math.isfinite(fps) and fps > 0):
        raise DatasetError(f"fps {fps}: must be a finite number > 0")
    bag_path = Path(bag_path)
    if not (bag_path / "metadata.yaml").is_file():
        raise DatasetError(f"{bag_path}: not a rosbag2 bag (no metadata.yaml)")
    out_root = Path(out_root)
    if out_root.exists() and any(out_root.iterdir()):
        raise DatasetError(f"{out_root}: exists and is not empty; choose a new folder")
    Reader, _, _, ts = _rosbags()
    try:
        bag = Reader(bag_path)
        bag.open()
    except Exception as exc:  # rosbags' own errors (ReaderError, ...): one line
        raise DatasetError(f"{bag_path}: cannot be read as a rosbag2 bag ({type(exc).__name__}: {exc})") from None
    try:
        topics = {c.topic: c.msgtype for c in bag.connections}
        sources = _parse_sources(mapping, topics)
        events_spec = mapping.get("episodes")
        events_topic = None
        if events_spec is not None:
            if not isinstance(events_spec, Mapping) or not events_spec.get("topic"):
                raise DatasetError("mapping: episodes needs a topic ({topic: /robo_rl/episode})")
            events_topic = str(events_spec["topic"])
            if events_topic not in topics:
                raise DatasetError(f"mapping: episodes topic {events_topic} is not in the bag "
                                   f"(it has {', '.join(sorted(topics))})")
            if topics[events_topic] != ri.STRING:
                raise DatasetError(f"mapping: episodes topic {events_topic} is {topics[events_topic]}, not {ri.STRING}")
        wanted = {s.topic for s in sources} | ({events_topic} if events_topic else set())
        raw: dict[str, list[tuple[int, Any]]] = {t: [] for t in wanted}
        for conn, t_ns, data in bag.messages(connections=[c for c in bag.connections if c.topic in wanted]):
            raw[conn.topic].append((int(t_ns), ts.deserialize_cdr(data, conn.msgtype)))
    finally:
        bag.close()
    for msgs in raw.values():
        msgs.sort(key=lambda m: m[0])
    for src in sources:
        msgs = raw[src.topic]
        if not msgs:
            raise DatasetError(f"mapping: feature {src.key}: topic {src.topic} has no messages in the bag")
        src.stamps = np.array([t for t, _ in msgs], dtype=np.int64)
        if src.is_image:
            src.values = [m for _, m in msgs]
        else:
            cache: dict = {}
            vals = [_numeric(src, m, t, cache) for t, m in msgs]
            sizes = {v.size for v in vals}
            if len(sizes) != 1:
                raise DatasetError(f"{src.topic}: messages of {sorted(sizes)} values; feature {src.key} needs one size")
            src.values = np.stack(vals)
            size = src.values.shape[1]
            if src.shape is None:
                src.shape = [size]
            elif math.prod(src.shape) != size:
                raise DatasetError(f"mapping: feature {src.key}: shape {src.shape} for {size} values on {src.topic}")
            if src.names is None and len(src.shape) == 1:
                src.names = src.label_names

    first_ns = min(int(s.stamps[0]) for s in sources)
    last_ns = max(int(s.stamps[-1]) for s in sources)
    if events_topic is not None:
        events = [(t, str(m.data)) for t, m in raw[events_topic]]
        segments = _episodes_from_events(events, events_topic, last_ns)
    else:
        segments = [(first_ns, last_ns, "")]
    task_override = mapping.get("task")

    features: dict[str, Any] = {}
    for src in sources:
        if src.is_image:
            features[src.key] = camera(src.height, src.width, fps)
        else:
            features[src.key] = {"dtype": src.dtype, "shape": list(src.shape), "names": src.names}
    cv2 = _cv2() if any(s.is_image for s in sources) else None
    last_image: dict[str, tuple[int, np.ndarray]] = {}  # per camera: (message index, decoded image)
    frames = skipped = empty = written = 0
    for src in sources:  # a camera whose images OpenCV cannot read fails here, before anything is written
        if src.is_image:
            _decode_image(cv2, src, src.values[0], int(src.stamps[0]))
    existed = out_root.exists()  # and is empty (checked above)
    w = DatasetWriter(out_root, fps=fps, features=features, robot_type=str(mapping.get("robot_type") or ""))
    try:
            for start_ns, end_ns, task in segments:
                task = str(task_override) if task_override is not None else task
                count = int(math.floor((end_ns - start_ns) * 1e-9 * fps + 1e-6)) + 1 if end_ns >= start_ns else 0
                grid = start_ns + frame_offset_ns(np.arange(count), fps)
                grid = grid[grid <= end_ns]
                idx = {s.key: np.searchsorted(s.stamps, grid, side="right") - 1 for s in sources}
                ok = np.all(np.stack([idx[s.key] >= 0 for s in sources]), axis=0) if len(grid) else np.zeros(0, bool)
                skipped += int((~ok).sum())
                kept = np.flatnonzero(ok)
                if not len(kept):
                    empty += 1
                    continue
                for k in kept:
                    frame: dict[str, Any] = {}
                    for src in sources:
                        j = int(idx[src.key][k])
                        if src.is_image:
                            if src.key not in last_image or last_image[src.key][0] != j:
                                last_image[src.key] = (j, _decode_image(cv2, src, src.values[j], int(src.stamps[j])))
                            frame[src.key] = last_image[src.key][1]
                        else:
                            frame[src.key] = src.values[j].reshape(src.shape).astype(src.dtype)
                    w.add_frame(frame, task=task)
                w.end_episode()
                frames += len(kept)
                written += 1
    except BaseException:  # no partial dataset left behind
        w.discard_episode()
        try:
            w.close()
        except DatasetError:
            pass  # the worker's error, if any; the original exception is the one reported
        shutil.rmtree(out_root, ignore_errors=True)
        if existed:
            out_root.mkdir()
        raise
    w.close()
    return {"episodes": written, "frames": frames, "skipped": skipped, "empty": empty}


# ---------------------------------------------------------------------------------------------- CLI glue
def parse_episodes(text: str | Sequence[int] | None) -> list[int] | None:
    """None, a list of ints, or "0,2,5-7" -> episode indices (None: all)."""
    if text is None or isinstance(text, (list, tuple)):
        return None if text is None else [int(e) for e in text]
    out: list[int] = []
    for part in str(text).split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            raise DatasetError(f"--episodes {text!r}: expected indices like 0,2,5-7")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi < lo:
            raise DatasetError(f"--episodes {text!r}: range {part} runs backwards")
        out.extend(range(lo, hi + 1))
    return out


def cmd_to_rosbag(dataset: str | Path, out: str | Path, episodes: str | Sequence[int] | None = None,
                  storage: str = "mcap") -> str:
    """`robo-rl dataset to-rosbag`: export, and write the import mapping as <out>/robo_rl_mapping.yaml."""
    report = dataset_to_bag(dataset, out, episodes=parse_episodes(episodes), storage=storage)
    mapping_path = Path(out) / MAPPING_FILE
    mapping_path.write_text(yaml.safe_dump(dataset_mapping(dataset), sort_keys=False))
    return (f"wrote {report['episodes']} episodes ({report['frames']} frames, {report['duration_s']:.1f} s) of "
            f"{dataset} to {out} ({storage}, topics {', '.join(sorted(report['topics']))}); import mapping "
            f"{mapping_path}")


def cmd_from_rosbag(bag: str | Path, mapping_yaml_path: str | Path, out: str | Path) -> str:
    """`robo-rl dataset from-rosbag`: import with a YAML mapping (its fps is the dataset rate)."""
    report = bag_to_dataset(bag, out, mapping_yaml_path)
    extra = f"; {report['skipped']} frames skipped before every stream started" if report["skipped"] else ""
    extra += f"; {report['empty']} episodes had no complete frame" if report["empty"] else ""
    return f"imported {report['episodes']} episodes ({report['frames']} frames) from {bag} into {out}{extra}"
