"""Rotating vectors into a body frame, for the terms that need it: a batched torch form and a single-state numpy form.

Quaternions are (w, x, y, z), as in MuJoCo. The torch form uses tensor methods only, so this module loads on the
robot (no torch there).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def quat_rotate(q: Any, v: Any) -> Any:
    """Rotate frame vectors v (N, 3) into the world: R(q) v (torch tensors)."""
    w, xyz = q[:, :1], q[:, 1:]
    t = xyz.cross(v, dim=-1).mul_(2.0)
    return v.addcmul(w, t).add_(xyz.cross(t, dim=-1))  # (N, 3)


def yaw_quat(yaw: Any) -> Any:
    """Quaternions (N, 4) of rotations by yaw (N,) about world z (torch tensors)."""
    half = 0.5 * yaw
    out = half.new_zeros(*half.shape, 4)  # (N, 4)
    out[..., 0] = half.cos()
    out[..., 3] = half.sin()
    return out


def quat_rotate_inverse(q: Any, v: Any) -> Any:
    """Rotate world-frame vectors v (N, 3) into the frame of unit quaternions q (N, 4): R(q)^T v (torch tensors).

    v may also be one vector (3,) for all quaternions.
    """
    w, xyz = q[:, :1], q[:, 1:]
    t = xyz.cross(v.expand_as(xyz), dim=-1).mul_(2.0)
    return v.addcmul(w, t, value=-1.0).add_(xyz.cross(t, dim=-1))  # (N, 3)


def quat_rotate_inverse_np(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Rotate world-frame v (3,) into the frame of unit quaternion q (4,): R(q)^T v."""
    w, xyz = q[0], q[1:]
    t = 2.0 * np.cross(xyz, v)
    return v - w * t + np.cross(xyz, t)
