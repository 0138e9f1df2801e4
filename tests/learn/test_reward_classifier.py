"""The reward classifier's training (robo_rl.learn.reward_classifier) and `robo-rl reward-classifier train`: labels
against hand-made flags, the episode split, a tiny dataset trained end to end (files written, held-out accuracy),
and bad input as one line with nothing written."""

from __future__ import annotations

import json

import numpy as np
import pytest

from robo_rl.cli.main import main
from robo_rl.demos.dataset_metadata import camera, scalar, vector
from robo_rl.demos.dataset_writer import DatasetWriter
from robo_rl.deploy.success_classifier import OnnxClassifier
from robo_rl.learn.reward_classifier import IGNORED, split_episodes, success_labels

FPS = 10
SIZE = 32
LENGTH = 24


def toy_frame(rng_seed: int, step: int, first_success: int | None) -> np.ndarray:
    """(32, 32, 3): a green marker and a red cube on grey; the cube slides onto the marker at `first_success`."""
    rng = np.random.default_rng(rng_seed)
    marker = rng.integers(4, SIZE - 10, 2)
    start = rng.integers(4, SIZE - 10, 2)
    arrive = first_success if first_success is not None else 10 * LENGTH  # a failed episode never gets there
    cube = np.round(start + (marker - start) * min(step / arrive, 1.0)).astype(int)
    if first_success is None and np.abs(cube - marker).max() < 6:
        cube = (marker + 12) % (SIZE - 8)  # stays clearly off the marker
    image = np.full((SIZE, SIZE, 3), 110, np.uint8)
    image[marker[0]:marker[0] + 6, marker[1]:marker[1] + 6] = (40, 200, 60)
    image[cube[0]:cube[0] + 6, cube[1]:cube[1] + 6] = (210, 40, 30)
    return image


def write_toy_dataset(root, episodes: int = 10, *, cameras=("scene",), success_key: str | None = "next.success"):
    """A LeRobot dataset of `episodes` toy episodes (every fourth fails) with the camera(s) and success flags."""
    features = {"observation.state": vector(["x"])}
    if success_key:
        features[success_key] = scalar("bool")
    features.update({f"observation.images.{c}": camera(SIZE, SIZE, FPS) for c in cameras})
    with DatasetWriter(root, fps=FPS, features=features, robot_type="toy") as writer:
        for e in range(episodes):
            first = None if e % 4 == 3 else 10 + e % 5
            for t in range(LENGTH):
                frame = {"observation.state": np.zeros(1, np.float32)}
                if success_key:
                    frame[success_key] = first is not None and t >= first
                frame.update({f"observation.images.{c}": toy_frame(e, t, first) for c in cameras})
                writer.add_frame(frame, task="put the cube on the marker")
            writer.end_episode()


def test_labels_are_positive_from_the_first_success_with_a_margin_before_it():
    flags = np.array([0, 0, 0, 0, 0, 1, 1, 0, 1, 1], bool)  # a flicker after the first success stays positive
    assert success_labels(flags, 2).tolist() == [0, 0, 0, IGNORED, IGNORED, 1, 1, 1, 1, 1]
    assert success_labels(flags, 0).tolist() == [0, 0, 0, 0, 0, 1, 1, 1, 1, 1]
    assert success_labels(np.zeros(4, bool), 2).tolist() == [0, 0, 0, 0]  # a failed episode: negatives only
    assert success_labels(np.array([0, 1, 1], bool), 5).tolist() == [IGNORED, 1, 1]  # the margin stops at frame 0
    assert success_labels(np.array([1, 1], bool), 3).tolist() == [1, 1]


def test_episodes_split_into_disjoint_train_and_held_out_sets():
    train, held = split_episodes(10, 0.2, seed=3)
    assert len(held) == 2 and sorted([*train, *held]) == list(range(10))
    assert split_episodes(10, 0.2, seed=3)[1].tolist() == held.tolist()  # seeded
    assert len(split_episodes(2, 0.9, seed=0)[0]) == 1  # at least one left to train on
    assert len(split_episodes(3, 0.01, seed=0)[1]) == 1  # at least one held out
    with pytest.raises(ValueError, match="the dataset has 1 episode.s.; at least 2 are needed"):
        split_episodes(1, 0.2, seed=0)


def test_training_on_a_tiny_dataset_writes_the_model_and_its_spec(tmp_path, capsys):
    """End to end in seconds: 10 toy episodes, 150 steps; the held-out accuracy is printed and recorded in the spec,
    the model loads on the robot side with the trained settings."""
    write_toy_dataset(tmp_path / "ds")
    out = tmp_path / "out" / "toy.onnx"
    code = main(["reward-classifier", "train", "--dataset", str(tmp_path / "ds"), "--out", str(out), "--steps", "150",
                 "--batch-size", "32", "--margin-s", "0.1", "--heldout", "0.3", "--threshold", "0.6",
                 "--debounce", "2"])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "10 episodes, 240 frames of scene (32x32); training on 7 episodes" in printed
    spec = json.loads(out.with_suffix(".json").read_text())
    assert spec["camera"] == "scene" and (spec["height"], spec["width"]) == (SIZE, SIZE)
    assert spec["threshold"] == 0.6 and spec["debounce"] == 2 and spec["extra"]["label_key"] == "next.success"
    accuracy = spec["extra"]["heldout"]["accuracy"]
    assert f"held-out accuracy {accuracy:.4f}" in printed
    assert accuracy >= 0.85, printed  # an easy toy: the classifier learns it, not only runs
    model = OnnxClassifier(out)
    assert model.spec.threshold == 0.6 and model.spec.debounce == 2
    assert 0.0 <= model.prob(toy_frame(0, 0, 10)) <= 1.0


@pytest.mark.parametrize(("make", "args", "fragment"), [
    (dict(cameras=("wrist",)), [], "has no camera 'scene' (cameras: wrist); record it with --cameras scene"),
    (dict(success_key=None), [], "has no success labels ('next.success'); record them"),
    (dict(success_key="next.reward"), ["--label-key", "next.done"], "has no success labels ('next.done')"),
    (dict(), ["--out", "model.pt"], "output 'model.pt' must end in .onnx"),
    (dict(), ["--steps", "0"], "config error: steps = 0: must be >= 1"),
    (dict(), ["--threshold", "1.5"], "config error: threshold = 1.5: must be <= 0.999"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, make, args, fragment):
    write_toy_dataset(tmp_path / "ds", episodes=2, **make)
    out = tmp_path / "out" / "m.onnx"
    code = main(["reward-classifier", "train", "--dataset", str(tmp_path / "ds"), "--out", str(out), *args])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("robo-rl: ") and "Traceback" not in err
    assert fragment in err, err
    assert not (tmp_path / "out").exists()


def test_a_dataset_without_any_success_is_one_line(tmp_path, capsys):
    with DatasetWriter(tmp_path / "ds", fps=FPS, features={"next.success": scalar("bool"), "observation.images.scene":
                                                           camera(SIZE, SIZE, FPS)}) as writer:
        for t in range(4):
            writer.add_frame({"next.success": False, "observation.images.scene": toy_frame(0, t, None)}, task="t")
        writer.end_episode()
    code = main(["reward-classifier", "train", "--dataset", str(tmp_path / "ds"), "--out", str(tmp_path / "m.onnx")])
    err = capsys.readouterr().err
    assert code == 2 and "no episode reaches success (next.success never true): nothing to learn" in err
    code = main(["reward-classifier", "train", "--dataset", str(tmp_path / "none"), "--out", str(tmp_path / "m.onnx")])
    assert code == 2 and "not a dataset (no meta/info.json)" in capsys.readouterr().err
