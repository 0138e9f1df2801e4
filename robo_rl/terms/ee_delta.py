"""Action term `ee_delta`: Cartesian steps of a serial chain's site (end effector) through damped least squares.

a: the term's raw actions; q: the measured positions of its joints. The site steps by scale * a[:3] (m, base
frame), plus a yaw step scale[3] * a[3] (rad) when params.yaw; the hand keeps params.orientation's pointing
direction (and its yaw without a yaw column). Damped least squares on the site Jacobian at q (damping
params.damping, 6-D position + orientation error) gives dq, scaled so that max |dq| <= params.max_joint_step;
q* = q + dq, clamped into the chain's joint ranges. params.chain is the kinematic chain
(`robo_rl.terms.kinematics.validate_chain`). The sim side is `robo_rl.terms.ee_delta_torch`; the robot side
(numpy) is here.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from robo_rl.core.contract import ActionTermSpec, finite_number
from robo_rl.terms.kinematics import SerialChain, quat_to_matrix, serial_chain, validate_chain
from robo_rl.terms.records import ActionTermRecord, register_action


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


def check(spec: ActionTermSpec, at: str) -> None:
    """3 columns (4 with yaw), damping and step > 0, an orientation quaternion, a chain over exactly its joints."""
    p = spec.params
    if not isinstance(p["yaw"], bool):
        raise ValueError(f"{at}: params.yaw = {p['yaw']!r}: must be true or false")
    want = 4 if p["yaw"] else 3
    if len(spec.scale) != want:
        raise ValueError(f"{at}: scale has {len(spec.scale)} entries; expected {want} (x, y, z{', yaw' * p['yaw']})")
    for key in ("damping", "max_joint_step"):
        if not finite_number(p[key]) or p[key] <= 0:
            raise ValueError(f"{at}: params.{key} = {p[key]!r}: must be a finite number > 0")
    q = p["orientation"]
    if not (isinstance(q, list) and len(q) == 4 and all(map(finite_number, q)) and any(v != 0 for v in q)):
        raise ValueError(f"{at}: params.orientation = {q!r}: must be a quaternion (4 finite numbers)")
    chain_joints = validate_chain(p["chain"], f"{at}: params.chain")
    if chain_joints != spec.joints:
        raise ValueError(f"{at}: params.chain moves joints {list(chain_joints)}, but the term drives "
                         f"{list(spec.joints)} (they must be the same, in order)")


def orientation_error(rot: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Rotation (3,) that turns frame rot (3, 3) toward target (3, 3): 0.5 * sum_i rot_i x target_i."""
    return 0.5 * np.cross(rot, target, axis=0).sum(-1)


def yaw_of(rot: np.ndarray) -> float:
    """Heading of the frame's x axis about the base z axis."""
    return float(np.arctan2(rot[1, 0], rot[0, 0]))


def rot_z(angle: float) -> np.ndarray:
    """Rotation (3, 3) about z by angle."""
    c, s = np.cos(angle), np.sin(angle)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def dls_step(jac: np.ndarray, error: np.ndarray, damping: float) -> np.ndarray:
    """dq (J,) = J^T (J J^T + damping^2 I)^-1 e for a Jacobian (6, J) and an error (6,)."""
    return jac.T @ np.linalg.solve(jac @ jac.T + damping**2 * np.eye(jac.shape[0]), error)


def limit_step(dq: np.ndarray, max_step: float) -> np.ndarray:
    """dq (J,) scaled down as a whole when its largest entry exceeds max_step."""
    return dq * (max_step / max(float(np.abs(dq).max()), max_step))


class EeDelta:
    """Robot side (numpy) of `robo_rl.terms.ee_delta_torch.EeDeltaTerm`: (a, q) -> targets (J_t,)."""

    def __init__(self, spec: ActionTermSpec):
        p = spec.params
        self.chain = SerialChain(p["chain"])
        self.scale = np.asarray(spec.scale, dtype=np.float64)  # (3,) or (4,)
        self.damping = float(p["damping"])
        self.max_joint_step = float(p["max_joint_step"])
        self.yaw = bool(p["yaw"])
        self.orientation = quat_to_matrix(np.asarray(p["orientation"]))  # (3, 3)
        self._orientation_yaw = yaw_of(self.orientation)

    def __call__(self, action: np.ndarray, q: np.ndarray) -> np.ndarray:
        step = action * self.scale
        _, rot, jac = self.chain.jacobian(q)
        target = self.orientation
        if self.yaw:
            target = rot_z(yaw_of(rot) + step[3] - self._orientation_yaw) @ self.orientation
        error = np.concatenate([step[:3], orientation_error(rot, target)])  # (6,)
        dq = limit_step(dls_step(jac, error, self.damping), self.max_joint_step)
        return np.clip(q + dq, self.chain.lower, self.chain.upper)


def build_torch(spec: ActionTermSpec, default: Any) -> Any:
    """Sim side: `robo_rl.terms.ee_delta_torch.EeDeltaTerm` in the dtype and on the device of `default`."""
    from robo_rl.terms.ee_delta_torch import EeDeltaTerm  # torch: optional, absent on the robot

    return EeDeltaTerm(spec, default.dtype, default.device)


def build_numpy(spec: ActionTermSpec, default: np.ndarray):
    """Robot side: (a, q, prev) -> targets (J_t,)."""
    ik = EeDelta(spec)
    return lambda a, q, prev: ik(a, q)


register_action(ActionTermRecord(
    name="ee_delta",
    params={"chain": "the serial chain from the base to the end-effector site", "damping": "DLS damping (m)",
            "yaw": "true: a fourth column turns the hand about the vertical",
            "max_joint_step": "largest joint change per step (rad)",
            "orientation": "the hand orientation the IK holds (w, x, y, z), base frame"},
    check=check,
    build_torch=build_torch,
    build_numpy=build_numpy,
    robot_kinds=("arm",),  # its chain starts at the robot base
    robot_kinds_reason="end-effector actions need a fixed-base arm",
    parity_tolerance=2e-5,  # float32 IK (training) against float64 (robot)
))
