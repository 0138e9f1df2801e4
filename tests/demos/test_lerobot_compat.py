"""A dataset written by our DatasetWriter loads with LeRobot's own loader (`lerobot-dataset`, LeRobotDataset).

LeRobot needs its own torch, torchvision, torchcodec and an older PyAV, so it runs in a second virtualenv,
~/.cache/robo_rl/venvs/lerobot-<hash of its pins> (tests/side_venvs.py; ROBO_RL_LEROBOT_VENV overrides the
path); it is built on first use on a machine by `scripts/lerobot_check.py`'s `ensure_venv` (~1.5 min, ~5.6 GB, the
install steps are there) and reused after, from any clone. `scripts/lerobot_check.py` runs inside it and prints
what LeRobot read; these tests compare that with what we wrote and with our own DatasetReader.

Skips, with the reason: the venv could not be built; LeRobot's loader cannot be imported; its videos do not
decode on this machine (then the numerics are still checked).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from robo_rl.demos.dataset_metadata import camera, scalar, vector
from robo_rl.demos.dataset_reader import DatasetReader
from robo_rl.demos.dataset_writer import DatasetWriter
from tests.conftest import load_script
from tests.side_venvs import wait_for

REPO = Path(__file__).resolve().parents[2]
CHECK = REPO / "scripts" / "lerobot_check.py"
FPS = 30
LENGTHS = (40, 33, 47)  # unequal: each episode starts at its own offset in the shared video files
CAMERAS = {"observation.images.scene": (64, 64), "observation.images.wrist": (48, 80)}
TASKS = ("reach the red cube", "push the door")

# building the LeRobot venv the first time on a machine takes ~1.5 min (in the background, tests/side_venvs.py)
pytestmark = [pytest.mark.slow, pytest.mark.side_venv("lerobot")]


def _check_module():
    return load_script("lerobot_check")


def _image(key: str, t: int) -> np.ndarray:
    """Frame t of a camera: smooth gradients plus a per-frame level, so a frame off by one differs by ~9 levels."""
    h, w = CAMERAS[key]
    y, x = np.mgrid[0:h, 0:w]
    level = (9 * t) % 150
    img = np.stack([40 + level + x, 60 + level + y, 200 - level // 2 + 0 * x], axis=-1)
    if key.endswith("wrist"):
        img = img[..., ::-1]
    return np.clip(img, 0, 255).astype(np.uint8)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """A dataset of 3 episodes, 2 cameras, written by our writer; (root, source images by camera)."""
    root = tmp_path_factory.mktemp("lerobot_compat") / "ds"
    feats = {"observation.state": vector(["j0", "j1", "j2"]), "action": vector(["a0", "a1"]),
             "next.reward": scalar(), "next.done": scalar("bool"),
             **{k: camera(h, w, FPS) for k, (h, w) in CAMERAS.items()}}
    images = {k: [] for k in CAMERAS}
    t = 0
    with DatasetWriter(root, fps=FPS, features=feats, robot_type="panda") as w:
        for e, n in enumerate(LENGTHS):
            for i in range(n):
                frame = {"observation.state": [0.25 * t, -t, np.sin(t)], "action": [t + 0.5, 10 * e + i],
                         "next.reward": float(i) / n, "next.done": i == n - 1}
                for k in CAMERAS:
                    frame[k] = _image(k, t)
                    images[k].append(frame[k])
                w.add_frame(frame, task=TASKS[e % 2])
                t += 1
            w.end_episode()
    return root, {k: np.stack(v) for k, v in images.items()}


@pytest.fixture(scope="module")
def lerobot(written, tmp_path_factory):
    """What LeRobot read: (the check's JSON, its decoded images as {camera: (N, H, W, 3)} or None)."""
    python, reason = _check_module().ensure_venv(wait_for("lerobot").path)
    if python is None:
        pytest.skip(f"no LeRobot venv: {reason}")
    root, _ = written
    dump = tmp_path_factory.mktemp("lerobot_dump") / "images.npz"
    r = subprocess.run([str(python), str(CHECK), str(root), "--indices", "all", "--dump", str(dump)],
                       capture_output=True, text=True, timeout=600)
    reason = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}, no message"
    if r.returncode == 2 and reason.startswith("cannot import LeRobot's loader"):
        pytest.skip(reason)
    assert r.returncode in (0, 3), f"LeRobot could not load our dataset: {reason}"
    out = json.loads(r.stdout)
    images = None
    if r.returncode == 0:
        with np.load(dump) as z:
            assert z["index"].tolist() == list(range(sum(LENGTHS)))
            images = {k: z[k] for k in out["video_keys"]}
    return out, images


def test_metadata_matches(written, lerobot):
    root, _ = written
    out, _ = lerobot
    ours = DatasetReader(root)
    assert out["fps"] == FPS == ours.fps
    assert out["num_frames"] == sum(LENGTHS) == ours.num_frames
    assert out["num_episodes"] == len(LENGTHS) == ours.num_episodes
    assert set(out["features"]) == set(ours.features)
    assert sorted(out["video_keys"]) == sorted(CAMERAS)


def test_frames_match_our_reader(written, lerobot):
    """Every frame's numbers through LeRobot's __getitem__ equal our reader's (float32 exact), tasks included."""
    root, _ = written
    out, _ = lerobot
    ours = DatasetReader(root).frames()
    frames = out["frames"]
    assert len(frames) == sum(LENGTHS)
    for key in ("observation.state", "action"):
        theirs = np.array([f[key] for f in frames], dtype=np.float32)
        np.testing.assert_array_equal(theirs, ours[key].astype(np.float32), err_msg=key)
    np.testing.assert_array_equal([f["next.reward"] for f in frames], ours["next.reward"].astype(np.float32))
    np.testing.assert_array_equal([f["next.done"] for f in frames], ours["next.done"])
    for key in ("index", "episode_index", "frame_index", "task_index"):
        np.testing.assert_array_equal([f[key] for f in frames], ours[key], err_msg=key)
    np.testing.assert_allclose([f["timestamp"] for f in frames], ours["timestamp"], atol=1e-6)
    episodes = np.repeat(np.arange(len(LENGTHS)), LENGTHS)
    assert [f["task"] for f in frames] == [TASKS[e % 2] for e in episodes]


def test_images_match_within_codec_tolerance(written, lerobot):
    """Each frame LeRobot decodes is the one we wrote (mean abs diff < 3 of 255), and our reader's decode too."""
    root, source = written
    out, images = lerobot
    if images is None:
        pytest.skip(f"LeRobot's loader read the numbers but not the videos on this machine: {out['video_error']}")
    reader = DatasetReader(root)
    ours = {k: np.concatenate([reader.episode(e)[k] for e in range(len(LENGTHS))]) for k in CAMERAS}
    for key, (h, w) in CAMERAS.items():
        assert out["frames"][0]["images"][key]["shape"] == [3, h, w]
        theirs = images[key].astype(np.int16)
        assert theirs.shape == source[key].shape
        err_source = np.abs(theirs - source[key]).mean(axis=(1, 2, 3))
        err_reader = np.abs(theirs - ours[key]).mean(axis=(1, 2, 3))
        assert err_source.max() < 3, f"{key}: frame {err_source.argmax()} differs from what was written by " \
                                     f"{err_source.max():.2f}"
        assert err_reader.max() < 3, f"{key}: frame {err_reader.argmax()} differs from our reader's by " \
                                     f"{err_reader.max():.2f}"
        means = [f["images"][key]["mean"] for f in out["frames"]]
        np.testing.assert_allclose(means, source[key].mean(axis=(1, 2, 3)) / 255, atol=3 / 255)


def test_video_duration_is_its_frames(lerobot):
    """LeRobot's get_video_duration_in_s of each file (aggregate_datasets offsets the next file by it) = its frames."""
    out, _ = lerobot
    assert out["video_files"]
    for f in out["video_files"]:
        assert f["duration_s"] == pytest.approx(f["last_to_timestamp"], abs=0.5 / FPS), f


def test_image_stats_have_lerobot_shape(written):
    root, _ = written
    stats = json.loads((root / "meta" / "stats.json").read_text())
    for key in CAMERAS:
        for name in ("min", "max", "mean", "std", "q01", "q99"):
            assert np.asarray(stats[key][name]).shape == (3, 1, 1), (key, name)
