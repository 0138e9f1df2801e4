"""Evaluation videos: run a policy deterministically in a single-world env and write an MP4."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from robo_rl.checkpoint import atomic_write


def write_mp4(path: str | Path, frames: list[np.ndarray], fps: float) -> None:
    """Write RGB frames (H, W, 3) uint8 to an MP4 file atomically."""
    import cv2

    if not frames:
        raise ValueError("no frames to write")
    h, w = frames[0].shape[:2]

    def write(tmp: str) -> None:
        # OpenCV picks the container from the extension; the temp file keeps ".mp4" semantics via the fourcc.
        writer = cv2.VideoWriter(tmp + ".mp4", cv2.VideoWriter_fourcc(*"mp4v"), fps, (w, h))
        if not writer.isOpened():
            raise RuntimeError("OpenCV could not open an MP4 writer")
        for frame in frames:
            writer.write(cv2.cvtColor(frame, cv2.COLOR_RGB2BGR))
        writer.release()
        Path(tmp + ".mp4").replace(tmp)

    atomic_write(path, write)


@torch.no_grad()
def record_episodes(
    env, policy: Callable[[torch.Tensor], torch.Tensor], episodes: int, *, size: tuple[int, int] = (320, 240)
) -> list[np.ndarray]:
    """Frames of world 0 over `episodes` episodes of `env` driven by `policy` (raw obs -> actions)."""
    frames = []
    obs = env.reset(random_start=False)
    done_count = 0
    while done_count < episodes:
        obs, _, terminated, truncated, _ = env.step(policy(obs["policy"]))
        frames.append(env.render(0, width=size[0], height=size[1]))
        done_count += int(terminated[0] or truncated[0])
    return frames
