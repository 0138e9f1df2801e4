"""The LeRobot v3.0 dataset writer: crash safe, and it never blocks its caller. numpy, pyarrow, PyAV.

`DatasetWriter.add_frame` and `end_episode` only queue work for one background thread, which encodes
camera frames as they arrive (so an episode's save is a few file renames and a stream copy, not a 30-60 s
encode) and reports drops: with `block=False` a full queue drops the frame and counts it (`stats()`),
never silently. How an episode is staged and committed, and how a dataset is repaired after a kill:
`robo_rl.demos.dataset_recovery`; the layout: `robo_rl.demos.dataset_metadata`.
"""

from __future__ import annotations

import queue
import shutil
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from robo_rl.demos.dataset_metadata import (
    DEFAULT_FEATURES,
    Meta,
    check_features,
    frame_keys,
    new_info,
    read_meta,
    video_keys,
    write_json,
)
from robo_rl.demos.dataset_recovery import STAGING, StagedEpisode, commit_episode, repair
from robo_rl.demos.errors import DatasetError


@dataclass
class WriterStats:
    """What the writer did so far (a copy: `DatasetWriter.stats()`)."""

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
            check_features(features)
            info = new_info(fps=fps, features=features, robot_type=robot_type, data_file_mb=data_file_mb,
                            video_file_mb=video_file_mb, extra_info=extra_info)
            self.meta = Meta(self.root, info)
            write_json(self.root / "meta" / "info.json", info)
        self.fps = self.meta.fps
        self.features = self.meta.features
        self.video_keys = video_keys(self.features)
        self.frame_keys = frame_keys(self.features)
        self._stats = WriterStats()
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, queue_frames))
        self._error: BaseException | None = None
        self._episode: StagedEpisode | None = None  # worker-owned
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
        """A copy of the writer's counters."""
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
                self._episode = StagedEpisode.start(self.root / STAGING, self.meta, item[2])
            self._episode.add(item[1])
            self._stats.frames_written += 1
        elif kind == "end" and self._episode is not None:
            t = time.perf_counter()
            episode, self._episode = self._episode, None
            episode.close()
            if episode.length:
                commit_episode(self.meta, episode.root, episode.task, episode.length, episode.image_samples())
            shutil.rmtree(episode.root, ignore_errors=True)
            self._stats.last_commit_s = time.perf_counter() - t
            self._stats.episodes_committed += 1
        elif kind == "discard" and self._episode is not None:
            self._episode.close()
            shutil.rmtree(self._episode.root, ignore_errors=True)
            self._episode = None
