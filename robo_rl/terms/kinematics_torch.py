"""Batched kinematics of a serial chain of hinge joints in torch: site pose and geometric Jacobian (simulation).

The chain is read once from the MjModel into a plain JSON description (`robo_rl.terms.kinematics.serial_chain`,
format in `robo_rl.terms.kinematics.validate_chain`); `SerialChain` turns it into constant tensors and evaluates
all worlds at once with a handful of batched ops per link: no per-world Python and no MuJoCo call, so the same
code runs on a GPU backend. The robot side has the numpy twin in `robo_rl.terms.kinematics`, fed by the same
description, which the exporter writes into the deploy contract. Only the sim side of a term imports this module
(it needs torch, which the robot lacks).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from robo_rl.terms.kinematics import validate_chain


def quat_to_matrix(q: Tensor) -> Tensor:
    """Rotation matrices (..., 3, 3) of quaternions (..., 4) (w, x, y, z; normalised here)."""
    q = q / torch.linalg.vector_norm(q, dim=-1, keepdim=True)
    w, x, y, z = q.unbind(-1)
    return torch.stack(
        [
            1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
            2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
            2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y),
        ],
        dim=-1,
    ).reshape(*q.shape[:-1], 3, 3)


def skew(v: Tensor) -> Tensor:
    """Cross-product matrices (..., 3, 3) of vectors (..., 3): skew(v) @ u = v x u."""
    x, y, z = v.unbind(-1)
    zero = torch.zeros_like(x)
    return torch.stack([zero, -z, y, z, zero, -x, -y, x, zero], dim=-1).reshape(*v.shape[:-1], 3, 3)


class SerialChain:
    """Forward kinematics and site Jacobian of a serial hinge chain for a batch of configurations.

    Args:
        chain: the description from `serial_chain` (or a contract's ee_delta term).
        device: where the constant tensors live.
        dtype: their dtype (float32 in training).

    Positions, rotations and Jacobians are expressed in the chain's root frame.
    """

    def __init__(self, chain: dict[str, Any], *, device: torch.device | str = "cpu",
                 dtype: torch.dtype = torch.float32):
        self.joint_names = validate_chain(chain, "chain")
        links = chain["links"]

        def t(values: Any) -> Tensor:
            return torch.tensor(values, dtype=dtype, device=device)

        self._link_pos = t([link["pos"] for link in links])  # (L, 3)
        self._link_rot = quat_to_matrix(t([link["quat"] for link in links]))  # (L, 3, 3)
        self._joint_of_link = [i for i, link in enumerate(links) if link["joint"] is not None]  # (J,) link index
        jl = [links[i] for i in self._joint_of_link]
        axis = t([link["axis"] for link in jl])
        self._axis = axis / torch.linalg.vector_norm(axis, dim=-1, keepdim=True)  # (J, 3) link frame
        self._anchor = t([link["anchor"] for link in jl])  # (J, 3) link frame
        self._qpos0 = t([link["qpos0"] for link in jl])  # (J,)
        k = skew(self._axis)  # (J, 3, 3)
        self._k, self._k2 = k, k @ k  # Rodrigues: R(a, th) = I + sin th K + (1 - cos th) K^2
        inf = float("inf")
        self.lower = t([link["range"][0] if link["range"] else -inf for link in jl])  # (J,)
        self.upper = t([link["range"][1] if link["range"] else inf for link in jl])  # (J,)
        self._site_pos = t(chain["site"]["pos"])  # (3,)
        self._site_rot = quat_to_matrix(t(chain["site"]["quat"]))  # (3, 3)
        self._eye = torch.eye(3, dtype=dtype, device=device)

    @property
    def num_joints(self) -> int:
        return len(self.joint_names)

    def _walk(self, q: Tensor) -> tuple[Tensor, Tensor, list[Tensor], list[Tensor]]:
        """Site pose and every joint's world axis and anchor for configurations q (N, J)."""
        n = q.shape[0]
        rot = self._eye.expand(n, 3, 3)  # (N, 3, 3) frame of the current link in the root frame
        pos = q.new_zeros(n, 3)  # (N, 3)
        theta = q - self._qpos0  # (N, J)
        s, c1 = torch.sin(theta), 1.0 - torch.cos(theta)  # (N, J)
        axes, anchors = [], []
        j = 0
        for i in range(self._link_pos.shape[0]):
            pos = pos + rot @ self._link_pos[i]  # (N, 3)
            rot = rot @ self._link_rot[i]  # (N, 3, 3)
            if j < len(self._joint_of_link) and self._joint_of_link[j] == i:
                anchor = pos + rot @ self._anchor[j]  # (N, 3)
                axes.append(rot @ self._axis[j])  # (N, 3); the joint's own rotation leaves its axis fixed
                anchors.append(anchor)
                local = self._eye + s[:, j, None, None] * self._k[j] + c1[:, j, None, None] * self._k2[j]  # (N, 3, 3)
                rot = rot @ local
                pos = anchor - rot @ self._anchor[j]
                j += 1
        site_pos = pos + rot @ self._site_pos  # (N, 3)
        site_rot = rot @ self._site_rot  # (N, 3, 3)
        return site_pos, site_rot, axes, anchors

    def forward(self, q: Tensor) -> tuple[Tensor, Tensor]:
        """Site position (N, 3) and rotation matrix (N, 3, 3) for joint positions q (N, J), chain order."""
        site_pos, site_rot, _, _ = self._walk(q)
        return site_pos, site_rot

    def jacobian(self, q: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Site position (N, 3), rotation (N, 3, 3) and geometric Jacobian (N, 6, J): rows 0-2 linear velocity
        of the site, rows 3-5 angular velocity, both in the root frame, per unit joint velocity."""
        site_pos, site_rot, axes, anchors = self._walk(q)
        axis = torch.stack(axes, dim=-1)  # (N, 3, J)
        arm = site_pos[:, :, None] - torch.stack(anchors, dim=-1)  # (N, 3, J) anchor -> site
        linear = torch.linalg.cross(axis, arm, dim=1)  # (N, 3, J)
        return site_pos, site_rot, torch.cat([linear, axis], dim=1)  # (N, 6, J)
