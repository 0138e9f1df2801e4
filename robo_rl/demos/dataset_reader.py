"""The LeRobot v3.0 dataset reader: episodes and frames as numpy arrays, images decoded with PyAV.

Reads datasets written by `robo_rl.demos.dataset_writer` and by LeRobot (codebase_version "v3.0"); the
layout is in `robo_rl.demos.dataset_metadata`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from robo_rl.demos.dataset_metadata import data_file, read_meta, video_file, video_keys
from robo_rl.demos.errors import DatasetError
from robo_rl.demos.video_segments import decode_video


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
        self.video_keys = video_keys(self.features)

    @property
    def num_episodes(self) -> int:
        return len(self.meta.episodes)

    @property
    def num_frames(self) -> int:
        return self.meta.num_frames

    def episode(self, i: int, *, images: bool = True) -> dict[str, np.ndarray]:
        """Episode `i`: {feature: (T, ...)}, camera images (T, H, W, 3) uint8 unless `images` is False."""
        if not 0 <= i < self.num_episodes:
            raise DatasetError(f"episode {i}: the dataset has {self.num_episodes} episodes")
        ep = self.meta.episodes[i]
        table = pq.read_table(data_file(self.root, int(ep["data/chunk_index"]), int(ep["data/file_index"])))
        index = np.asarray(table.column("index"))
        rows = table.filter(pa.array((index >= ep["dataset_from_index"]) & (index < ep["dataset_to_index"])))
        out = {name: _column(rows, name) for name in rows.column_names}
        if images:
            for key in self.video_keys:
                path = video_file(self.root, key, int(ep[f"videos/{key}/chunk_index"]),
                                  int(ep[f"videos/{key}/file_index"]))
                start = round(float(ep[f"videos/{key}/from_timestamp"]) * self.fps)
                out[key] = decode_video(path, start, int(ep["length"]), self.fps)
        return out

    def frames(self, keys: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """Numeric columns (default: all) of every committed frame, in index order."""
        tables = []
        files = {(int(e["data/chunk_index"]), int(e["data/file_index"])) for e in self.meta.episodes}
        for chunk, file in sorted(files):
            tables.append(pq.read_table(data_file(self.root, chunk, file), columns=list(keys) if keys else None))
        if not tables:
            return {}
        table = pa.concat_tables(tables)
        return {name: _column(table, name) for name in table.column_names}

    def iter_episodes(self, *, images: bool = True) -> Iterator[dict[str, np.ndarray]]:
        """Every episode in order (see `episode`)."""
        for i in range(self.num_episodes):
            yield self.episode(i, images=images)


def _column(table: pa.Table, name: str) -> np.ndarray:
    """A column as (rows,) or, for fixed-size lists, (rows, width) numpy, owned by the caller."""
    col = table.column(name).combine_chunks()
    if pa.types.is_fixed_size_list(col.type) or pa.types.is_list(col.type):
        width = col.type.list_size if pa.types.is_fixed_size_list(col.type) else None
        flat = col.flatten().to_numpy(zero_copy_only=False)
        return flat.reshape(len(col), width or -1).copy()  # writable, owned by the caller
    return col.to_numpy(zero_copy_only=False).copy()
