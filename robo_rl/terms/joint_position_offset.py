"""Action term `joint_position_offset`: q* = default_joint_pos + scale * a, one column per joint."""

from __future__ import annotations

from typing import Any

import numpy as np

from robo_rl.core.contract import ActionTermSpec
from robo_rl.terms.records import ActionTermRecord, register_action


def joint_position_offset_spec(joints: tuple[str, ...], scale: float) -> ActionTermSpec:
    """q* = default_joint_pos + scale * a for `joints`, one column each."""
    return ActionTermSpec(kind="joint_position_offset", joints=tuple(joints), scale=(float(scale),) * len(joints))


def check_one_column_per_joint(spec: ActionTermSpec, at: str) -> None:
    """ValueError unless the spec has one scale entry per joint."""
    if len(spec.scale) != len(spec.joints):
        raise ValueError(f"{at}: scale has {len(spec.scale)} entries for {len(spec.joints)} joints")


class JointPositionOffset:
    """Sim side: targets (N, J_t) = default + scale * a; tensor methods only."""

    uses_previous_target = False

    def __init__(self, spec: ActionTermSpec, default: Any):
        self.spec, self.kind, self.joints, self.dim = spec, spec.kind, spec.joints, spec.dim
        self.default = default  # (J_t,)
        uniform = len(set(spec.scale)) == 1
        self.scale = float(spec.scale[0]) if uniform else default.new_tensor(spec.scale)  # float or (J_t,)

    def targets(self, action: Any, q: Any, prev_target: Any) -> Any:
        """default + scale * a (N, J_t); a scalar scale takes one fused op."""
        if isinstance(self.scale, float):
            return self.default.add(action, alpha=self.scale)
        return self.default.addcmul(self.scale, action)


def build_numpy(spec: ActionTermSpec, default: np.ndarray):
    """Robot side: (a, q, prev) -> default + scale * a (J_t,)."""
    scale = np.asarray(spec.scale, dtype=np.float64)
    return lambda a, q, prev: default + scale * a


register_action(ActionTermRecord(
    name="joint_position_offset",
    params={},
    check=check_one_column_per_joint,
    build_torch=JointPositionOffset,
    build_numpy=build_numpy,
    graph_affine=lambda spec, default: (list(default), list(spec.scale)),
))
