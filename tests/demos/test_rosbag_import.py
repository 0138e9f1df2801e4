"""rosbag2 import (robo_rl.demos.rosbag_import, rosbag_mapping): a hand-written bag resampled by holding the last
value (shuffled and extra joints, a slower camera), episodes from events, one-line mapping errors, image decoding."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

pytest.importorskip("rosbags.rosbag2", reason="needs rosbags (the dev extra)")
cv2 = pytest.importorskip("cv2", reason="needs opencv-python-headless")

from rosbags.rosbag2 import Reader, StoragePlugin, Writer  # noqa: E402
from rosbags.typesys import Stores, get_typestore  # noqa: E402

from robo_rl.cli.demos import dataset_from_rosbag  # noqa: E402
from robo_rl.demos.dataset_reader import DatasetReader  # noqa: E402
from robo_rl.demos.errors import DatasetError  # noqa: E402
from robo_rl.demos.rosbag_format import COMPRESSED_IMAGE, RAW_IMAGE, message_types  # noqa: E402
from robo_rl.demos.rosbag_import import bag_to_dataset, decode_image  # noqa: E402
from robo_rl.demos.rosbag_mapping import FeatureSource  # noqa: E402
from robo_rl.deploy import ros_interface as ri  # noqa: E402
from robo_rl.deploy import ros_messages as rm  # noqa: E402

# ---------------------------------------------------------------------------------------------- a hand-written bag
BAG_JOINTS = ["c", "extra", "a", "d", "b"]  # shuffled, with a joint the dataset does not have
DATASET_JOINTS = ["a", "b", "c", "d"]
MS = 1_000_000
STATE_NS = [3 * MS + 10 * MS * i for i in range(100)]  # 100 Hz, 3 ms after the 50 Hz grid
CMD_NS = [10 * MS * i for i in range(100)]  # 100 Hz, on the grid every other message
CAM_NS = [15 * MS + round(j * 1e9 / 30) for j in range(30)]  # 30 Hz from 15 ms
PD_NAMES = DATASET_JOINTS  # pd_targets arrays are in the robot's (here the dataset's) joint order


def _value(joint: str, i: int, scale: float = 1.0) -> float:
    return scale * (100 * ("abcde".index(joint[0]) + 1) + i) + 0.25


def _level(j: int) -> int:
    return 20 + 6 * j  # distinct flat grey per camera frame


def write_hand_bag(path, command: str, storage=StoragePlugin.MCAP) -> None:
    ts = get_typestore(Stores.ROS2_HUMBLE)
    types = message_types(ts)
    cmd_type = ri.JOINT_TRAJECTORY if command == "trajectory" else ri.FLOAT64_MULTI_ARRAY
    cmd_names = ["d", "b", "a", "c"]
    msgs = []
    for i, t in enumerate(STATE_NS):
        q = np.array([_value(n, i) for n in BAG_JOINTS])
        dq = np.array([_value(n, i, -1.0) for n in BAG_JOINTS])
        msg = rm.joint_state_message(types, BAG_JOINTS, q, dq, None, t * 1e-9)
        msgs.append((t, "/joint_states", ri.JOINT_STATE, msg))
    for i, t in enumerate(CMD_NS):
        if command == "labelled":
            values = np.array([_value(n, i, 2.0) for n in cmd_names])
            msg = rm.multi_array_message(types, values, (",".join(cmd_names),))
        elif command == "trajectory":
            point = types.JointTrajectoryPoint(
                positions=np.array([_value(n, i, 2.0) for n in cmd_names]), velocities=np.zeros(4),
                accelerations=np.zeros(0), effort=np.zeros(0), time_from_start=rm.make_duration(types, 0.01))
            msg = types.JointTrajectory(header=rm.make_header(types, 0.0), joint_names=cmd_names, points=[point])
        else:  # pd_targets: (5, J) rows q, dq, kp, kd, tau
            rows = np.zeros((5, 4))
            rows[0] = [_value(n, i, 2.0) for n in PD_NAMES]
            rows[2] = 40.0
            msg = rm.multi_array_message(types, rows, ("command", "joints"))
        msgs.append((t, "/cmd", cmd_type, msg))
    for j, t in enumerate(CAM_NS):
        img = np.full((60, 80, 3), _level(j), np.uint8)  # resized to 32 x 48 on import
        ok, buf = cv2.imencode(".png", img)
        msg = ts.types[COMPRESSED_IMAGE](header=rm.make_header(types, t * 1e-9, "wrist"), format="png",
                                           data=np.frombuffer(buf.tobytes(), np.uint8))
        msgs.append((t, "/wrist/image/compressed", COMPRESSED_IMAGE, msg))
    msgs.sort(key=lambda m: m[0])
    with Writer(path, version=9, storage_plugin=storage) as w:
        conns = {}
        for t, topic, msgtype, msg in msgs:
            if topic not in conns:
                conns[topic] = w.add_connection(topic, msgtype, typestore=ts)
            w.write(conns[topic], t, ts.serialize_cdr(msg, msgtype))


def hand_mapping() -> dict:
    return {"fps": 50, "joints": list(DATASET_JOINTS), "task": "reach",
            "features": {"observation.state": {"topic": "/joint_states", "field": "position"},
                         "observation.velocity": {"topic": "/joint_states", "field": "velocity"},
                         "action": {"topic": "/cmd"},
                         "observation.images.wrist": {"topic": "/wrist/image/compressed", "height": 32, "width": 48}}}


def _newest(stamps: list[int], t: int) -> int:
    return max(i for i, s in enumerate(stamps) if s <= t)


@pytest.mark.parametrize("command", ["labelled", "trajectory", "pd_targets"])
def test_hand_written_bag_resampled_by_holding_the_last_value(tmp_path, command):
    bag, out = tmp_path / "bag", tmp_path / "ds"
    write_hand_bag(bag, command)
    mapping = hand_mapping()
    if command == "pd_targets":
        mapping["features"]["action"]["names"] = PD_NAMES  # an unlabelled array: in this order
    report = bag_to_dataset(bag, out, mapping)
    # grid 0, 20, ..., 980 ms (first to last mapped message); 0 ms comes before any state and image
    assert report == {"episodes": 1, "frames": 49, "skipped": 1, "empty": 0}
    ds = DatasetReader(out)
    assert ds.fps == 50 and ds.meta.tasks == ["reach"]
    ep = ds.episode(0)
    assert ep["observation.state"].shape == (49, 4) and ep["observation.images.wrist"].shape == (49, 32, 48, 3)
    for f in range(49):
        t = (f + 1) * 20 * MS
        i, c, j = _newest(STATE_NS, t), _newest(CMD_NS, t), _newest(CAM_NS, t)
        assert c == 2 * (f + 1)  # a message stamped exactly at the frame time is used
        np.testing.assert_array_equal(ep["observation.state"][f], np.float32([_value(n, i) for n in DATASET_JOINTS]))
        np.testing.assert_array_equal(ep["observation.velocity"][f],
                                      np.float32([_value(n, i, -1.0) for n in DATASET_JOINTS]))
        np.testing.assert_array_equal(ep["action"][f], np.float32([_value(n, c, 2.0) for n in DATASET_JOINTS]))
        assert abs(float(ep["observation.images.wrist"][f].mean()) - _level(j)) < 1.5, (f, j)
    assert ds.features["action"]["names"] == DATASET_JOINTS


def test_a_start_without_an_end_and_a_sqlite3_bag(tmp_path):
    bag = tmp_path / "bag"
    write_hand_bag(bag, "labelled", storage=StoragePlugin.SQLITE3)
    # a second bag with an events topic: two starts, no end (the last runs to the last mapped message)
    ts = get_typestore(Stores.ROS2_HUMBLE)
    bag2 = tmp_path / "bag2"
    with Reader(bag) as r, Writer(bag2, version=9, storage_plugin=StoragePlugin.MCAP) as w:
        conns = {c.topic: w.add_connection(c.topic, c.msgtype, typestore=ts) for c in r.connections}
        ev = w.add_connection("/ev", ri.STRING, typestore=ts)
        w.write(ev, 100 * MS, ts.serialize_cdr(ts.types[ri.STRING](data="start 0 first"), ri.STRING))
        w.write(ev, 500 * MS, ts.serialize_cdr(ts.types[ri.STRING](data="start 1 second"), ri.STRING))
        for c, t, d in r.messages():
            w.write(conns[c.topic], t, d)
    report = bag_to_dataset(bag2, tmp_path / "ds", {**hand_mapping(), "task": None, "episodes": {"topic": "/ev"}})
    assert report["episodes"] == 2
    ds = DatasetReader(tmp_path / "ds")
    assert [e["length"] for e in ds.meta.episodes] == [20, 25]  # 100..480 ms, 500..980 ms
    assert ds.meta.tasks == ["first", "second"]
    # held across the episode start: the state at 500 ms is the 493 ms message
    np.testing.assert_array_equal(ds.episode(1)["observation.state"][0],
                                  np.float32([_value(n, 49) for n in DATASET_JOINTS]))


# ---------------------------------------------------------------------------------------------- bad mappings
@pytest.fixture(scope="module")
def hand_bag(tmp_path_factory):
    bag = tmp_path_factory.mktemp("hand") / "bag"
    write_hand_bag(bag, "labelled")
    return bag


def _without(d: dict, *path: str) -> dict:
    d = yaml.safe_load(yaml.safe_dump(d))
    target = d
    for p in path[:-1]:
        target = target[p]
    del target[path[-1]]
    return d


def _with(d: dict, value, *path: str) -> dict:
    d = yaml.safe_load(yaml.safe_dump(d))
    target = d
    for p in path[:-1]:
        target = target[p]
    target[path[-1]] = value
    return d


BAD = [
    (_with(hand_mapping(), "/nope", "features", "observation.state", "topic"), "topic /nope is not in the bag"),
    (_with(hand_mapping(), ["a", "b", "zz", "d"], "joints"), "zz"),
    (_with(hand_mapping(), "torque", "features", "observation.state", "field"), "field 'torque'"),
    (_without(hand_mapping(), "features", "observation.velocity", "topic"), "observation.velocity: needs a topic"),
    (_without(hand_mapping(), "features", "observation.images.wrist", "height"), "height and width"),
    (_without(hand_mapping(), "joints"), "give the mapping's joints"),
    (_without(hand_mapping(), "fps"), "fps None"),
    (_with(hand_mapping(), 1, "joint_names"), "unknown key(s) joint_names"),
    (_with(hand_mapping(), {"topic": "/robo_rl/episode"}, "episodes"), "episodes topic /robo_rl/episode is not in"),
    (_with(hand_mapping(), {"topic": "/joint_states"}, "features", "observation.images.top"), "not an image"),
    (_with(hand_mapping(), ["a", "b", "c", "q"], "features", "action", "names"), "joint(s) q not in"),
]


@pytest.mark.parametrize("mapping,expected", BAD, ids=[e for _, e in BAD])
def test_bad_mappings_fail_in_one_line_naming_what_is_missing(hand_bag, tmp_path, mapping, expected):
    with pytest.raises(DatasetError) as info:
        bag_to_dataset(hand_bag, tmp_path / "ds", mapping)
    assert expected in str(info.value) and "\n" not in str(info.value)
    assert not (tmp_path / "ds").exists()  # checked before anything is written


def test_mapping_from_yaml_and_a_missing_bag(hand_bag, tmp_path):
    path = tmp_path / "map.yaml"
    path.write_text(yaml.safe_dump(hand_mapping()))
    assert "1 episodes (49 frames)" in dataset_from_rosbag(hand_bag, path, tmp_path / "ds")
    with pytest.raises(DatasetError, match="not a rosbag2 bag"):
        bag_to_dataset(tmp_path / "nothing", tmp_path / "ds2", hand_mapping())


@pytest.mark.parametrize("bad", [0, 2])  # 50 fps over 100 Hz images: 0, 2 and 4 are used
def test_an_undecodable_image_fails_and_leaves_no_dataset(tmp_path, bad):
    """The first image is checked before the writer starts; a later one fails mid-way: the dataset is removed."""
    ts = get_typestore(Stores.ROS2_HUMBLE)
    types = message_types(ts)
    bag = tmp_path / "bag"
    with Writer(bag, version=9, storage_plugin=StoragePlugin.MCAP) as w:
        js = w.add_connection("/joint_states", ri.JOINT_STATE, typestore=ts)
        cam = w.add_connection("/wrist/image/compressed", COMPRESSED_IMAGE, typestore=ts)
        for i in range(5):
            msg = rm.joint_state_message(types, ["a"], np.ones(1), np.ones(1), None, i * 0.01)
            w.write(js, i * 10 * MS, ts.serialize_cdr(msg, ri.JOINT_STATE))
            data = b"not a jpeg" if i == bad else cv2.imencode(".jpg", np.zeros((16, 16, 3), np.uint8))[1].tobytes()
            img = ts.types[COMPRESSED_IMAGE](header=rm.make_header(types, i * 0.01), format="jpeg",
                                               data=np.frombuffer(data, np.uint8))
            w.write(cam, i * 10 * MS, ts.serialize_cdr(img, COMPRESSED_IMAGE))
    mapping = {"fps": 50, "joints": ["a"], "features": {
        "observation.state": {"topic": "/joint_states"},
        "observation.images.wrist": {"topic": "/wrist/image/compressed", "height": 16, "width": 16}}}
    with pytest.raises(DatasetError, match=f"/wrist/image/compressed at 0.0{bad}0 s: the image .* could not be"):
        bag_to_dataset(bag, tmp_path / "ds", mapping)
    assert not (tmp_path / "ds").exists()


@pytest.mark.parametrize("encoding", ["rgb8", "bgr8", "rgba8", "mono8"])
def test_raw_images_decode_to_rgb(encoding):
    ts = get_typestore(Stores.ROS2_HUMBLE)
    rgb = np.zeros((4, 6, 3), np.uint8)
    rgb[..., 0], rgb[..., 1], rgb[..., 2] = 200, 100, 50
    data = {"rgb8": rgb, "bgr8": rgb[..., ::-1], "rgba8": np.concatenate([rgb, np.full((4, 6, 1), 255, np.uint8)], -1),
            "mono8": rgb[..., :1]}[encoding]
    step = data.shape[1] * data.shape[2] + 2  # rows padded
    padded = np.zeros((4, step), np.uint8)
    padded[:, : data.shape[1] * data.shape[2]] = data.reshape(4, -1)
    msg = ts.types[RAW_IMAGE](header=rm.make_header(message_types(ts), 0.0), height=4, width=6,
                                 encoding=encoding, is_bigendian=0, step=step, data=padded.reshape(-1))
    src = FeatureSource("observation.images.x", "/x", RAW_IMAGE, None, None, "float32", None, height=4, width=6)
    out = decode_image(cv2, src, msg, 0)
    expected = np.repeat(rgb[..., :1], 3, -1) if encoding == "mono8" else rgb
    np.testing.assert_array_equal(out, expected)
