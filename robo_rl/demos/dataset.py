"""LeRobot v3.0 datasets: a crash-safe writer that never blocks its caller, and a reader. numpy, pyarrow, PyAV.

Layout (LeRobot `codebase_version` "v3.0"; the `lerobot` package is not needed):

    meta/info.json                          fps, features (dtype, shape, names), path templates, sizes, totals
    meta/stats.json                         per feature: min, max, mean, std, count, q01 q10 q50 q90 q99
    meta/tasks.parquet                      task strings (the pandas index) -> task_index
    meta/episodes/chunk-000/file-000.parquet  one row per episode: index ranges, data and video files,
                                            video timestamp ranges, per-episode stats
    data/chunk-000/file-000.parquet         one row per frame, many episodes per file (size cap)
    videos/<camera key>/chunk-000/file-000.mp4  many episodes per file, one after another

**Never blocking.** `DatasetWriter.add_frame` and `end_episode` only queue work for one background
thread, which encodes camera frames as they arrive (so an episode's save is a few file renames and
a stream copy, not a 30-60 s encode) and reports drops: with `block=False` a full queue drops the
frame and counts it (`stats()`), never silently.

**Crash safety.** Every file is replaced atomically (written beside, then renamed). An episode is
committed in this order: its data rows, its video segments, then its row in `meta/episodes` (the
commit point), then tasks, info and stats. While an episode is being recorded, its numeric rows go
to `.staging/frames.arrow` (an Arrow IPC stream, flushed every second) and its images to fragmented
MP4 files (`.staging/<camera>.mp4`), both readable up to their last flush. Opening a dataset after a
kill (`DatasetWriter(root)` again, or `repair(root)`): rows and video beyond the last committed
episode are cut, totals and stats are recomputed from `meta/episodes`, and an interrupted episode is
recovered up to its last flushed second (at least `min_recover_frames` frames) or discarded.
"""

from __future__ import annotations

import json
import queue
import shutil
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import av
import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from robo_rl.core.files import atomic_write
from robo_rl.demos.errors import DatasetError
from robo_rl.demos.video_segments import append_video, count_video_frames, decode_video, open_encoder, truncate_video

__all__ = ["DatasetError", "DatasetReader", "DatasetWriter", "camera", "count_video_frames", "read_meta", "repair",
           "scalar", "vector"]

CODEBASE_VERSION = "v3.0"
CHUNKS_SIZE = 1000
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
STAGING = ".staging"
_IMAGE_SAMPLES = 64
"""Frames per episode and camera that image stats are computed from (evenly spaced)."""
QUANTILES = (0.01, 0.10, 0.50, 0.90, 0.99)
DEFAULT_FEATURES: dict[str, dict[str, Any]] = {
    "timestamp": {"dtype": "float32", "shape": [1], "names": None},
    "frame_index": {"dtype": "int64", "shape": [1], "names": None},
    "episode_index": {"dtype": "int64", "shape": [1], "names": None},
    "index": {"dtype": "int64", "shape": [1], "names": None},
    "task_index": {"dtype": "int64", "shape": [1], "names": None},
}
"""Per-frame features every LeRobot v3.0 dataset has; the writer fills them."""
NUMERIC_DTYPES = ("float32", "float64", "int64", "int32", "bool")


# ---------------------------------------------------------------------------------------------- features
def vector(names: Sequence[str], dtype: str = "float32") -> dict[str, Any]:
    """A 1-D numeric feature with named components (joint names, action columns)."""
    return {"dtype": dtype, "shape": [len(names)], "names": list(names)}


def scalar(dtype: str = "float32") -> dict[str, Any]:
    """A per-frame scalar (`next.reward` float32, `next.done` bool): stored as one value per row."""
    return {"dtype": dtype, "shape": [1], "names": None}


def camera(height: int, width: int, fps: float, codec: str = "h264") -> dict[str, Any]:
    """A video feature (H, W, 3) uint8 RGB; LeRobot's `video.*` info keys."""
    return {
        "dtype": "video", "shape": [height, width, 3], "names": ["height", "width", "channels"],
        "info": {"video.height": height, "video.width": width, "video.codec": codec, "video.pix_fmt": "yuv420p",
                 "video.is_depth_map": False, "video.fps": fps, "video.channels": 3, "has_audio": False},
    }


def _video_keys(features: Mapping[str, Any]) -> list[str]:
    return [k for k, f in features.items() if f["dtype"] == "video"]


def _frame_keys(features: Mapping[str, Any]) -> list[str]:
    """The caller's numeric features (not the defaults the writer fills, not videos)."""
    return [k for k, f in features.items() if f["dtype"] != "video" and k not in DEFAULT_FEATURES]


def _check_features(features: Mapping[str, Any]) -> None:
    for key, f in features.items():
        if key in DEFAULT_FEATURES:
            raise DatasetError(f"feature {key!r} is filled by the writer; leave it out")
        if f.get("dtype") not in (*NUMERIC_DTYPES, "video"):
            allowed = ", ".join((*NUMERIC_DTYPES, "video"))
            raise DatasetError(f"feature {key!r}: dtype {f.get('dtype')!r} is not one of {allowed}")
        shape = f.get("shape")
        if not isinstance(shape, (list, tuple)) or not shape or not all(isinstance(d, int) and d > 0 for d in shape):
            raise DatasetError(f"feature {key!r}: shape {shape!r} must be a non-empty list of positive integers")
        if f["dtype"] == "video" and (len(shape) != 3 or shape[2] != 3 or shape[0] % 2 or shape[1] % 2):
            raise DatasetError(f"feature {key!r}: video shape {shape} must be [height, width, 3], both even")


def write_json(path: Path, obj: Any) -> None:
    atomic_write(path, lambda tmp: Path(tmp).write_text(json.dumps(obj, indent=2)))


def write_parquet(path: Path, table: pa.Table) -> None:
    atomic_write(path, lambda tmp: pq.write_table(table, tmp))


def _tasks_table(tasks: Sequence[str]) -> pa.Table:
    """meta/tasks.parquet as pandas writes a DataFrame indexed by task (what LeRobot's loader reads)."""
    table = pa.table({"task_index": pa.array(range(len(tasks)), pa.int64()),
                      "task": pa.array(list(tasks), pa.string())})
    pandas_meta = {
        "index_columns": ["task"], "column_indexes": [],
        "columns": [
            {"name": "task_index", "field_name": "task_index", "pandas_type": "int64", "numpy_type": "int64",
             "metadata": None},
            {"name": "task", "field_name": "task", "pandas_type": "unicode", "numpy_type": "object", "metadata": None},
        ],
        "creator": {"library": "robo_rl"}, "pandas_version": "2.2.0",
    }
    return table.replace_schema_metadata({b"pandas": json.dumps(pandas_meta).encode()})


# ---------------------------------------------------------------------------------------------- stats
def feature_stats(values: np.ndarray) -> dict[str, np.ndarray]:
    """min, max, mean, std, count and quantiles over axis 0 of (T, ...) values (images: per channel in [0, 1])."""
    x = values.astype(np.float64)
    if x.ndim == 4:  # (T, H, W, 3) images -> per channel, LeRobot's (3, 1, 1) layout
        x = x.reshape(-1, 3) / 255.0
        shape = (3, 1, 1)
    else:
        x = x.reshape(len(x), -1)
        shape = x.shape[1:]
    out = {"min": x.min(0), "max": x.max(0), "mean": x.mean(0), "std": x.std(0)}
    for q in QUANTILES:
        out[f"q{round(q * 100):02d}"] = np.quantile(x, q, axis=0)
    out = {k: v.reshape(shape) for k, v in out.items()}
    out["count"] = np.array([len(values)])
    return out


def aggregate_stats(parts: Sequence[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Dataset stats from per-episode stats: exact min/max/mean/std; quantiles count-weighted means (as LeRobot)."""
    counts = np.array([float(p["count"][0]) for p in parts])
    w = counts / counts.sum()
    means = np.stack([p["mean"] for p in parts])
    mean = np.tensordot(w, means, axes=1)
    second = np.tensordot(w, np.stack([p["std"] ** 2 + p["mean"] ** 2 for p in parts]), axes=1)
    out = {
        "min": np.min(np.stack([p["min"] for p in parts]), 0),
        "max": np.max(np.stack([p["max"] for p in parts]), 0),
        "mean": mean,
        "std": np.sqrt(np.maximum(second - mean**2, 0.0)),
        "count": np.array([int(counts.sum())]),
    }
    for q in QUANTILES:
        key = f"q{round(q * 100):02d}"
        out[key] = np.tensordot(w, np.stack([p[key] for p in parts]), axes=1)
    return out


def _stats_to_json(stats: dict[str, dict[str, np.ndarray]]) -> dict[str, dict[str, list]]:
    return {k: {s: v.tolist() for s, v in st.items()} for k, st in stats.items()}


# ---------------------------------------------------------------------------------------------- metadata
@dataclass
class Meta:
    """What meta/ says: info, committed episode rows, tasks."""

    root: Path
    info: dict[str, Any]
    episodes: list[dict[str, Any]] = field(default_factory=list)
    tasks: list[str] = field(default_factory=list)

    @property
    def fps(self) -> float:
        return float(self.info["fps"])

    @property
    def features(self) -> dict[str, Any]:
        return self.info["features"]

    @property
    def num_frames(self) -> int:
        return int(self.episodes[-1]["dataset_to_index"]) if self.episodes else 0


def read_meta(root: str | Path) -> Meta:
    """info.json, every meta/episodes file (in order) and tasks; DatasetError naming what is missing."""
    root = Path(root)
    info_path = root / "meta" / "info.json"
    if not info_path.is_file():
        raise DatasetError(f"{root}: not a dataset (no meta/info.json)")
    info = json.loads(info_path.read_text())
    if info.get("codebase_version") != CODEBASE_VERSION:
        raise DatasetError(f"{root}: codebase_version {info.get('codebase_version')!r}; this reader reads "
                           f"{CODEBASE_VERSION}")
    episodes: list[dict[str, Any]] = []
    for path in sorted((root / "meta" / "episodes").glob("chunk-*/file-*.parquet")):
        episodes.extend(pq.read_table(path).to_pylist())
    episodes.sort(key=lambda e: e["episode_index"])
    tasks_path = root / "meta" / "tasks.parquet"
    tasks: list[str] = []
    if tasks_path.is_file():
        rows = pq.read_table(tasks_path).to_pylist()
        tasks = [r["task"] for r in sorted(rows, key=lambda r: r["task_index"])]
    return Meta(root, info, episodes, tasks)


def _data_file(root: Path, chunk: int, file: int) -> Path:
    return root / DATA_PATH.format(chunk_index=chunk, file_index=file)


def _video_file(root: Path, key: str, chunk: int, file: int) -> Path:
    return root / VIDEO_PATH.format(video_key=key, chunk_index=chunk, file_index=file)


def _episode_stats(ep: Mapping[str, Any], keys: Sequence[str]) -> dict[str, dict[str, np.ndarray]]:
    out = {}
    for key in keys:
        prefix = f"stats/{key}/"
        out[key] = {name[len(prefix):]: np.asarray(v) for name, v in ep.items() if name.startswith(prefix)}
    return out


def _info_with_totals(info: dict[str, Any], meta: Meta) -> dict[str, Any]:
    e = len(meta.episodes)
    return {**info, "total_episodes": e, "total_frames": meta.num_frames, "total_tasks": len(meta.tasks),
            "splits": {"train": f"0:{e}"}}


def _write_summary(meta: Meta) -> None:
    """info.json totals and stats.json, both recomputed from the committed episodes."""
    write_json(meta.root / "meta" / "info.json", _info_with_totals(meta.info, meta))
    keys = [k for k in meta.features]
    if meta.episodes:
        per_episode = [_episode_stats(ep, keys) for ep in meta.episodes]
        stats = {k: aggregate_stats([p[k] for p in per_episode]) for k in keys if per_episode[0][k]}
        write_json(meta.root / "meta" / "stats.json", _stats_to_json(stats))


def repair(root: str | Path, *, min_recover_frames: int = 1) -> dict[str, int]:
    """Make a dataset consistent after a kill; returns {"cut_rows", "cut_frames", "recovered", "discarded"}.

    Everything beyond the last row of meta/episodes goes (data rows, video frames, unreferenced
    files); info and stats are recomputed from the committed rows; a staged (interrupted) episode is
    recovered up to its last flush when it has at least `min_recover_frames` frames, else discarded.
    """
    meta = read_meta(root)
    report = {"cut_rows": 0, "cut_frames": 0, "recovered": 0, "discarded": 0}
    root = meta.root
    referenced_data = {(int(e["data/chunk_index"]), int(e["data/file_index"])) for e in meta.episodes}
    for path in sorted((root / "data").glob("chunk-*/file-*.parquet")):
        chunk, file = int(path.parent.name[6:]), int(path.stem[5:])
        if (chunk, file) not in referenced_data:
            report["cut_rows"] += pq.read_metadata(path).num_rows
            path.unlink()
            continue
        table = pq.read_table(path)
        keep = np.asarray(table.column("index")) < meta.num_frames
        if not keep.all():
            report["cut_rows"] += int((~keep).sum())
            write_parquet(path, table.filter(pa.array(keep)))
    for key in _video_keys(meta.features):
        ends: dict[tuple[int, int], int] = {}
        for e in meta.episodes:
            where = (int(e[f"videos/{key}/chunk_index"]), int(e[f"videos/{key}/file_index"]))
            ends[where] = max(ends.get(where, 0), round(float(e[f"videos/{key}/to_timestamp"]) * meta.fps))
        for path in sorted((root / "videos" / key).glob("chunk-*/file-*.mp4")):
            chunk, file = int(path.parent.name[6:]), int(path.stem[5:])
            frames = count_video_frames(path)
            want = ends.get((chunk, file), 0)
            if frames > want:
                report["cut_frames"] += frames - want
                truncate_video(path, want, meta.fps)
    for stale in root.rglob(".*.tmp"):
        stale.unlink()
    staging = root / STAGING
    if staging.exists():
        recovered = _recover_staging(meta, min_recover_frames)
        report["recovered" if recovered else "discarded"] += 1
    _write_summary(meta)
    return report


# ---------------------------------------------------------------------------------------------- writer
@dataclass
class WriterStats:
    frames_written: int = 0
    frames_dropped: int = 0
    episodes_committed: int = 0
    last_commit_s: float = 0.0
    """Seconds the worker spent committing the last episode (not the caller's time: it never waits)."""


class DatasetWriter:
    """Create (or append to, after repairing) a LeRobot v3.0 dataset at `root`; see the module docstring.

    Args:
        root: dataset folder.
        fps: frame rate (new dataset; an existing one keeps its own and must agree).
        features: caller features, name -> spec (`vector`, `scalar`, `camera`); the defaults
            (timestamp, frame_index, episode_index, index, task_index) are added.
        robot_type: LeRobot's `robot_type`.
        extra_info: more keys for info.json (our deploy contract: joint names, rates).
        queue_frames: frames the background thread may lag behind before `add_frame(block=False)` drops.
        data_file_mb, video_file_mb: file size caps before a new file is started (LeRobot: 100, 200).
        min_recover_frames: an interrupted episode found on open is recovered if it has this many frames.
    """

    def __init__(self, root: str | Path, *, fps: float | None = None, features: Mapping[str, Any] | None = None,
                 robot_type: str = "", extra_info: Mapping[str, Any] | None = None, queue_frames: int = 256,
                 data_file_mb: float = 100.0, video_file_mb: float = 200.0, min_recover_frames: int = 1):
        self.root = Path(root)
        if (self.root / "meta" / "info.json").is_file():
            repair(self.root, min_recover_frames=min_recover_frames)
            self.meta = read_meta(self.root)
            if fps is not None and float(fps) != self.meta.fps:
                raise DatasetError(f"{self.root}: has fps {self.meta.fps}, not {fps}")
            if features is not None and {**features, **DEFAULT_FEATURES} != self.meta.features:
                raise DatasetError(f"{self.root}: its features differ from the ones given "
                                   f"({sorted(self.meta.features)} vs {sorted({**features, **DEFAULT_FEATURES})})")
        else:
            if fps is None or not fps > 0 or features is None:
                raise DatasetError(f"{self.root}: a new dataset needs fps > 0 and features")
            if self.root.exists() and any(self.root.iterdir()):
                raise DatasetError(f"{self.root}: exists and is not a dataset; choose an empty or new folder")
            _check_features(features)
            info = {
                "codebase_version": CODEBASE_VERSION, "robot_type": robot_type, "total_episodes": 0,
                "total_frames": 0, "total_tasks": 0, "chunks_size": CHUNKS_SIZE,
                "data_files_size_in_mb": data_file_mb, "video_files_size_in_mb": video_file_mb, "fps": fps,
                "splits": {}, "data_path": DATA_PATH, "video_path": VIDEO_PATH,
                "features": {**features, **DEFAULT_FEATURES}, **dict(extra_info or {}),
            }
            self.meta = Meta(self.root, info)
            write_json(self.root / "meta" / "info.json", info)
        self.fps = self.meta.fps
        self.features = self.meta.features
        self.video_keys = _video_keys(self.features)
        self.frame_keys = _frame_keys(self.features)
        self._stats = WriterStats()
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, queue_frames))
        self._error: BaseException | None = None
        self._episode: _Episode | None = None  # worker-owned
        self._worker = threading.Thread(target=self._run, name="dataset-writer", daemon=True)
        self._worker.start()

    # ------------------------------------------------------------------ caller side (never waits on disk)
    def add_frame(self, frame: Mapping[str, Any], task: str, *, block: bool = True) -> bool:
        """Queue one frame (every caller feature; images (H, W, 3) uint8); False when dropped (block=False)."""
        self._raise_worker_error()
        missing = [k for k in (*self.frame_keys, *self.video_keys) if k not in frame]
        if missing:
            raise DatasetError(f"frame lacks feature(s) {', '.join(missing)}")
        item = ("frame", {k: np.array(frame[k]) for k in (*self.frame_keys, *self.video_keys)}, task)
        try:
            self._queue.put(item, block=block)
        except queue.Full:
            self._stats.frames_dropped += 1
            return False
        return True

    def end_episode(self) -> None:
        """Commit the frames added since the last episode as one episode (on the worker; returns at once)."""
        self._raise_worker_error()
        self._queue.put(("end",))

    def discard_episode(self) -> None:
        """Drop the frames added since the last episode."""
        self._queue.put(("discard",))

    def flush(self) -> None:
        """Wait until everything queued so far is on disk."""
        self._queue.join()
        self._raise_worker_error()

    def stats(self) -> WriterStats:
        return WriterStats(**vars(self._stats))

    def close(self) -> None:
        """Finish queued work; an episode still open is committed (call `discard_episode` first to drop it)."""
        if self._worker.is_alive():
            self._queue.put(("end",))
            self._stop_worker()
        self._raise_worker_error()

    def __enter__(self) -> DatasetWriter:
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if exc_type is not None:  # a failure inside the block: its half-recorded episode is not an episode
            self.discard_episode()
        self.close()

    def _stop_worker(self) -> None:
        self._queue.put(("stop",))
        self._worker.join()

    def _raise_worker_error(self) -> None:
        if self._error is not None:
            raise DatasetError(f"{self.root}: the writer failed: {self._error}") from self._error

    # ------------------------------------------------------------------ worker
    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item[0] == "stop":
                    return
                if self._error is None:
                    self._handle(item)
            except BaseException as exc:  # reported to the caller on its next call
                self._error = exc
            finally:
                self._queue.task_done()

    def _handle(self, item: tuple) -> None:
        kind = item[0]
        if kind == "frame":
            if self._episode is None:
                self._episode = _Episode.start(self.root / STAGING, self.meta, item[2])
            self._episode.add(item[1])
            self._stats.frames_written += 1
        elif kind == "end" and self._episode is not None:
            t = time.perf_counter()
            episode, self._episode = self._episode, None
            episode.close()
            if episode.length:
                _commit(self.meta, episode.root, episode.task, episode.length, episode.image_samples())
            shutil.rmtree(episode.root, ignore_errors=True)
            self._stats.last_commit_s = time.perf_counter() - t
            self._stats.episodes_committed += 1
        elif kind == "discard" and self._episode is not None:
            self._episode.close()
            shutil.rmtree(self._episode.root, ignore_errors=True)
            self._episode = None

def _recover_staging(meta: Meta, min_frames: int) -> bool:
    """Commit the interrupted episode in .staging up to its last flush, or discard it; True if committed."""
    staging = meta.root / STAGING
    try:
        task = (staging / "task.txt").read_text()
        rows = _read_stream(staging / "frames.arrow")
        videos = [count_video_frames(staging / f"{_safe(k)}.mp4") for k in _video_keys(meta.features)]
        length = min([rows.num_rows, *videos])
    except (OSError, pa.ArrowInvalid):
        length, task = 0, ""
    ok = length >= max(1, min_frames)
    if ok:
        _commit(meta, staging, task, length)
    shutil.rmtree(staging, ignore_errors=True)
    return ok

def _commit(meta: Meta, staging: Path, task: str, length: int,
            image_samples: Mapping[str, np.ndarray] | None = None) -> None:
    """Write one staged episode of `length` frames into data, videos, then meta/episodes (the commit point).

    image_samples: frames of each camera kept while recording, for its stats (None: decoded back).
    """
    fps, root, video_keys = meta.fps, meta.root, _video_keys(meta.features)
    index = len(meta.episodes)
    start = meta.num_frames
    rows = _read_stream(staging / "frames.arrow").slice(0, length)
    if task not in meta.tasks:
        meta.tasks.append(task)
    task_index = meta.tasks.index(task)
    frame_index = np.arange(length)
    table = rows.append_column("timestamp", pa.array((frame_index / fps).astype(np.float32)))
    table = table.append_column("frame_index", pa.array(frame_index, pa.int64()))
    table = table.append_column("episode_index", pa.array(np.full(length, index), pa.int64()))
    table = table.append_column("index", pa.array(start + frame_index, pa.int64()))
    table = table.append_column("task_index", pa.array(np.full(length, task_index), pa.int64()))
    episode: dict[str, Any] = {"episode_index": index, "tasks": [task], "length": length,
                               "dataset_from_index": start, "dataset_to_index": start + length}
    # data rows
    chunk, file = _next_file(root, "data", table.nbytes / 1e6, float(meta.info["data_files_size_in_mb"]))
    path = _data_file(root, chunk, file)
    merged = pa.concat_tables([pq.read_table(path), table]) if path.exists() else table
    write_parquet(path, merged)
    episode.update({"data/chunk_index": chunk, "data/file_index": file})
    # videos: a stream copy of the staged segment onto the end of the current shard
    for key in video_keys:
        vchunk, vfile = _next_file(root, f"videos/{key}", (staging / f"{_safe(key)}.mp4").stat().st_size / 1e6,
                                        float(meta.info["video_files_size_in_mb"]))
        before, added = append_video(_video_file(root, key, vchunk, vfile), staging / f"{_safe(key)}.mp4",
                                      fps, limit=length)
        if added != length:
            raise DatasetError(f"camera {key}: {added} video frames for {length} data frames")
        episode.update({f"videos/{key}/chunk_index": vchunk, f"videos/{key}/file_index": vfile,
                        f"videos/{key}/from_timestamp": before / fps, f"videos/{key}/to_timestamp":
                        (before + length) / fps})
    # per-episode stats of every feature
    for key in meta.features:
        if key in video_keys:
            samples = image_samples[key] if image_samples else decode_video(
                staging / f"{_safe(key)}.mp4", 0, length, fps)[:: max(1, length // _IMAGE_SAMPLES)]
            st = {**feature_stats(samples), "count": np.array([length])}
        else:
            col = table.column(key).to_numpy(zero_copy_only=False)
            values = np.stack(col) if col.dtype == object else col
            st = feature_stats(values.astype(np.float64))
        for name, v in st.items():
            episode[f"stats/{key}/{name}"] = v.tolist()  # images (3, 1, 1), as LeRobot normalises (C, H, W)
    # the commit point: the episode's row in meta/episodes (one file, rewritten whole)
    episode.update({"meta/episodes/chunk_index": 0, "meta/episodes/file_index": 0})
    meta.episodes.append(episode)
    epath = root / EPISODES_PATH.format(chunk_index=0, file_index=0)
    write_parquet(epath, pa.Table.from_pylist(meta.episodes))
    write_parquet(root / "meta" / "tasks.parquet", _tasks_table(meta.tasks))
    _write_summary(meta)

def _next_file(root: Path, folder: str, add_mb: float, cap_mb: float) -> tuple[int, int]:
    """(chunk, file) to append to: the last one, or the next when adding would pass the size cap."""
    files = sorted((root / folder).glob("chunk-*/file-*.*"))
    files = [f for f in files if not f.name.startswith(".")]
    if not files:
        return 0, 0
    last = files[-1]
    chunk, file = int(last.parent.name[6:]), int(last.stem[5:])
    if last.stat().st_size / 1e6 + add_mb <= cap_mb:
        return chunk, file
    file += 1
    if file >= CHUNKS_SIZE:
        chunk, file = chunk + 1, 0
    return chunk, file




def _safe(key: str) -> str:
    return key.replace("/", "_")


def _read_stream(path: Path) -> pa.Table:
    """Every complete record batch of an Arrow IPC stream (a kill may have cut the last one)."""
    batches = []
    with open(path, "rb") as f:
        try:
            reader = ipc.open_stream(f)
            for batch in reader:
                batches.append(batch)
        except (pa.ArrowInvalid, OSError):
            pass
    if not batches:
        raise pa.ArrowInvalid(f"{path}: no complete record batch")
    return pa.Table.from_batches(batches)


class _Episode:
    """The episode being recorded, staged on disk: an Arrow stream of rows, one fragmented MP4 per camera."""

    def __init__(self, root: Path, meta: Meta, task: str):
        self.root, self.task, self.length = root, task, 0
        self.fps, self.features = meta.fps, meta.features
        self.video_keys, self.frame_keys = _video_keys(meta.features), _frame_keys(meta.features)
        self._rows: list[dict[str, Any]] = []
        self._stream: ipc.RecordBatchStreamWriter | None = None
        self._file: Any = None
        self._videos: dict[str, tuple[Any, Any]] = {}
        self._samples: dict[str, list[np.ndarray]] = {k: [] for k in self.video_keys}  # every `_stride`-th image
        self._stride = 1
        self._flush_every = max(1, round(self.fps))  # frames: at most one second is lost to a kill

    @classmethod
    def start(cls, root: Path, meta: Meta, task: str) -> _Episode:
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        (root / "task.txt").write_text(task)
        ep = cls(root, meta, task)
        for key in ep.video_keys:
            h, w, _ = ep.features[key]["shape"]
            ep._videos[key] = open_encoder(root / f"{_safe(key)}.mp4", ep.fps, h, w,
                                           ep.features[key]["info"]["video.codec"])
        return ep

    def add(self, frame: dict[str, np.ndarray]) -> None:
        w = self
        for key in w.video_keys:
            image = frame[key]
            if image.shape != tuple(w.features[key]["shape"]) or image.dtype != np.uint8:
                raise DatasetError(f"camera {key}: image {image.shape} {image.dtype}, expected "
                                   f"{tuple(w.features[key]['shape'])} uint8")
            out, stream = self._videos[key]
            if self.length % self._stride == 0:
                self._samples[key].append(image)
            vf = av.VideoFrame.from_ndarray(image, format="rgb24")
            vf.pts = self.length
            for packet in stream.encode(vf):
                out.mux(packet)
        row = {}
        for key in w.frame_keys:
            spec = w.features[key]
            value = np.asarray(frame[key], dtype=spec["dtype"])
            if value.size != int(np.prod(spec["shape"])):
                raise DatasetError(f"feature {key}: {value.size} values, expected shape {spec['shape']}")
            row[key] = value.reshape(-1).tolist() if spec["shape"] != [1] else value.reshape(()).item()
        self._rows.append(row)
        self.length += 1
        if w.video_keys and len(self._samples[w.video_keys[0]]) >= 2 * _IMAGE_SAMPLES:  # keep memory bounded
            self._samples = {k: v[::2] for k, v in self._samples.items()}
            self._stride *= 2
        if len(self._rows) >= self._flush_every:
            self._flush()

    def _flush(self) -> None:
        if not self._rows:
            return
        batch = pa.RecordBatch.from_pylist(self._rows, schema=self._schema())
        if self._stream is None:
            self._file = open(self.root / "frames.arrow", "wb")
            self._stream = ipc.new_stream(self._file, batch.schema)
        self._stream.write_batch(batch)
        self._file.flush()
        self._rows = []

    def _schema(self) -> pa.Schema:
        types = {"float32": pa.float32(), "float64": pa.float64(), "int64": pa.int64(), "int32": pa.int32(),
                 "bool": pa.bool_()}
        fields = []
        for key in self.frame_keys:
            spec = self.features[key]
            t = types[spec["dtype"]]
            fields.append(pa.field(key, t if spec["shape"] == [1] else pa.list_(t, int(np.prod(spec["shape"])))))
        return pa.schema(fields)

    def image_samples(self) -> dict[str, np.ndarray]:
        return {k: np.stack(v) for k, v in self._samples.items() if v}

    def close(self) -> None:
        self._flush()
        if self._stream is not None:
            self._stream.close()
            self._file.close()
        for out, stream in self._videos.values():
            for packet in stream.encode():
                out.mux(packet)
            out.close()


# ---------------------------------------------------------------------------------------------- reader
class DatasetReader:
    """Episodes and frames of a LeRobot v3.0 dataset as numpy arrays.

    `episode(i)` gives {feature: (T, ...)} with images decoded from the episode's video segment;
    `frames(keys)` the numeric columns of every frame, concatenated over the data files.
    """

    def __init__(self, root: str | Path):
        self.meta = read_meta(root)
        self.root = self.meta.root
        self.fps = self.meta.fps
        self.features = self.meta.features
        self.video_keys = _video_keys(self.features)

    @property
    def num_episodes(self) -> int:
        return len(self.meta.episodes)

    @property
    def num_frames(self) -> int:
        return self.meta.num_frames

    def episode(self, i: int, *, images: bool = True) -> dict[str, np.ndarray]:
        if not 0 <= i < self.num_episodes:
            raise DatasetError(f"episode {i}: the dataset has {self.num_episodes} episodes")
        ep = self.meta.episodes[i]
        table = pq.read_table(_data_file(self.root, int(ep["data/chunk_index"]), int(ep["data/file_index"])))
        index = np.asarray(table.column("index"))
        rows = table.filter(pa.array((index >= ep["dataset_from_index"]) & (index < ep["dataset_to_index"])))
        out = {name: _column(rows, name) for name in rows.column_names}
        if images:
            for key in self.video_keys:
                path = _video_file(self.root, key, int(ep[f"videos/{key}/chunk_index"]),
                                   int(ep[f"videos/{key}/file_index"]))
                start = round(float(ep[f"videos/{key}/from_timestamp"]) * self.fps)
                out[key] = decode_video(path, start, int(ep["length"]), self.fps)
        return out

    def frames(self, keys: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """Numeric columns (default: all) of every committed frame, in index order."""
        tables = []
        files = {(int(e["data/chunk_index"]), int(e["data/file_index"])) for e in self.meta.episodes}
        for chunk, file in sorted(files):
            tables.append(pq.read_table(_data_file(self.root, chunk, file), columns=list(keys) if keys else None))
        if not tables:
            return {}
        table = pa.concat_tables(tables)
        return {name: _column(table, name) for name in table.column_names}

    def iter_episodes(self, *, images: bool = True) -> Iterator[dict[str, np.ndarray]]:
        for i in range(self.num_episodes):
            yield self.episode(i, images=images)


def _column(table: pa.Table, name: str) -> np.ndarray:
    col = table.column(name).combine_chunks()
    if pa.types.is_fixed_size_list(col.type) or pa.types.is_list(col.type):
        width = col.type.list_size if pa.types.is_fixed_size_list(col.type) else None
        flat = col.flatten().to_numpy(zero_copy_only=False)
        return flat.reshape(len(col), width or -1).copy()  # writable, owned by the caller
    return col.to_numpy(zero_copy_only=False).copy()
