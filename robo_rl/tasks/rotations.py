"""Quaternion helpers on batched torch tensors. Quaternions are (w, x, y, z), as in MuJoCo."""

from __future__ import annotations

import torch
from torch import Tensor


def quat_rotate(q: Tensor, v: Tensor) -> Tensor:
    """Rotate frame vectors v (N, 3) into the world: R(q) v."""
    w, xyz = q[:, :1], q[:, 1:]
    t = torch.linalg.cross(xyz, v, dim=-1).mul_(2.0)
    return torch.addcmul(v, w, t).add_(torch.linalg.cross(xyz, t, dim=-1))  # (N, 3)


def yaw_quat(yaw: Tensor) -> Tensor:
    """Quaternions (N, 4) of rotations by yaw (N,) about world z."""
    half = 0.5 * yaw
    zeros = torch.zeros_like(half)
    return torch.stack([half.cos(), zeros, zeros, half.sin()], dim=-1)
