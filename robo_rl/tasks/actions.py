"""Action terms: how groups of raw policy outputs become joint position targets, batched in torch.

A task declares its terms as contract specs (`ActionTermSpec`, built with the `*_spec` helpers below); the
base class turns each into a term object once (`make_term`), with its constants as tensors, and on every
step maps the term's raw action columns (N, dim) and its joints' state to targets (N, J_t). The deploy side
(`robo_rl.deploy.actions`) has numpy twins with the same names built from the same specs; a parity test
feeds both the same states. Kinds and their maths are described in `robo_rl.core.contract.ActionTermSpec`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from robo_rl.core.contract import ActionTermSpec
from robo_rl.tasks.kinematics import SerialChain, quat_to_matrix, serial_chain


# ---------------------------------------------------------------------------------------------- specs
def joint_position_offset_spec(joints: tuple[str, ...], scale: float) -> ActionTermSpec:
    """q* = default_joint_pos + scale * a for `joints`, one column each."""
    return ActionTermSpec(kind="joint_position_offset", joints=tuple(joints), scale=(float(scale),) * len(joints))


def joint_position_spec(joints: tuple[str, ...], lower: Tensor, upper: Tensor) -> ActionTermSpec:
    """Absolute targets q* = mid + half_range * a: actions in [-1, 1] span each joint's range [lower, upper]."""
    mid, half = (upper + lower) / 2, (upper - lower) / 2  # (J,) each
    return ActionTermSpec(kind="joint_position", joints=tuple(joints), scale=tuple(half.tolist()),
                          params={"offset": mid.tolist()})


def ee_delta_spec(model: Any, site: str, *, scale: float, yaw_scale: float | None = None, damping: float,
                  max_joint_step: float, orientation: list[float]) -> ActionTermSpec:
    """Cartesian steps of `site` (scale m per unit; with `yaw_scale`, a fourth column turns the hand about the
    vertical by yaw_scale rad per unit) through damped least squares on the chain's Jacobian.

    Args:
        model: the MjModel the chain is read from (root: the site body's ancestor below the world).
        site: the end-effector site.
        damping: DLS damping (m); larger is smoother near singularities, slower far from them.
        max_joint_step: the largest joint change per step (rad); larger steps are scaled down as a whole.
        orientation: the hand orientation (w, x, y, z) in the base frame that the IK holds; with a yaw
            column only its pointing direction is held and the yaw follows the actions.
    """
    chain = serial_chain(model, site)
    joints = tuple(link["joint"] for link in chain["links"] if link["joint"] is not None)
    columns = (float(scale),) * 3 + (() if yaw_scale is None else (float(yaw_scale),))
    params = {"chain": chain, "damping": float(damping), "yaw": yaw_scale is not None,
              "max_joint_step": float(max_joint_step), "orientation": [float(v) for v in orientation]}
    return ActionTermSpec(kind="ee_delta", joints=joints, scale=columns, params=params)


def gripper_spec(joint: str, *, open_pos: float, closed_pos: float, max_step: float) -> ActionTermSpec:
    """One column: > 0 closes the gripper joint toward `closed_pos`, <= 0 opens it toward `open_pos`, at most
    `max_step` per policy step."""
    return ActionTermSpec(kind="gripper", joints=(joint,), scale=(1.0,),
                          params={"open": float(open_pos), "closed": float(closed_pos), "max_step": float(max_step)})


# ---------------------------------------------------------------------------------------------- maths
def joint_position_offset(action: Tensor, default: Tensor, scale: Tensor | float) -> Tensor:
    """default + scale * a (N, J); a scalar scale takes one fused op (bit-identical to the tasks' own code)."""
    if isinstance(scale, float):
        return torch.add(default, action, alpha=scale)
    return torch.addcmul(default, scale, action)


def joint_position(action: Tensor, offset: Tensor, scale: Tensor) -> Tensor:
    """offset + scale * a (N, J)."""
    return torch.addcmul(offset, scale, action)


def gripper(action: Tensor, prev_target: Tensor, *, open_pos: float, closed_pos: float, max_step: float) -> Tensor:
    """Gripper joint target (N, 1): from the previous target toward closed (a > 0) or open, at most max_step."""
    goal = torch.where(action > 0, closed_pos, open_pos)  # (N, 1)
    return prev_target + (goal - prev_target).clamp(-max_step, max_step)


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


# ---------------------------------------------------------------------------------------------- terms
class ActionTerm:
    """One action term built from its spec: `targets` maps raw actions (N, dim) to joint targets (N, J_t).

    Attributes:
        spec: the contract spec the term was built from.
        kind, joints, dim: as in the spec.
        uses_previous_target: True when `targets` reads the previous targets of its joints (the gripper).
    """

    uses_previous_target = False

    def __init__(self, spec: ActionTermSpec):
        self.spec = spec
        self.kind = spec.kind
        self.joints = spec.joints
        self.dim = spec.dim

    def targets(self, action: Tensor, q: Tensor, prev_target: Tensor | None) -> Tensor:
        """Joint targets (N, J_t) of raw actions (N, dim), measured joints q (N, J_t), previous targets (N, J_t)."""
        raise NotImplementedError


class JointPositionOffsetTerm(ActionTerm):
    def __init__(self, spec: ActionTermSpec, default: Tensor):
        super().__init__(spec)
        self.default = default  # (J,)
        uniform = len(set(spec.scale)) == 1
        self.scale = float(spec.scale[0]) if uniform else default.new_tensor(spec.scale)

    def targets(self, action: Tensor, q: Tensor, prev_target: Tensor | None) -> Tensor:
        return joint_position_offset(action, self.default, self.scale)


class JointPositionTerm(ActionTerm):
    def __init__(self, spec: ActionTermSpec, dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu"):
        super().__init__(spec)
        self.offset = torch.tensor(spec.params["offset"], dtype=dtype, device=device)  # (J,)
        self.scale = torch.tensor(spec.scale, dtype=dtype, device=device)  # (J,)

    def targets(self, action: Tensor, q: Tensor, prev_target: Tensor | None) -> Tensor:
        return joint_position(action, self.offset, self.scale)


class GripperTerm(ActionTerm):
    uses_previous_target = True

    def __init__(self, spec: ActionTermSpec):
        super().__init__(spec)
        p = spec.params
        self.open_pos, self.closed_pos, self.max_step = float(p["open"]), float(p["closed"]), float(p["max_step"])
        self.scale = float(spec.scale[0])

    def targets(self, action: Tensor, q: Tensor, prev_target: Tensor | None) -> Tensor:
        prev = q if prev_target is None else prev_target
        return gripper(action * self.scale, prev, open_pos=self.open_pos, closed_pos=self.closed_pos,
                       max_step=self.max_step)


class EeDeltaTerm(ActionTerm):
    """Cartesian steps of the chain's site through damped least squares (see ActionTermSpec)."""

    def __init__(self, spec: ActionTermSpec, dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu"):
        super().__init__(spec)
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


def make_term(spec: ActionTermSpec, default: Tensor) -> ActionTerm:
    """The term object of a spec; `default` (J_t,) is the default pose of its joints (joint_position_offset), and
    its dtype and device are the term's."""
    if spec.kind == "joint_position_offset":
        return JointPositionOffsetTerm(spec, default)
    if spec.kind == "joint_position":
        return JointPositionTerm(spec, default.dtype, default.device)
    if spec.kind == "ee_delta":
        return EeDeltaTerm(spec, default.dtype, default.device)
    if spec.kind == "gripper":
        return GripperTerm(spec)
    raise ValueError(f"action term kind {spec.kind!r} has no implementation")
