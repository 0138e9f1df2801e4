"""Action term `joint_position`: absolute targets q* = params.offset + scale * a, one column per joint."""

from __future__ import annotations

from typing import Any

import numpy as np

from robo_rl.core.contract import ActionTermSpec, finite_number
from robo_rl.terms.joint_position_offset import check_one_column_per_joint
from robo_rl.terms.records import ActionTermRecord, register_action


def joint_position_spec(joints: tuple[str, ...], lower: Any, upper: Any) -> ActionTermSpec:
    """Absolute targets q* = mid + half_range * a: actions in [-1, 1] span each joint's range [lower, upper]."""
    mid, half = (upper + lower) / 2, (upper - lower) / 2  # (J,) each
    return ActionTermSpec(kind="joint_position", joints=tuple(joints), scale=tuple(half.tolist()),
                          params={"offset": mid.tolist()})


def check(spec: ActionTermSpec, at: str) -> None:
    """One column per joint and one finite offset per joint."""
    check_one_column_per_joint(spec, at)
    offset = spec.params["offset"]
    if not (isinstance(offset, list) and len(offset) == len(spec.joints) and all(map(finite_number, offset))):
        raise ValueError(f"{at}: params.offset = {offset!r}: must be {len(spec.joints)} finite numbers")


class JointPosition:
    """Sim side: targets (N, J_t) = offset + scale * a; tensor methods only."""

    uses_previous_target = False

    def __init__(self, spec: ActionTermSpec, default: Any):
        self.spec, self.kind, self.joints, self.dim = spec, spec.kind, spec.joints, spec.dim
        self.offset = default.new_tensor(spec.params["offset"])  # (J_t,)
        self.scale = default.new_tensor(spec.scale)  # (J_t,)

    def targets(self, action: Any, q: Any, prev_target: Any) -> Any:
        return self.offset.addcmul(self.scale, action)


def build_numpy(spec: ActionTermSpec, default: np.ndarray):
    """Robot side: (a, q, prev) -> offset + scale * a (J_t,)."""
    offset = np.asarray(spec.params["offset"], dtype=np.float64)
    scale = np.asarray(spec.scale, dtype=np.float64)
    return lambda a, q, prev: offset + scale * a


register_action(ActionTermRecord(
    name="joint_position",
    params={"offset": "the target at a = 0, one per joint (rad)"},
    check=check,
    build_torch=JointPosition,
    build_numpy=build_numpy,
    graph_affine=lambda spec, default: (list(spec.params["offset"]), list(spec.scale)),
    fixed_targets=lambda spec: [("offset", j, v) for j, v in zip(spec.joints, spec.params["offset"], strict=True)],
))
