"""LeRobot v3.0 dataset metadata: the layout, the feature schema, and meta/ (info, tasks, episodes, stats).

Layout (LeRobot `codebase_version` "v3.0"; the `lerobot` package is not needed):

    meta/info.json                          fps, features (dtype, shape, names), path templates, sizes, totals
    meta/stats.json                         per feature: min, max, mean, std, count, q01 q10 q50 q90 q99
    meta/tasks.parquet                      task strings (the pandas index) -> task_index
    meta/episodes/chunk-000/file-000.parquet  one row per episode: index ranges, data and video files,
                                            video timestamp ranges, per-episode stats
    data/chunk-000/file-000.parquet         one row per frame, many episodes per file (size cap)
    videos/<camera key>/chunk-000/file-000.mp4  many episodes per file, one after another

The writer is `robo_rl.demos.dataset_writer`, the reader `robo_rl.demos.dataset_reader`; the commit of an
episode and the repair after a kill are in `robo_rl.demos.dataset_recovery`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from robo_rl.core.files import atomic_write
from robo_rl.demos.dataset_stats import dataset_stats, stats_to_json
from robo_rl.demos.errors import DatasetError

CODEBASE_VERSION = "v3.0"
CHUNKS_SIZE = 1000
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
DEFAULT_FEATURES: dict[str, dict[str, Any]] = {
    "timestamp": {"dtype": "float32", "shape": [1], "names": None},
    "frame_index": {"dtype": "int64", "shape": [1], "names": None},
    "episode_index": {"dtype": "int64", "shape": [1], "names": None},
    "index": {"dtype": "int64", "shape": [1], "names": None},
    "task_index": {"dtype": "int64", "shape": [1], "names": None},
}
"""Per-frame features every LeRobot v3.0 dataset has; the writer fills them."""
NUMERIC_DTYPES = ("float32", "float64", "int64", "int32", "bool")


DEFAULT_IMAGE_SIZE = 96
"""Side of recorded camera images when neither the caller nor the task (`cfg.image_size`) gives one."""


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


def video_keys(features: Mapping[str, Any]) -> list[str]:
    """The camera features (dtype "video")."""
    return [k for k, f in features.items() if f["dtype"] == "video"]


def frame_keys(features: Mapping[str, Any]) -> list[str]:
    """The caller's numeric features (not the defaults the writer fills, not videos)."""
    return [k for k, f in features.items() if f["dtype"] != "video" and k not in DEFAULT_FEATURES]


def check_features(features: Mapping[str, Any]) -> None:
    """DatasetError (one line, naming the feature) unless every caller feature is a valid numeric or video spec."""
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


def new_info(*, fps: float, features: Mapping[str, Any], robot_type: str, data_file_mb: float,
             video_file_mb: float, extra_info: Mapping[str, Any] | None) -> dict[str, Any]:
    """meta/info.json of a new, empty dataset (features: the caller's; the defaults are added)."""
    return {
        "codebase_version": CODEBASE_VERSION, "robot_type": robot_type, "total_episodes": 0,
        "total_frames": 0, "total_tasks": 0, "chunks_size": CHUNKS_SIZE,
        "data_files_size_in_mb": data_file_mb, "video_files_size_in_mb": video_file_mb, "fps": fps,
        "splits": {}, "data_path": DATA_PATH, "video_path": VIDEO_PATH,
        "features": {**features, **DEFAULT_FEATURES}, **dict(extra_info or {}),
    }


# ---------------------------------------------------------------------------------------------- files
def write_json(path: Path, obj: Any) -> None:
    """Replace `path` atomically by `obj` as indented JSON."""
    atomic_write(path, lambda tmp: Path(tmp).write_text(json.dumps(obj, indent=2)))


def write_parquet(path: Path, table: pa.Table) -> None:
    """Replace `path` atomically by `table` as Parquet."""
    atomic_write(path, lambda tmp: pq.write_table(table, tmp))


def data_file(root: Path, chunk: int, file: int) -> Path:
    """The data Parquet file (chunk, file) of the dataset at `root`."""
    return root / DATA_PATH.format(chunk_index=chunk, file_index=file)


def video_file(root: Path, key: str, chunk: int, file: int) -> Path:
    """The MP4 shard (chunk, file) of camera `key` of the dataset at `root`."""
    return root / VIDEO_PATH.format(video_key=key, chunk_index=chunk, file_index=file)


def tasks_table(tasks: Sequence[str]) -> pa.Table:
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


# ---------------------------------------------------------------------------------------------- meta/
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


def info_with_totals(info: dict[str, Any], meta: Meta) -> dict[str, Any]:
    """`info` with the totals and the train split of the committed episodes of `meta`."""
    e = len(meta.episodes)
    return {**info, "total_episodes": e, "total_frames": meta.num_frames, "total_tasks": len(meta.tasks),
            "splits": {"train": f"0:{e}"}}


def write_summary(meta: Meta) -> None:
    """info.json totals and stats.json, both recomputed from the committed episodes."""
    write_json(meta.root / "meta" / "info.json", info_with_totals(meta.info, meta))
    if meta.episodes:
        write_json(meta.root / "meta" / "stats.json", stats_to_json(dataset_stats(meta.episodes, list(meta.features))))


def write_episodes(meta: Meta) -> None:
    """meta/episodes (the commit point of an episode: one file, rewritten whole), then tasks, info and stats."""
    write_parquet(meta.root / EPISODES_PATH.format(chunk_index=0, file_index=0), pa.Table.from_pylist(meta.episodes))
    write_parquet(meta.root / "meta" / "tasks.parquet", tasks_table(meta.tasks))
    write_summary(meta)
