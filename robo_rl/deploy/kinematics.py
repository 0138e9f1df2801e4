"""Kinematics of a serial hinge chain in numpy, for the robot side: site pose and geometric Jacobian.

The twin of `robo_rl.tasks.kinematics.SerialChain` (torch, batched), fed by the same JSON chain description
that the exporter writes into the deploy contract (format: `robo_rl.core.contract.validate_chain`). One
configuration at a time; numpy only.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from robo_rl.core.contract import validate_chain


def quat_to_matrix(q: np.ndarray) -> np.ndarray:
    """Rotation matrix (3, 3) of a quaternion (4,) (w, x, y, z; normalised here)."""
    w, x, y, z = np.asarray(q, dtype=np.float64) / np.linalg.norm(q)
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
        [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
        [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
    ])


def skew(v: np.ndarray) -> np.ndarray:
    """Cross-product matrix (3, 3) of v (3,): skew(v) @ u = v x u."""
    x, y, z = v
    return np.array([[0.0, -z, y], [z, 0.0, -x], [-y, x, 0.0]])


class SerialChain:
    """Forward kinematics and site Jacobian of one configuration of a serial hinge chain.

    Args:
        chain: the chain description (a contract's ee_delta `params.chain`).

    Positions, rotations and Jacobians are expressed in the chain's root frame (the robot base).
    """

    def __init__(self, chain: dict[str, Any]):
        self.joint_names = validate_chain(chain, "chain")
        links = chain["links"]
        self._links = []  # per link: (pos (3,), rot (3, 3), joint or None: (axis, anchor, qpos0, K, K^2))
        lower, upper = [], []
        for link in links:
            joint = None
            if link["joint"] is not None:
                axis = np.asarray(link["axis"], dtype=np.float64)
                axis = axis / np.linalg.norm(axis)
                k = skew(axis)
                joint = (axis, np.asarray(link["anchor"], dtype=np.float64), float(link["qpos0"]), k, k @ k)
                lower.append(link["range"][0] if link["range"] else -np.inf)
                upper.append(link["range"][1] if link["range"] else np.inf)
            self._links.append((np.asarray(link["pos"], dtype=np.float64), quat_to_matrix(link["quat"]), joint))
        self.lower = np.array(lower)  # (J,)
        self.upper = np.array(upper)  # (J,)
        self._site_pos = np.asarray(chain["site"]["pos"], dtype=np.float64)  # (3,)
        self._site_rot = quat_to_matrix(chain["site"]["quat"])  # (3, 3)

    @property
    def num_joints(self) -> int:
        return len(self.joint_names)

    def jacobian(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Site position (3,), rotation (3, 3) and geometric Jacobian (6, J) at joint positions q (J,)."""
        rot, pos = np.eye(3), np.zeros(3)
        axes, anchors = [], []
        j = 0
        for link_pos, link_rot, joint in self._links:
            pos = pos + rot @ link_pos
            rot = rot @ link_rot
            if joint is not None:
                axis, anchor_local, qpos0, k, k2 = joint
                anchor = pos + rot @ anchor_local
                axes.append(rot @ axis)
                anchors.append(anchor)
                theta = q[j] - qpos0
                rot = rot @ (np.eye(3) + np.sin(theta) * k + (1.0 - np.cos(theta)) * k2)
                pos = anchor - rot @ anchor_local
                j += 1
        site_pos = pos + rot @ self._site_pos
        site_rot = rot @ self._site_rot
        axis = np.stack(axes, axis=1)  # (3, J)
        linear = np.cross(axis, site_pos[:, None] - np.stack(anchors, axis=1), axis=0)  # (3, J)
        return site_pos, site_rot, np.concatenate([linear, axis])  # (3,), (3, 3), (6, J)

    def forward(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Site position (3,) and rotation (3, 3) at joint positions q (J,)."""
        site_pos, site_rot, _ = self.jacobian(q)
        return site_pos, site_rot
