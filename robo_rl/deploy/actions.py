"""The robot side's action map: the policy's raw actions and the measured joint state -> joint position targets.

Each contract action term is built by its kind's numpy builder from the term registry (`robo_rl.terms`): the twin
of the sim's torch term, same maths. The deploy side computes every joint target here, for every kind: some need
the measured joints or the previous target, which the ONNX graph does not have. numpy only; single states, no
batch dimension.
"""

from __future__ import annotations

import numpy as np

from robo_rl.core.contract import DeployContract
from robo_rl.terms import ACTION_TERMS


class ActionMap:
    """All action terms of a contract: raw actions (A,) and measured joints -> targets (J,), contract joint order.

    Keeps the targets it returned last (terms such as the gripper move on from them); `reset` forgets them, so
    the next call starts from the measured joint positions.

    Args:
        contract: a validated deploy contract.
    """

    def __init__(self, contract: DeployContract):
        self.contract = contract
        index = {n: i for i, n in enumerate(contract.joint_names)}
        default = np.asarray(contract.default_joint_pos, dtype=np.float64)
        self._terms = []  # (spec, action columns, joint positions (J_t,), compute function (a, q, prev) -> targets)
        start = 0
        for spec in contract.action.terms:
            joints = np.array([index[j] for j in spec.joints], dtype=np.int64)
            cols = slice(start, start + spec.dim)
            start += spec.dim
            compute = ACTION_TERMS.get(spec.kind).build_numpy(spec, default[joints])
            self._terms.append((spec, cols, joints, compute))
        self._prev: np.ndarray | None = None  # (J,) last targets

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

    def actions_for(self, targets: np.ndarray) -> np.ndarray:
        """Raw actions (A,) float32 whose targets are `targets` (J,) (contract order), clipped to the contract's clip:
        the inverse of the stateless joint-space terms (targets = offset + scale * a). What an operator's joint
        targets are in the policy's action space, so a takeover is recorded as the policy's own actions.

        Raises:
            ValueError: a term whose targets depend on the robot's state (no affine map to invert), one line.
        """
        targets = np.asarray(targets, dtype=np.float64)
        actions = np.empty(self.contract.action_dim)
        default = np.asarray(self.contract.default_joint_pos, dtype=np.float64)
        for spec, cols, joints, _ in self._terms:
            affine = ACTION_TERMS.get(spec.kind).graph_affine
            if affine is None:
                raise ValueError(f"action term {spec.kind!r} maps actions to targets through the robot's state: joint "
                                 "targets cannot be written as its actions (an operator takeover needs joint-space "
                                 "terms)")
            offset, scale = (np.asarray(v, dtype=np.float64) for v in affine(spec, list(default[joints])))
            actions[cols] = (targets[joints] - offset) / scale
        clip = self.contract.action.clip
        return (actions if clip is None else np.clip(actions, -clip, clip)).astype(np.float32)

