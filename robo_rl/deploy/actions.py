"""Action terms in numpy: the policy's raw actions and the measured joint state -> joint position targets.

Twins of the sim-side torch terms in `robo_rl.tasks.actions` (same names, same maths; kinds described in
`robo_rl.core.contract.ActionTermSpec`), built from the contract's action terms. The deploy side computes every
joint target here, for every kind: `ee_delta` needs the measured joints and `gripper` the previous target,
which the ONNX graph does not have. numpy only; single states, no batch dimension.
"""

from __future__ import annotations

import numpy as np

from robo_rl.core.contract import ActionTermSpec, DeployContract
from robo_rl.deploy.kinematics import SerialChain, quat_to_matrix


def joint_position_offset(action: np.ndarray, default: np.ndarray, scale: np.ndarray) -> np.ndarray:
    return default + scale * action


def joint_position(action: np.ndarray, offset: np.ndarray, scale: np.ndarray) -> np.ndarray:
    return offset + scale * action


def gripper(action: np.ndarray, prev_target: np.ndarray, *, open_pos: float, closed_pos: float,
            max_step: float) -> np.ndarray:
    goal = np.where(action > 0, closed_pos, open_pos)
    return prev_target + np.clip(goal - prev_target, -max_step, max_step)


def orientation_error(rot: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Rotation (3,) that turns frame rot (3, 3) toward target (3, 3): 0.5 * sum_i rot_i x target_i."""
    return 0.5 * np.cross(rot, target, axis=0).sum(-1)


def yaw_of(rot: np.ndarray) -> float:
    return float(np.arctan2(rot[1, 0], rot[0, 0]))


def rot_z(angle: float) -> np.ndarray:
    c, s = np.cos(angle), np.sin(angle)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def dls_step(jac: np.ndarray, error: np.ndarray, damping: float) -> np.ndarray:
    """dq (J,) = J^T (J J^T + damping^2 I)^-1 e for a Jacobian (6, J) and an error (6,)."""
    return jac.T @ np.linalg.solve(jac @ jac.T + damping**2 * np.eye(jac.shape[0]), error)


def limit_step(dq: np.ndarray, max_step: float) -> np.ndarray:
    return dq * (max_step / max(float(np.abs(dq).max()), max_step))


class EeDelta:
    """Numpy twin of `robo_rl.tasks.actions.EeDeltaTerm`."""

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


class ActionMap:
    """All action terms of a contract: raw actions (A,) and measured joints -> targets (J,), contract joint order.

    Keeps the targets it returned last (the gripper moves from them); `reset` forgets them, so the next call
    starts from the measured joint positions.

    Args:
        contract: a validated deploy contract.
    """

    def __init__(self, contract: DeployContract):
        self.contract = contract
        index = {n: i for i, n in enumerate(contract.joint_names)}
        default = np.asarray(contract.default_joint_pos, dtype=np.float64)
        self._terms = []  # (spec, action columns, joint positions (J_t,), compute function)
        start = 0
        for spec in contract.action.terms:
            joints = np.array([index[j] for j in spec.joints], dtype=np.int64)
            cols = slice(start, start + spec.dim)
            start += spec.dim
            self._terms.append((spec, cols, joints, self._compute(spec, default[joints])))
        self._prev: np.ndarray | None = None  # (J,) last targets

    @staticmethod
    def _compute(spec: ActionTermSpec, default: np.ndarray):
        """(action, q, prev_target) -> targets for one term."""
        scale = np.asarray(spec.scale, dtype=np.float64)
        p = spec.params
        if spec.kind == "joint_position_offset":
            return lambda a, q, prev: joint_position_offset(a, default, scale)
        if spec.kind == "joint_position":
            offset = np.asarray(p["offset"], dtype=np.float64)
            return lambda a, q, prev: joint_position(a, offset, scale)
        if spec.kind == "gripper":
            kw = {"open_pos": float(p["open"]), "closed_pos": float(p["closed"]), "max_step": float(p["max_step"])}
            return lambda a, q, prev: gripper(a * scale, prev, **kw)
        if spec.kind == "ee_delta":
            ik = EeDelta(spec)
            return lambda a, q, prev: ik(a, q)
        raise ValueError(f"action term kind {spec.kind!r} is not implemented on the deploy side")

    def reset(self) -> None:
        self._prev = None

    def __call__(self, actions: np.ndarray, q: np.ndarray) -> np.ndarray:
        """Joint targets (J,) float64, contract order, for raw actions (A,) and measured positions q (J,)."""
        actions = np.asarray(actions, dtype=np.float64)
        q = np.asarray(q, dtype=np.float64)
        prev = q if self._prev is None else self._prev
        out = np.empty(len(self.contract.joint_names))
        for _, cols, joints, compute in self._terms:
            out[joints] = compute(actions[cols], q[joints], prev[joints])
        self._prev = out.copy()
        return out
