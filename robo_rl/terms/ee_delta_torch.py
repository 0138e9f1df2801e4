"""Sim side (torch, batched) of the `ee_delta` action term; its record, spec and robot side are in
`robo_rl.terms.ee_delta`. Imported only where torch is (the robot lacks it).
"""

from __future__ import annotations

import torch
from torch import Tensor

from robo_rl.core.contract import ActionTermSpec
from robo_rl.terms.kinematics_torch import SerialChain, quat_to_matrix


def orientation_error(rot: Tensor, target: Tensor) -> Tensor:
    """Rotation (N, 3), in the base frame, that turns frames rot (N, 3, 3) toward target (N, 3, 3) or (3, 3):
    0.5 * sum_i rot_i x target_i over the columns; axis * angle for small errors."""
    return 0.5 * torch.linalg.cross(rot, target.expand_as(rot), dim=1).sum(-1)


def yaw_of(rot: Tensor) -> Tensor:
    """Heading (N,) of each frame's x axis about the base z axis."""
    return torch.atan2(rot[:, 1, 0], rot[:, 0, 0])


def rot_z(angle: Tensor) -> Tensor:
    """Rotations (N, 3, 3) about z by angle (N,)."""
    c, s = torch.cos(angle), torch.sin(angle)
    zero, one = torch.zeros_like(c), torch.ones_like(c)
    return torch.stack([c, -s, zero, s, c, zero, zero, zero, one], dim=-1).reshape(-1, 3, 3)


def dls_step(jac: Tensor, error: Tensor, damping: float) -> Tensor:
    """Damped least squares dq = J^T (J J^T + damping^2 I)^-1 e for Jacobians (N, 6, J), errors (N, 6) -> (N, J)."""
    eye = torch.eye(jac.shape[1], dtype=jac.dtype, device=jac.device)
    lhs = jac @ jac.transpose(1, 2) + (damping**2) * eye  # (N, 6, 6)
    return (jac.transpose(1, 2) @ torch.linalg.solve(lhs, error[:, :, None]))[:, :, 0]  # (N, J)


def limit_step(dq: Tensor, max_step: float) -> Tensor:
    """dq (N, J) scaled down as a whole where its largest entry exceeds max_step (the direction is kept)."""
    largest = dq.abs().amax(-1, keepdim=True)  # (N, 1)
    return dq * (max_step / largest.clamp(min=max_step))


class EeDeltaTerm:
    """Sim side of `ee_delta`: Cartesian steps of the chain's site through damped least squares, batched."""

    uses_previous_target = False

    def __init__(self, spec: ActionTermSpec, dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu"):
        self.spec, self.kind, self.joints, self.dim = spec, spec.kind, spec.joints, spec.dim
        p = spec.params
        self.chain = SerialChain(p["chain"], dtype=dtype, device=device)
        self.scale = torch.tensor(spec.scale, dtype=dtype, device=device)  # (3,) or (4,)
        self.damping = float(p["damping"])
        self.max_joint_step = float(p["max_joint_step"])
        self.yaw = bool(p["yaw"])
        self.orientation = quat_to_matrix(torch.tensor(p["orientation"], dtype=dtype, device=device))  # (3, 3)
        self._orientation_yaw = float(yaw_of(self.orientation[None])[0])

    def target_rotation(self, rot: Tensor, yaw_step: Tensor | None) -> Tensor:
        """The hand rotation the IK steers to (N, 3, 3) or (3, 3): the reference, turned to the current heading
        plus the yaw step when the term has a yaw column."""
        if yaw_step is None:
            return self.orientation
        return rot_z(yaw_of(rot) + yaw_step - self._orientation_yaw) @ self.orientation

    def targets(self, action: Tensor, q: Tensor, prev_target: Tensor | None) -> Tensor:
        step = action * self.scale  # (N, 3 or 4)
        pos, rot, jac = self.chain.jacobian(q)  # (N, 3), (N, 3, 3), (N, 6, J)
        target_rot = self.target_rotation(rot, step[:, 3] if self.yaw else None)
        error = torch.cat([step[:, :3], orientation_error(rot, target_rot)], dim=-1)  # (N, 6)
        dq = limit_step(dls_step(jac, error, self.damping), self.max_joint_step)  # (N, J)
        return torch.clamp(q + dq, self.chain.lower, self.chain.upper)
