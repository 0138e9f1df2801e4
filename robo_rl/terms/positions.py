"""Observation terms of positions relative to the robot base (fixed-base arms): hand, target, object.

Simulated positions are world positions minus the base's; a robot reports them in its base frame already (its
`base_pos` source is zero).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from robo_rl.terms.command_ranges import Range, range_pair
from robo_rl.terms.records import ObservationTermRecord, register_observation

FALLBACK_TARGET = (0.5, 0.0, 0.4)
"""Reach target when a contract records no target box (base frame, m)."""


def relative_position(pos: Any, base_pos: Any) -> Any:
    """A position relative to the robot base (N, 3) or (3,) (fixed-base arms: base frame = world axes)."""
    return pos - base_pos


def target_pos_range(extra: dict[str, Any]) -> Range | None:
    """Trained target box from extra `target_low`, `target_high` (3-vectors, base frame)."""
    if "target_low" not in extra and "target_high" not in extra:
        return None
    return range_pair(extra, "target_low", "target_high", 3)


def target_pos_neutral(trained: Range | None) -> np.ndarray:
    """The centre of the trained target box (a fixed point in front of the arm when none is recorded)."""
    if trained is None:
        return np.array(FALLBACK_TARGET)
    return (np.asarray(trained[0]) + np.asarray(trained[1])) / 2


register_observation(ObservationTermRecord(
    name="ee_pos", inputs=("ee_pos", "base_pos"), torch=relative_position, numpy=relative_position, dim=3,
))
register_observation(ObservationTermRecord(
    name="target_pos", inputs=("target_pos", "base_pos"), torch=relative_position, numpy=relative_position, dim=3,
    command=True, command_range=target_pos_range, command_neutral=target_pos_neutral,
))
register_observation(ObservationTermRecord(
    name="object_pos", inputs=("object_pos", "base_pos"), torch=relative_position, numpy=relative_position, dim=3,
))
