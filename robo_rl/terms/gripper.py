"""Action term `gripper`: one column; scale * a > 0 closes (goal params.closed), otherwise opens (params.open).

The target moves from the previous target toward the goal by at most params.max_step per policy step (the hand's
speed); after a reset it moves on from the measured joint position.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from robo_rl.core.contract import ActionTermSpec, finite_number
from robo_rl.terms.records import ActionTermRecord, register_action


def gripper_spec(joint: str, *, open_pos: float, closed_pos: float, max_step: float) -> ActionTermSpec:
    """One column: > 0 closes the gripper joint toward `closed_pos`, <= 0 opens it toward `open_pos`, at most
    `max_step` per policy step."""
    return ActionTermSpec(kind="gripper", joints=(joint,), scale=(1.0,),
                          params={"open": float(open_pos), "closed": float(closed_pos), "max_step": float(max_step)})


def check(spec: ActionTermSpec, at: str) -> None:
    """One joint, one column of scale > 0, two different finite positions and a finite step > 0."""
    p = spec.params
    if len(spec.joints) != 1 or len(spec.scale) != 1 or not spec.scale[0] > 0:
        raise ValueError(f"{at}: a gripper term drives one joint with one column of scale > 0")
    if not (finite_number(p["open"]) and finite_number(p["closed"]) and p["open"] != p["closed"]):
        raise ValueError(f"{at}: params.open = {p['open']!r}, params.closed = {p['closed']!r}: must be two "
                         f"different finite joint positions")
    if not finite_number(p["max_step"]) or p["max_step"] <= 0:
        raise ValueError(f"{at}: params.max_step = {p['max_step']!r}: must be a finite number > 0")


def gripper(action: Any, prev_target: Any, *, open_pos: float, closed_pos: float, max_step: float) -> Any:
    """Gripper joint target (N, 1) (torch): from the previous target toward closed (a > 0) or open, at most
    max_step."""
    goal = prev_target.new_tensor(closed_pos).where(action > 0, open_pos)  # (N, 1)
    return prev_target + (goal - prev_target).clamp(-max_step, max_step)


def gripper_np(action: np.ndarray, prev_target: np.ndarray, *, open_pos: float, closed_pos: float,
               max_step: float) -> np.ndarray:
    """Gripper joint target (1,) (numpy), as `gripper`."""
    goal = np.where(action > 0, closed_pos, open_pos)
    return prev_target + np.clip(goal - prev_target, -max_step, max_step)


class Gripper:
    """Sim side: reads the previous targets of its joint (N, 1); tensor methods only."""

    uses_previous_target = True

    def __init__(self, spec: ActionTermSpec, default: Any):
        self.spec, self.kind, self.joints, self.dim = spec, spec.kind, spec.joints, spec.dim
        p = spec.params
        self.open_pos, self.closed_pos, self.max_step = float(p["open"]), float(p["closed"]), float(p["max_step"])
        self.scale = float(spec.scale[0])

    def targets(self, action: Any, q: Any, prev_target: Any) -> Any:
        prev = q if prev_target is None else prev_target
        return gripper(action * self.scale, prev, open_pos=self.open_pos, closed_pos=self.closed_pos,
                       max_step=self.max_step)


def build_numpy(spec: ActionTermSpec, default: np.ndarray):
    """Robot side: (a, q, prev) -> the next gripper target (1,)."""
    scale = np.asarray(spec.scale, dtype=np.float64)
    p = spec.params
    kw = {"open_pos": float(p["open"]), "closed_pos": float(p["closed"]), "max_step": float(p["max_step"])}
    return lambda a, q, prev: gripper_np(a * scale, prev, **kw)


register_action(ActionTermRecord(
    name="gripper",
    params={"open": "open joint position", "closed": "closed joint position",
            "max_step": "largest target change per policy step"},
    check=check,
    build_torch=Gripper,
    build_numpy=build_numpy,
    uses_previous_target=True,
    state="the previous target of its joint; after a reset, the measured joint position",
    fixed_targets=lambda spec: [(key, spec.joints[0], spec.params[key]) for key in ("open", "closed")],
))
