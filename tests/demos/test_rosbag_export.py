"""rosbag2 export (robo_rl.demos.rosbag_export) and `robo-rl dataset to-rosbag / from-rosbag`: dataset -> bag ->
dataset round trips (MCAP, sqlite3), chosen episodes in the given order."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("rosbags.rosbag2", reason="needs rosbags (the dev extra)")
pytest.importorskip("cv2", reason="needs opencv-python-headless")

from rosbags.rosbag2 import Reader  # noqa: E402
from rosbags.typesys import Stores, get_typestore  # noqa: E402

from robo_rl.cli.demos import MAPPING_FILE, dataset_from_rosbag, dataset_to_rosbag, parse_episodes  # noqa: E402
from robo_rl.demos.dataset_metadata import camera, scalar, vector  # noqa: E402
from robo_rl.demos.dataset_reader import DatasetReader  # noqa: E402
from robo_rl.demos.dataset_writer import DatasetWriter  # noqa: E402
from robo_rl.demos.errors import DatasetError  # noqa: E402
from robo_rl.demos.rosbag_export import dataset_mapping, dataset_to_bag  # noqa: E402
from robo_rl.demos.rosbag_format import COMPRESSED_IMAGE, EPISODE_TOPIC  # noqa: E402
from robo_rl.demos.rosbag_import import bag_to_dataset  # noqa: E402
from robo_rl.deploy import ros_interface as ri  # noqa: E402

FPS = 20
JOINTS = ["shoulder", "elbow", "wrist"]
H, W = 32, 48
FEATURES = {
    "observation.state": vector(JOINTS),
    "observation.velocity": vector(JOINTS),
    "action": vector(JOINTS),
    "next.reward": scalar(),
    "next.done": scalar("bool"),
    "observation.images.front": camera(H, W, FPS),
}
LENGTHS = [5, 8, 6]


def _image(episode: int, i: int) -> np.ndarray:
    y, x = np.mgrid[0:H, 0:W]
    img = np.stack([128 + 60 * np.sin(x / 8 + i / 3), 128 + 60 * np.cos(y / 6 + episode), np.full(x.shape, 90.0)], -1)
    return img.round().astype(np.uint8)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("rosbag") / "src"
    rng = np.random.default_rng(3)
    with DatasetWriter(root, fps=FPS, features=FEATURES, robot_type="arm") as w:
        for e, length in enumerate(LENGTHS):
            for i in range(length):
                w.add_frame({"observation.state": rng.normal(size=3).astype(np.float32),
                             "observation.velocity": rng.normal(size=3).astype(np.float32),
                             "action": rng.normal(size=3).astype(np.float32),
                             "next.reward": np.float32(rng.normal()), "next.done": i == length - 1,
                             "observation.images.front": _image(e, i)}, task=f"task {e % 2}")
            w.end_episode()
    return root


def _episodes_equal(src: DatasetReader, dst: DatasetReader, order: list[int]) -> None:
    assert dst.num_episodes == len(order)
    assert dst.fps == src.fps
    for j, i in enumerate(order):
        a, b = src.episode(i), dst.episode(j)
        assert len(b["index"]) == LENGTHS[i]
        for key in ("observation.state", "observation.velocity", "action", "next.reward", "next.done"):
            assert b[key].dtype == a[key].dtype, key
            np.testing.assert_array_equal(b[key], a[key], err_msg=key)  # float32 -> float64 -> float32: exact
        diff = np.abs(b["observation.images.front"].astype(int) - a["observation.images.front"].astype(int))
        assert diff.mean() < 3.0 and np.percentile(diff, 99) < 16, (diff.mean(), diff.max())
        assert dst.meta.episodes[j]["tasks"] == src.meta.episodes[i]["tasks"]
    for key in ("observation.state", "action"):
        assert dst.features[key]["names"] == JOINTS


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_round_trip_through_a_bag(dataset, tmp_path, storage):
    bag, out = tmp_path / "bag", tmp_path / "imported"
    if storage == "mcap":  # the CLI glue: JPEG, the mapping written into the bag folder, one-line summaries
        line = dataset_to_rosbag(dataset, bag, None, storage)
        assert "\n" not in line and "3 episodes" in line and "19 frames" in line
        line = dataset_from_rosbag(bag, bag / MAPPING_FILE, out)
        assert "\n" not in line and "3 episodes (19 frames)" in line
    else:
        report = dataset_to_bag(dataset, bag, storage=storage, image_format="png")
        assert report["episodes"] == 3 and report["frames"] == sum(LENGTHS)
        assert bag_to_dataset(bag, out, dataset_mapping(dataset))["skipped"] == 0
    suffix = ".mcap" if storage == "mcap" else ".db3"
    assert any(p.suffix == suffix for p in bag.iterdir())
    with Reader(bag) as r:
        types = {c.topic: c.msgtype for c in r.connections}
        counts = {c.topic: c.msgcount for c in r.connections}
        ts = get_typestore(Stores.ROS2_HUMBLE)
        events = [ts.deserialize_cdr(d, c.msgtype).data for c, _, d in r.messages()
                  if c.topic == EPISODE_TOPIC]
    assert types == {"/joint_states": ri.JOINT_STATE, "/joint_commands": ri.FLOAT64_MULTI_ARRAY,
                     "/front/image/compressed": COMPRESSED_IMAGE, "/robo_rl/episode": ri.STRING,
                     "/robo_rl/feature/next/reward": ri.FLOAT64_MULTI_ARRAY,
                     "/robo_rl/feature/next/done": ri.FLOAT64_MULTI_ARRAY}
    assert counts["/joint_states"] == counts["/front/image/compressed"] == sum(LENGTHS)
    assert events == ["start 0 task 0", "end 0", "start 1 task 1", "end 1", "start 2 task 0", "end 2"]
    _episodes_equal(DatasetReader(dataset), DatasetReader(out), [0, 1, 2])


def test_chosen_episodes_in_the_given_order(dataset, tmp_path):
    bag, out = tmp_path / "bag", tmp_path / "imported"
    dataset_to_bag(dataset, bag, episodes=[2, 0])
    mapping = {**dataset_mapping(dataset), "task": "renamed"}
    bag_to_dataset(bag, out, mapping)
    dst = DatasetReader(out)
    assert [e["length"] for e in dst.meta.episodes] == [LENGTHS[2], LENGTHS[0]]
    assert dst.meta.tasks == ["renamed"]
    src = DatasetReader(dataset)
    np.testing.assert_array_equal(dst.episode(0)["action"], src.episode(2)["action"])
    with pytest.raises(DatasetError, match="episode\\(s\\) 7: the dataset has 3 episodes"):
        dataset_to_bag(dataset, tmp_path / "bag2", episodes=[7])
    with pytest.raises(DatasetError, match="exists"):
        dataset_to_bag(dataset, bag)


def test_episodes_flag_takes_indices_and_ranges():
    assert parse_episodes("0,2,5-7") == [0, 2, 5, 6, 7] and parse_episodes(None) is None
    assert parse_episodes([3, 1]) == [3, 1]
    for bad, expected in (("2-1", "range 2-1 runs backwards"), ("a", "expected indices like 0,2,5-7")):
        with pytest.raises(ValueError, match=expected) as info:
            parse_episodes(bad)
        assert "\n" not in str(info.value) and f"--episodes '{bad}'" in str(info.value)
