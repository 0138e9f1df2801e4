"""Video segments of LeRobot v3.0 datasets with PyAV: staged fragmented MP4s, shards grown by stream copy.

An episode's frames are encoded as they arrive into a fragmented MP4 (readable up to its last fragment
after a kill), H.264 without B-frames so presentation and decode order agree; a committed episode is
appended to its camera's shard by copying its packets (no re-encode), frame numbers shifted to follow
the shard's last frame.
"""

from __future__ import annotations

import os
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np

from robo_rl.core.files import atomic_write
from robo_rl.demos.errors import DatasetError


def frame_time_base(fps: float) -> Fraction:
    """1 / fps as a Fraction (the time base in which a frame number is a timestamp)."""
    return 1 / Fraction(fps).limit_denominator(1000)


def open_encoder(path: Path, fps: float, height: int, width: int, codec: str) -> tuple[Any, Any]:
    """A fragmented MP4 (readable up to its last fragment after a kill), H.264 without B-frames (pts = dts)."""
    out = av.open(str(path), "w", format="mp4", options={"movflags": "frag_keyframe+empty_moov+default_base_moof",
                                                    "flush_packets": "1"})
    stream = out.add_stream("libx264" if codec == "h264" else codec, rate=Fraction(fps).limit_denominator(1000))
    stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
    # zerolatency: each frame leaves the encoder at once, so a fragment closes on its next keyframe
    stream.options = {"preset": "veryfast", "tune": "zerolatency", "crf": "18", "bf": "0", "g": str(max(1, round(fps)))}
    stream.time_base = frame_time_base(fps)
    return out, stream


def copy_packets(src: Path, out: Any, ostream: Any, offset: int, limit: int | None, fps: float) -> int:
    """Stream-copy up to `limit` video packets of `src` into `ostream`, frame numbers shifted by `offset`; the count.

    Packets carry frame numbers in a 1/fps time base; the muxer rescales them to its own time base.
    """
    n = 0
    frame_tb = frame_time_base(fps)
    with av.open(str(src)) as inp:
        istream = inp.streams.video[0]
        first = None
        for packet in inp.demux(istream):
            if packet.dts is None or packet.size == 0:
                continue
            if limit is not None and n >= limit:
                break
            first = packet.pts if first is None else first
            frame_no = round((packet.pts - first) * istream.time_base / frame_tb)
            packet.stream = ostream
            packet.time_base = frame_tb
            packet.pts = packet.dts = offset + frame_no
            packet.duration = 1  # one frame (else the source's ticks, read as frames: a wrong file duration)
            out.mux(packet)
            n += 1
    return n


def append_video(shard: Path, segment: Path, fps: float, limit: int | None = None) -> tuple[int, int]:
    """Replace `shard` by itself followed by the first `limit` frames of `segment`; (frames before, frames added)."""
    template_src = shard if shard.exists() else segment
    before = count_video_frames(shard) if shard.exists() else 0

    def write(tmp: Path) -> None:
        with av.open(str(template_src)) as probe:
            template = probe.streams.video[0]
            out = av.open(str(tmp), "w", format="mp4")
            ostream = out.add_stream_from_template(template)
            ostream.time_base = frame_time_base(fps)
        nonlocal added
        if shard.exists():
            copy_packets(shard, out, ostream, 0, None, fps)
        added = copy_packets(segment, out, ostream, before, limit, fps)
        out.close()

    added = 0
    atomic_write(shard, write)
    return before, added


def truncate_video(shard: Path, frames: int, fps: float) -> None:
    """Cut `shard` to its first `frames` frames (after a kill left an uncommitted episode at its end)."""
    if frames <= 0:
        shard.unlink()
        return
    src = shard.with_name(f".{shard.name}.src")
    os.replace(shard, src)
    try:
        append_video(shard, src, fps, limit=frames)
    finally:
        src.unlink(missing_ok=True)


def count_video_frames(path: Path) -> int:
    """Decodable frames of a video file (a fragmented MP4 cut by a kill: up to its last complete fragment)."""
    try:
        with av.open(str(path)) as inp:
            return sum(1 for p in inp.demux(inp.streams.video[0]) if p.dts is not None and p.size > 0)
    except (av.error.InvalidDataError, av.error.EOFError, OSError):
        return 0


def decode_video(path: Path, start_frame: int, frames: int, fps: float) -> np.ndarray:
    """(frames, H, W, 3) uint8 RGB frames [start_frame, start_frame + frames) of a video file."""
    out: list[np.ndarray] = []
    with av.open(str(path)) as inp:
        stream = inp.streams.video[0]
        tb = stream.time_base
        start_pts = round(Fraction(start_frame) * frame_time_base(fps) / tb)
        if start_frame > 0:
            inp.seek(start_pts, stream=stream, backward=True, any_frame=False)
        for frame in inp.decode(stream):
            if frame.pts is None or frame.pts < start_pts:
                continue
            out.append(frame.to_ndarray(format="rgb24"))
            if len(out) == frames:
                break
    if len(out) != frames:
        raise DatasetError(f"{path}: {len(out)} frames decoded from frame {start_frame}, expected {frames}")
    return np.stack(out)
