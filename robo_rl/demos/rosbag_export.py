"""A LeRobot v3.0 dataset -> a rosbag2 bag (MCAP or sqlite3) of standard ROS 2 messages. numpy, rosbags, OpenCV.

`dataset_to_bag` writes the chosen episodes one after another, `EPISODE_GAP_S` apart, on the topics of
`rosbag_format` (frame `k` of an episode at `episode start + k / fps`, the frame's timestamp, computed from the
frame index rather than read back from the float32 `timestamp` column). Header stamps equal the bag (receive)
timestamps. `dataset_mapping` gives the import mapping (`rosbag_mapping`) that reads such a bag back into the
same features.

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
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from robo_rl.demos.dataset_metadata import DEFAULT_FEATURES
from robo_rl.demos.dataset_reader import DatasetReader
from robo_rl.demos.errors import DatasetError
from robo_rl.demos.rosbag_format import (
    COMMAND_TOPIC,
    COMPRESSED_IMAGE,
    EPISODE_TOPIC,
    IMAGE_PREFIX,
    STATE_TOPIC,
    end_event,
    feature_topic,
    frame_offset_ns,
    image_topic,
    load_cv2,
    load_rosbags,
    message_types,
    names_label,
    start_event,
)
from robo_rl.deploy import ros_interface as ri
from robo_rl.deploy import ros_messages as rm

STORAGES = ("mcap", "sqlite3")
IMAGE_FORMATS = ("jpeg", "png")
EPISODE_GAP_S = 1.0
"""Bag time between one exported episode's last frame and the next one's first."""
BAG_VERSION = 8
"""rosbag2 metadata version written (read by Iron, Jazzy and later)."""


def _check_episodes(episodes: Sequence[int] | None, total: int) -> list[int]:
    """The episode indices to export (None: all `total`); DatasetError for one out of range or given twice."""
    if episodes is None:
        return list(range(total))
    chosen = [int(e) for e in episodes]
    bad = [e for e in chosen if not 0 <= e < total]
    if bad:
        raise DatasetError(f"episode(s) {', '.join(map(str, bad))}: the dataset has {total} episodes (0..{total - 1})")
    if len(set(chosen)) != len(chosen):
        raise DatasetError(f"episodes {chosen}: each episode may be given once")
    return chosen


def _state_names(features: dict[str, Any]) -> list[str] | None:
    """The joint names of observation.state (joint_0, joint_1, ... when it has none); None without the feature."""
    if "observation.state" not in features:
        return None
    spec = features["observation.state"]
    return list(spec.get("names") or [f"joint_{i}" for i in range(int(np.prod(spec["shape"])))])


def _encode_image(cv2: Any, image: np.ndarray, image_format: str, quality: int) -> bytes:
    """An RGB image (H, W, 3) uint8 as JPEG (at `quality`) or PNG bytes."""
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
    _, Writer, StoragePlugin, ts = load_rosbags()
    types = message_types(ts)
    cameras = [k for k in reader.video_keys if k.startswith(IMAGE_PREFIX)]
    state_names = _state_names(features)
    has_velocity = state_names is not None and "observation.velocity" in features
    if has_velocity and (features["observation.velocity"].get("names") or state_names) != state_names:
        raise DatasetError("observation.velocity: its names differ from observation.state's; a JointState needs one "
                           "name list")
    has_action = "action" in features
    action_label = names_label(features["action"].get("names")) if has_action else ""
    skip = {"observation.state", "observation.velocity", "action", *DEFAULT_FEATURES}
    others = [k for k, f in features.items() if f["dtype"] != "video" and k not in skip]
    cv2 = load_cv2() if cameras else None

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
                put(EPISODE_TOPIC, ri.STRING, rm.string_message(types, start_event(i, task)), stamps[0])
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
                            rm.multi_array_message(types, values, (names_label(features[key].get("names")),)), t_ns)
                    for key in cameras:
                        name = key[len(IMAGE_PREFIX):]
                        msg = ts.types[COMPRESSED_IMAGE](
                            header=rm.make_header(types, t_s, name),
                            format=f"rgb8; {image_format} compressed bgr8",
                            data=np.frombuffer(_encode_image(cv2, ep[key][k], image_format, jpeg_quality), np.uint8))
                        put(image_topic(name), COMPRESSED_IMAGE, msg, t_ns)
                put(EPISODE_TOPIC, ri.STRING, rm.string_message(types, end_event(i)), stamps[-1])
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
        out["joints"] = _state_names(features)
    out.update({"features": {}, "episodes": {"topic": EPISODE_TOPIC}})
    if reader.meta.info.get("robot_type"):
        out["robot_type"] = reader.meta.info["robot_type"]
    mapped = out["features"]
    if "observation.state" in features:
        mapped["observation.state"] = {"topic": STATE_TOPIC, "field": "position",
                                       "dtype": features["observation.state"]["dtype"]}
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
