"""Crash safety of LeRobot v3.0 datasets: the staged episode, its commit, and the repair after a kill.

Every file is replaced atomically (written beside, then renamed). An episode is committed in this order:
its data rows, its video segments, then its row in `meta/episodes` (the commit point), then tasks, info
and stats. While an episode is being recorded, its numeric rows go to `.staging/frames.arrow` (an Arrow
IPC stream, flushed every second) and its images to fragmented MP4 files (`.staging/<camera>.mp4`), both
readable up to their last flush. Opening a dataset after a kill (`DatasetWriter(root)` again, or
`repair(root)`): rows and video beyond the last committed episode are cut, totals and stats are recomputed
from `meta/episodes`, and an interrupted episode is recovered up to its last flushed second (at least
`min_recover_frames` frames) or discarded.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import av
import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from robo_rl.demos.dataset_metadata import (
    CHUNKS_SIZE,
    Meta,
    data_file,
    frame_keys,
    read_meta,
    video_file,
    video_keys,
    write_episodes,
    write_parquet,
    write_summary,
)
from robo_rl.demos.dataset_stats import IMAGE_SAMPLES, feature_stats, stats_columns
from robo_rl.demos.errors import DatasetError
from robo_rl.demos.video_segments import append_video, count_video_frames, decode_video, open_encoder, truncate_video

STAGING = ".staging"
"""The folder (under the dataset root) of the episode being recorded."""
_ARROW_TYPES = {"float32": pa.float32(), "float64": pa.float64(), "int64": pa.int64(), "int32": pa.int32(),
                "bool": pa.bool_()}


def staged_video(staging: Path, key: str) -> Path:
    """The staged fragmented MP4 of camera `key` (a feature name may hold '/', a file name may not)."""
    return staging / f"{key.replace('/', '_')}.mp4"


def read_stream(path: Path) -> pa.Table:
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


# ---------------------------------------------------------------------------------------------- staging
class StagedEpisode:
    """The episode being recorded, staged on disk: an Arrow stream of rows, one fragmented MP4 per camera.

    Owned by the writer's background thread: `start`, `add` per frame, `close`, then `commit_episode`.
    """

    def __init__(self, root: Path, meta: Meta, task: str):
        self.root, self.task, self.length = root, task, 0
        self.fps, self.features = meta.fps, meta.features
        self.video_keys, self.frame_keys = video_keys(meta.features), frame_keys(meta.features)
        self._rows: list[dict[str, Any]] = []
        self._stream: ipc.RecordBatchStreamWriter | None = None
        self._file: Any = None
        self._videos: dict[str, tuple[Any, Any]] = {}
        self._samples: dict[str, list[np.ndarray]] = {k: [] for k in self.video_keys}  # every `_stride`-th image
        self._stride = 1
        self._flush_every = max(1, round(self.fps))  # frames: at most one second is lost to a kill

    @classmethod
    def start(cls, root: Path, meta: Meta, task: str) -> StagedEpisode:
        """A new staged episode in folder `root` (emptied first) with one open encoder per camera."""
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        (root / "task.txt").write_text(task)
        ep = cls(root, meta, task)
        for key in ep.video_keys:
            h, w, _ = ep.features[key]["shape"]
            ep._videos[key] = open_encoder(staged_video(root, key), ep.fps, h, w,
                                           ep.features[key]["info"]["video.codec"])
        return ep

    def add(self, frame: dict[str, np.ndarray]) -> None:
        """Encode the frame's images and buffer its numeric values (flushed every second)."""
        for key in self.video_keys:
            image = frame[key]  # (H, W, 3) uint8
            if image.shape != tuple(self.features[key]["shape"]) or image.dtype != np.uint8:
                raise DatasetError(f"camera {key}: image {image.shape} {image.dtype}, expected "
                                   f"{tuple(self.features[key]['shape'])} uint8")
            out, stream = self._videos[key]
            if self.length % self._stride == 0:
                self._samples[key].append(image)
            vf = av.VideoFrame.from_ndarray(image, format="rgb24")
            vf.pts = self.length
            for packet in stream.encode(vf):
                out.mux(packet)
        row = {}
        for key in self.frame_keys:
            spec = self.features[key]
            value = np.asarray(frame[key], dtype=spec["dtype"])
            if value.size != int(np.prod(spec["shape"])):
                raise DatasetError(f"feature {key}: {value.size} values, expected shape {spec['shape']}")
            row[key] = value.reshape(-1).tolist() if spec["shape"] != [1] else value.reshape(()).item()
        self._rows.append(row)
        self.length += 1
        if self.video_keys and len(self._samples[self.video_keys[0]]) >= 2 * IMAGE_SAMPLES:  # keep memory bounded
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
        fields = []
        for key in self.frame_keys:
            spec = self.features[key]
            t = _ARROW_TYPES[spec["dtype"]]
            fields.append(pa.field(key, t if spec["shape"] == [1] else pa.list_(t, int(np.prod(spec["shape"])))))
        return pa.schema(fields)

    def image_samples(self) -> dict[str, np.ndarray]:
        """Per camera, the images kept for its stats (S, H, W, 3)."""
        return {k: np.stack(v) for k, v in self._samples.items() if v}

    def close(self) -> None:
        """Flush the rows and finish every video (the staged files are then complete)."""
        self._flush()
        if self._stream is not None:
            self._stream.close()
            self._file.close()
        for out, stream in self._videos.values():
            for packet in stream.encode():
                out.mux(packet)
            out.close()


# ---------------------------------------------------------------------------------------------- commit
def next_file(root: Path, folder: str, add_mb: float, cap_mb: float) -> tuple[int, int]:
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


def commit_episode(meta: Meta, staging: Path, task: str, length: int,
                   image_samples: Mapping[str, np.ndarray] | None = None) -> None:
    """Write one staged episode of `length` frames into data, videos, then meta/episodes (the commit point).

    image_samples: frames of each camera kept while recording, for its stats (None: decoded back).
    """
    fps, root, cameras = meta.fps, meta.root, video_keys(meta.features)
    index = len(meta.episodes)
    start = meta.num_frames
    rows = read_stream(staging / "frames.arrow").slice(0, length)
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
    chunk, file = next_file(root, "data", table.nbytes / 1e6, float(meta.info["data_files_size_in_mb"]))
    path = data_file(root, chunk, file)
    merged = pa.concat_tables([pq.read_table(path), table]) if path.exists() else table
    write_parquet(path, merged)
    episode.update({"data/chunk_index": chunk, "data/file_index": file})
    # videos: a stream copy of the staged segment onto the end of the current shard
    for key in cameras:
        segment = staged_video(staging, key)
        vchunk, vfile = next_file(root, f"videos/{key}", segment.stat().st_size / 1e6,
                                  float(meta.info["video_files_size_in_mb"]))
        before, added = append_video(video_file(root, key, vchunk, vfile), segment, fps, limit=length)
        if added != length:
            raise DatasetError(f"camera {key}: {added} video frames for {length} data frames")
        episode.update({f"videos/{key}/chunk_index": vchunk, f"videos/{key}/file_index": vfile,
                        f"videos/{key}/from_timestamp": before / fps, f"videos/{key}/to_timestamp":
                        (before + length) / fps})
    # per-episode stats of every feature
    for key in meta.features:
        if key in cameras:
            samples = image_samples[key] if image_samples else decode_video(
                staged_video(staging, key), 0, length, fps)[:: max(1, length // IMAGE_SAMPLES)]
            st = {**feature_stats(samples), "count": np.array([length])}
        else:
            col = table.column(key).to_numpy(zero_copy_only=False)
            values = np.stack(col) if col.dtype == object else col
            st = feature_stats(values.astype(np.float64))
        episode.update(stats_columns(key, st))
    # the commit point: the episode's row in meta/episodes
    episode.update({"meta/episodes/chunk_index": 0, "meta/episodes/file_index": 0})
    meta.episodes.append(episode)
    write_episodes(meta)


# ---------------------------------------------------------------------------------------------- recovery
def recover_staging(meta: Meta, min_frames: int) -> bool:
    """Commit the interrupted episode in .staging up to its last flush, or discard it; True if committed."""
    staging = meta.root / STAGING
    try:
        task = (staging / "task.txt").read_text()
        rows = read_stream(staging / "frames.arrow")
        videos = [count_video_frames(staged_video(staging, k)) for k in video_keys(meta.features)]
        length = min([rows.num_rows, *videos])
    except (OSError, pa.ArrowInvalid):
        length, task = 0, ""
    ok = length >= max(1, min_frames)
    if ok:
        commit_episode(meta, staging, task, length)
    shutil.rmtree(staging, ignore_errors=True)
    return ok


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
    for key in video_keys(meta.features):
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
    if (root / STAGING).exists():
        recovered = recover_staging(meta, min_recover_frames)
        report["recovered" if recovered else "discarded"] += 1
    write_summary(meta)
    return report
