"""Evaluation videos: the frames of a policy run deterministically in a single-world env, a small animated GIF
of them for TensorBoard, and camera images tiled into one picture. The MP4 file itself is written by
`robo_rl.demos.mp4_writer`."""

from __future__ import annotations

import io
from collections.abc import Callable

import numpy as np
import torch

from robo_rl.learn.evaluation import on_every_step, rollout


def encode_gif(frames: list[np.ndarray], fps: float, *, max_frames: int = 150, max_width: int = 160) -> bytes:
    """A small animated GIF of RGB frames (H, W, 3): at most `max_frames` frames (evenly strided),
    downscaled to at most `max_width` pixels wide. TensorBoard's image tab plays it."""
    from PIL import Image

    if not frames:
        raise ValueError("no frames to encode")
    stride = max(1, -(-len(frames) // max_frames))  # ceil
    factor = max(1, -(-frames[0].shape[1] // max_width))
    images = [Image.fromarray(np.ascontiguousarray(f[::factor, ::factor])) for f in frames[::stride]]
    buffer = io.BytesIO()
    images[0].save(buffer, format="GIF", save_all=True, append_images=images[1:], loop=0,
                   duration=max(20, round(1000 * stride / fps)))
    return buffer.getvalue()


def image_grid(images: torch.Tensor, *, columns: int, scale: int = 1) -> np.ndarray:
    """Camera images (K, 3, H, W) uint8 tiled row by row into one (R*H*scale, C*W*scale, 3) picture.

    Each pixel becomes a scale x scale block (no smoothing, so the picture shows exactly what the
    camera gives); cells after the K-th are black.
    """
    k, c, h, w = images.shape
    if c != 3 or images.dtype != torch.uint8:
        raise ValueError(f"images: expected (K, 3, H, W) uint8, got {tuple(images.shape)} {images.dtype}")
    if columns < 1 or scale < 1:
        raise ValueError(f"columns = {columns}, scale = {scale}: both must be >= 1")
    rows = -(-k // columns)  # ceil
    cells = torch.zeros(rows * columns, 3, h, w, dtype=torch.uint8)  # (R*C, 3, H, W)
    cells[:k] = images
    grid = cells.reshape(rows, columns, 3, h, w).permute(0, 3, 1, 4, 2).reshape(rows * h, columns * w, 3)
    return grid.repeat_interleave(scale, 0).repeat_interleave(scale, 1).numpy()  # (R*H*s, C*W*s, 3)


@torch.no_grad()
def record_episodes(
    env, policy: Callable[[dict[str, torch.Tensor]], torch.Tensor], episodes: int, *,
    size: tuple[int, int] = (320, 240)
) -> list[np.ndarray]:
    """Frames of world 0 over `episodes` episodes of `env` driven by `policy` (observation groups -> actions)."""
    frames = []
    done_count = 0
    render = lambda: frames.append(env.render(0, width=size[0], height=size[1]))  # noqa: E731
    every_step = on_every_step(env, lambda ended: ended[0] or render())  # not the rest of a chunk after an end
    for step in rollout(env, policy):
        if not every_step:
            render()
        done_count += int(step.terminated[0] or step.truncated[0])
        if done_count >= episodes:
            break
    return frames
