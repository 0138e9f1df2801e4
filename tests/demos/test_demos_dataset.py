"""LeRobot v3.0 datasets: round trip, layout, kill recovery, drop accounting, appends, bad input."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from robo_rl.demos.dataset_metadata import CODEBASE_VERSION, camera, read_meta, scalar, vector
from robo_rl.demos.dataset_reader import DatasetReader
from robo_rl.demos.dataset_recovery import repair
from robo_rl.demos.dataset_writer import DatasetWriter
from robo_rl.demos.errors import DatasetError
from robo_rl.demos.video_segments import count_video_frames
from tests.conftest import REPO

FPS = 30
FEATURES = {
    "observation.state": vector(["j0", "j1", "j2"]),
    "action": vector(["a0", "a1"]),
    "next.reward": scalar(),
    "next.done": scalar("bool"),
    "observation.images.front": camera(32, 48, FPS),
}


def synthetic_frame(episode: int, i: int, length: int) -> dict[str, np.ndarray]:
    """A deterministic frame (the kill test's child process writes the same ones); smooth images compress well."""
    rng = np.random.default_rng(1000 * episode + i)
    y, x = np.mgrid[0:32, 0:48]
    image = np.stack([128 + 60 * np.sin(x / 8 + i / 5), 128 + 60 * np.cos(y / 6 + episode), np.full(x.shape, 128.0)],
                     -1)
    return {"observation.state": rng.normal(size=3).astype(np.float32),
            "action": rng.normal(size=2).astype(np.float32),
            "next.reward": np.float32(i / length), "next.done": i == length - 1,
            "observation.images.front": image.round().astype(np.uint8)}


def write_episodes(root, lengths, start=0, **kwargs) -> None:
    with DatasetWriter(root, fps=FPS, features=FEATURES, robot_type="test", **kwargs) as w:
        for k, length in enumerate(lengths):
            for i in range(length):
                w.add_frame(synthetic_frame(start + k, i, length), task=f"task {(start + k) % 2}")
            w.end_episode()


def assert_episode_is(reader: DatasetReader, e: int, length: int, *, source_episode: int | None = None) -> None:
    ep = reader.episode(e)
    src = [synthetic_frame(e if source_episode is None else source_episode, i, length) for i in range(length)]
    for key in ("observation.state", "action", "next.reward", "next.done"):
        assert np.array_equal(ep[key], np.stack([f[key] for f in src])), key
    images = np.stack([f["observation.images.front"] for f in src]).astype(int)
    assert ep["observation.images.front"].shape == images.shape
    assert np.abs(ep["observation.images.front"].astype(int) - images).mean() < 5.0  # H.264, yuv420p, 32x48
    assert np.array_equal(ep["frame_index"], np.arange(length))


def test_round_trip_of_sim_frames_with_two_cameras(tmp_path):
    """5 episodes of a real sim rollout with two cameras: states and actions exact, images within codec error."""
    from robo_rl.tasks.task_registry import make_env

    env = make_env("arm-pick-place", 5, seed=0)
    features = {"observation.state": vector(env.joint_names), "action": vector([f"a{i}" for i in range(4)]),
                "observation.images.scene": camera(64, 64, 1 / env.dt),
                "observation.images.track": camera(64, 64, 1 / env.dt)}
    env.reset(random_start=False)
    sent: list[list[dict]] = [[] for _ in range(5)]
    gen = torch.Generator().manual_seed(0)
    for t in range(12 + 5):
        frame_images = {c: env.backend.render_cameras(c, 64, 64).permute(0, 2, 3, 1).numpy().copy()
                        for c in ("scene", "track")}
        action = 0.5 * torch.randn(5, 4, generator=gen)
        for w in range(5):
            if t < 12 + w:  # episodes of different lengths: 12 .. 16 frames
                sent[w].append({"observation.state": env.q[w].numpy().copy(), "action": action[w].numpy(),
                                **{f"observation.images.{c}": frame_images[c][w] for c in ("scene", "track")}})
        env.step(action)
    env.close()
    root = tmp_path / "sim"
    with DatasetWriter(root, fps=1 / env.dt, features=features) as w:
        for frames in sent:
            for f in frames:
                w.add_frame(f, task="pick")
            w.end_episode()
    reader = DatasetReader(root)
    assert reader.num_episodes == 5 and reader.num_frames == sum(len(f) for f in sent)
    for e, frames in enumerate(sent):
        ep = reader.episode(e)
        for key in ("observation.state", "action"):
            assert np.array_equal(ep[key], np.stack([f[key] for f in frames]).astype(np.float32)), key
        for cam in ("scene", "track"):
            key = f"observation.images.{cam}"
            diff = np.abs(ep[key].astype(int) - np.stack([f[key] for f in frames]).astype(int))
            assert ep[key].shape == (len(frames), 64, 64, 3) and diff.mean() < 4.0, (cam, diff.mean())
    for cam in ("scene", "track"):  # every video holds exactly the data's frames, episode after episode
        assert count_video_frames(root / f"videos/observation.images.{cam}/chunk-000/file-000.mp4") == \
            reader.num_frames


def test_layout_follows_lerobot_v3(tmp_path):
    root = tmp_path / "ds"
    write_episodes(root, [10, 7])
    info = json.loads((root / "meta/info.json").read_text())
    assert info["codebase_version"] == CODEBASE_VERSION == "v3.0"
    for key in ("robot_type", "total_episodes", "total_frames", "total_tasks", "chunks_size", "data_files_size_in_mb",
                "video_files_size_in_mb", "fps", "splits", "data_path", "video_path", "features"):
        assert key in info, key
    assert (info["total_episodes"], info["total_frames"], info["total_tasks"]) == (2, 17, 2)
    assert info["splits"] == {"train": "0:2"}
    assert info["data_path"] == "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
    assert info["video_path"] == "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
    for key in ("timestamp", "frame_index", "episode_index", "index", "task_index"):
        assert key in info["features"]
    video = info["features"]["observation.images.front"]
    assert video["dtype"] == "video" and video["shape"] == [32, 48, 3] and video["info"]["video.fps"] == FPS
    data = pq.read_table(root / "data/chunk-000/file-000.parquet")
    assert set(data.column_names) == {"observation.state", "action", "next.reward", "next.done", "timestamp",
                                      "frame_index", "episode_index", "index", "task_index"}
    assert data.column("index").to_pylist() == list(range(17))
    episodes = pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    first = episodes[1]
    assert (first["dataset_from_index"], first["dataset_to_index"], first["length"]) == (10, 17, 7)
    assert first["videos/observation.images.front/from_timestamp"] == pytest.approx(10 / FPS)
    assert first["videos/observation.images.front/to_timestamp"] == pytest.approx(17 / FPS)
    for key in ("tasks", "data/chunk_index", "data/file_index", "videos/observation.images.front/chunk_index",
                "videos/observation.images.front/file_index", "stats/action/mean", "stats/action/q50",
                "stats/observation.images.front/mean", "meta/episodes/chunk_index"):
        assert key in first, key
    tasks = pq.read_table(root / "meta/tasks.parquet")
    assert tasks.to_pylist() == [{"task_index": 0, "task": "task 0"}, {"task_index": 1, "task": "task 1"}]
    assert json.loads(tasks.schema.metadata[b"pandas"])["index_columns"] == ["task"]  # pandas: tasks index
    stats = json.loads((root / "meta/stats.json").read_text())
    assert stats["action"]["count"] == [17] and len(stats["observation.images.front"]["mean"]) == 3
    all_actions = np.stack([synthetic_frame(e, i, n)["action"] for e, n in enumerate([10, 7]) for i in range(n)])
    assert np.allclose(stats["action"]["mean"], all_actions.mean(0), atol=1e-6)
    assert np.allclose(stats["action"]["std"], all_actions.std(0), atol=1e-6)


def test_reopening_appends_episodes_with_continuing_indices(tmp_path):
    root = tmp_path / "ds"
    write_episodes(root, [8, 9])
    write_episodes(root, [5], start=2)
    reader = DatasetReader(root)
    assert reader.num_episodes == 3 and reader.num_frames == 22
    for e, n in enumerate([8, 9, 5]):
        assert_episode_is(reader, e, n)
    assert reader.episode(2)["index"].tolist() == list(range(17, 22))
    assert count_video_frames(root / "videos/observation.images.front/chunk-000/file-000.mp4") == 22


def test_files_roll_over_at_the_size_cap(tmp_path):
    root = tmp_path / "ds"
    write_episodes(root, [20, 20, 20], data_file_mb=0.000001, video_file_mb=0.000001)
    reader = DatasetReader(root)
    files = sorted(p.name for p in (root / "data/chunk-000").iterdir())
    assert files == ["file-000.parquet", "file-001.parquet", "file-002.parquet"]
    assert [e["videos/observation.images.front/from_timestamp"] for e in reader.meta.episodes] == [0.0, 0.0, 0.0]
    for e in range(3):
        assert_episode_is(reader, e, 20)


def test_frames_beyond_the_queue_are_dropped_and_counted(tmp_path):
    features = {"action": vector(["a"]), "observation.images.big": camera(240, 320, FPS)}
    writer = DatasetWriter(tmp_path / "ds", fps=FPS, features=features, queue_frames=1)
    image = np.random.default_rng(0).integers(0, 255, (240, 320, 3), dtype=np.uint8)  # slow to encode
    accepted = sum(writer.add_frame({"action": np.zeros(1), "observation.images.big": image}, task="t", block=False)
                   for _ in range(100))
    writer.end_episode()
    writer.close()
    stats = writer.stats()
    assert stats.frames_dropped > 0 and stats.frames_dropped + stats.frames_written == 100
    assert accepted == stats.frames_written == DatasetReader(tmp_path / "ds").num_frames


def test_end_episode_returns_at_once(tmp_path):
    writer = DatasetWriter(tmp_path / "ds", fps=FPS, features=FEATURES)
    for i in range(60):
        writer.add_frame(synthetic_frame(0, i, 60), task="t")
    t = time.perf_counter()
    writer.end_episode()
    returned = time.perf_counter() - t
    writer.close()
    assert returned < 0.005 and writer.stats().last_commit_s > returned  # the save happened on the worker


def test_bad_input_is_one_clear_error(tmp_path):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.txt").write_text("x")
    with pytest.raises(DatasetError, match="exists and is not a dataset"):
        DatasetWriter(tmp_path / "notes", fps=FPS, features=FEATURES)
    with pytest.raises(DatasetError, match="filled by the writer"):
        DatasetWriter(tmp_path / "a", fps=FPS, features={"index": scalar("int64")})
    with pytest.raises(DatasetError, match="both even"):
        DatasetWriter(tmp_path / "b", fps=FPS, features={"observation.images.x": camera(31, 48, FPS)})
    writer = DatasetWriter(tmp_path / "c", fps=FPS, features=FEATURES)
    with pytest.raises(DatasetError, match="frame lacks feature"):
        writer.add_frame({"action": np.zeros(2)}, task="t")
    bad = synthetic_frame(0, 0, 1)
    bad["observation.images.front"] = np.zeros((10, 10, 3), np.uint8)
    writer.add_frame(bad, task="t")
    with pytest.raises(DatasetError, match=r"camera observation.images.front: image \(10, 10, 3\)"):
        writer.flush()
    with pytest.raises(DatasetError, match="not a dataset"):
        DatasetReader(tmp_path / "notes")
    with pytest.raises(DatasetError, match="has fps 30.0, not 50"):
        write_episodes(tmp_path / "d", [3])
        DatasetWriter(tmp_path / "d", fps=50)


CHILD = """
import sys, time
sys.path.insert(0, {repo!r})
from tests.demos.test_demos_dataset import FEATURES, FPS, synthetic_frame
from robo_rl.demos.dataset_writer import DatasetWriter
w = DatasetWriter({root!r}, fps=FPS, features=FEATURES)
for e, length in enumerate([40, 50, 45]):
    for i in range(length):
        w.add_frame(synthetic_frame(e, i, length), task="t")
    w.end_episode()
w.flush()
print("committed", flush=True)
for i in range({partial}):
    w.add_frame(synthetic_frame(3, i, 1000), task="t")
w.flush()
print("mid", flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("partial, recovered", [(70, 60), (20, 0)])
def test_sigkill_mid_episode_keeps_committed_episodes_and_recovers_the_flushed_part(tmp_path, partial, recovered):
    """70 frames into episode 4 two flushes (one per second of frames) are on disk: 60 frames come back;
    after 20 frames nothing was flushed and the episode is discarded."""
    root = tmp_path / "ds"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", CHILD.format(repo=str(REPO), root=str(root), partial=partial)],
                            env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "committed"
        assert proc.stdout.readline().strip() == "mid"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert (root / ".staging").exists()
    report = repair(root, min_recover_frames=FPS)
    assert report["recovered"] == (1 if recovered else 0) and report["discarded"] == (0 if recovered else 1)
    reader = DatasetReader(root)
    lengths = [40, 50, 45] + ([recovered] if recovered else [])
    assert [e["length"] for e in reader.meta.episodes] == lengths
    for e, n in enumerate([40, 50, 45]):
        assert_episode_is(reader, e, n)
    if recovered:
        ep = reader.episode(3)
        expected = np.stack([synthetic_frame(3, i, 1000)["action"] for i in range(recovered)])
        assert np.array_equal(ep["action"], expected)
    info = json.loads((root / "meta/info.json").read_text())
    assert info["total_frames"] == sum(lengths) == reader.num_frames == len(reader.frames(["index"])["index"])
    assert count_video_frames(root / "videos/observation.images.front/chunk-000/file-000.mp4") == sum(lengths)
    assert not (root / ".staging").exists()
    write_episodes(root, [6], start=9)  # and the dataset takes new episodes after it
    assert read_meta(root).num_frames == sum(lengths) + 6


def test_repair_cuts_rows_and_video_of_an_uncommitted_episode(tmp_path):
    """A kill between the data/video writes and the meta/episodes row leaves extra rows and frames: cut them."""
    root = tmp_path / "ds"
    write_episodes(root, [10, 12])
    episodes_file = root / "meta/episodes/chunk-000/file-000.parquet"
    rows = pq.read_table(episodes_file).to_pylist()
    import pyarrow as pa

    pq.write_table(pa.Table.from_pylist(rows[:1]), episodes_file)  # as if the second commit stopped before its row
    report = repair(root)
    assert report["cut_rows"] == 12 and report["cut_frames"] == 12
    reader = DatasetReader(root)
    assert reader.num_frames == 10 and len(reader.frames(["index"])["index"]) == 10
    assert count_video_frames(root / "videos/observation.images.front/chunk-000/file-000.mp4") == 10
    assert_episode_is(reader, 0, 10)
