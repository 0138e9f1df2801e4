"""Browser-playable MP4 files through PyAV: H.264, yuv420p, `faststart`, written atomically.

One writer for every video a person watches: evaluation videos of a policy (`robo_rl.learn`), a dataset
episode's camera or its re-render on the twin (`robo-rl dataset video`). A leaf: PyAV, numpy and
`robo_rl.core.files.atomic_write` only. (Dataset video segments, fragmented and grown by stream copy, are
`robo_rl.demos.video_segments`.)
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import numpy as np

from robo_rl.core.files import atomic_write

CODEC = "libx264"
"""H.264: plays in every browser and video player (MPEG-4 Part 2, OpenCV's default, does not)."""


def even_crop(frame: np.ndarray) -> np.ndarray:
    """Crop a frame (H, W, 3) to even height and width (yuv420p needs both even)."""
    h, w = frame.shape[:2]
    return frame[: h - h % 2, : w - w % 2]


def encode_mp4(path: str | Path, frames: list[np.ndarray], fps: float) -> None:
    """Write RGB frames (H, W, 3) uint8 to `path` as an H.264 MP4 (whatever its file name ends in).

    `faststart` puts the index first so a browser can play the file while it loads; the muxer then
    rewrites the file, so `path` must be a real file, not a pipe or buffer.
    """
    with av.open(str(path), mode="w", format="mp4", options={"movflags": "faststart"}) as container:
        stream = container.add_stream(CODEC, rate=Fraction(fps).limit_denominator(1000))
        first = even_crop(frames[0])
        stream.height, stream.width = first.shape[:2]
        stream.pix_fmt = "yuv420p"
        stream.options = {"crf": "23", "preset": "veryfast"}
        for frame in frames:
            image = np.ascontiguousarray(even_crop(frame))  # (H, W, 3), both even
            container.mux(stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")))
        container.mux(stream.encode())  # flush the encoder


def write_mp4(path: str | Path, frames: list[np.ndarray], fps: float) -> None:
    """Write RGB frames (H, W, 3) uint8 to an H.264 MP4 file atomically (no partial file on failure)."""
    if not frames:
        raise ValueError("no frames to write")
    atomic_write(path, lambda tmp: encode_mp4(tmp, frames, fps))
