"""Ground height from a terrain heightmap, on batched torch tensors: height under the base and a height scan.

The heightmap is the generator's (R, C) grid (`robo_rl.tasks.terrain`): sample (r, c) lies at world
x = c * spacing, y = r * spacing. Heights between samples are bilinear; points outside the map take
the height of its edge (the flat border). MuJoCo's own hfield surface splits each cell into two
triangles, so inside a cell whose four corners are not coplanar the two differ slightly.
"""

from __future__ import annotations

import torch
from torch import Tensor


def ground_height(points_xy: Tensor, heights: Tensor, *, spacing: float) -> Tensor:
    """Bilinear ground height at world points.

    Args:
        points_xy: (..., 2) world x, y (m).
        heights: (R, C) heightmap (m), R, C >= 2, sample (r, c) at x = c * spacing, y = r * spacing.
        spacing: distance between samples (m).

    Returns:
        (...) ground height (m) at each point.
    """
    rows, cols = heights.shape  # at least 2 x 2
    u = (points_xy[..., 0] / spacing).clamp(0.0, cols - 1)  # (...) column coordinate
    v = (points_xy[..., 1] / spacing).clamp(0.0, rows - 1)  # (...) row coordinate
    c0 = u.floor().clamp(max=cols - 2).long()  # (...) the cell's lower corner; the far edge uses the last cell
    r0 = v.floor().clamp(max=rows - 2).long()
    fu, fv = u - c0, v - r0  # (...) in [0, 1]
    flat = heights.reshape(-1)
    i00 = r0 * cols + c0  # (...) flat index of the cell's lower corner
    h00, h01, h10, h11 = flat[i00], flat[i00 + 1], flat[i00 + cols], flat[i00 + cols + 1]
    return torch.lerp(torch.lerp(h00, h01, fu), torch.lerp(h10, h11, fu), fv)


def scan_offsets(length: float, width: float, resolution: float) -> Tensor:
    """(P, 2) points of a scan grid in the base's yaw frame: x in [-length/2, length/2], y in [-width/2, width/2].

    Points are `resolution` apart, x-major (all y for the first x, then the next x).
    """
    nx, ny = _scan_counts(length, width, resolution)
    xs = torch.linspace(-length / 2, length / 2, nx)  # (X,)
    ys = torch.linspace(-width / 2, width / 2, ny)  # (Y,)
    return torch.cartesian_prod(xs, ys)  # (X * Y, 2)


def _scan_counts(length: float, width: float, resolution: float) -> tuple[int, int]:
    return round(length / resolution) + 1, round(width / resolution) + 1


def scan_size(length: float, width: float, resolution: float) -> int:
    """Number of points P of a scan grid (`scan_offsets`)."""
    nx, ny = _scan_counts(length, width, resolution)
    return nx * ny


def height_scan(base_pos_w: Tensor, base_yaw: Tensor, heights: Tensor, *, offsets: Tensor, spacing: float) -> Tensor:
    """Height of the base above the ground at a yaw-aligned grid of points around it (m).

    Args:
        base_pos_w: (N, 3) base position in the world.
        base_yaw: (N,) base yaw (rad); the grid turns with the base's heading, not its roll or pitch.
        heights: (R, C) heightmap (m).
        offsets: (P, 2) grid points in the yaw frame (`scan_offsets`).
        spacing: heightmap sample distance (m).

    Returns:
        (N, P) base height minus ground height at each point: positive above the ground.
    """
    cos, sin = base_yaw.cos()[:, None], base_yaw.sin()[:, None]  # (N, 1)
    x = base_pos_w[:, 0:1] + cos * offsets[:, 0] - sin * offsets[:, 1]  # (N, P)
    y = base_pos_w[:, 1:2] + sin * offsets[:, 0] + cos * offsets[:, 1]  # (N, P)
    ground = ground_height(torch.stack([x, y], dim=-1), heights, spacing=spacing)  # (N, P)
    return base_pos_w[:, 2:3] - ground


def yaw_from_quat(quat: Tensor) -> Tensor:
    """Yaw (N,) in (-pi, pi] of unit quaternions (N, 4) wxyz: the heading of the body's x axis."""
    w, x, y, z = quat.unbind(-1)
    return torch.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))
