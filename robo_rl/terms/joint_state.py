"""Observation terms of the joints (one entry per policy joint) and of the policy's own previous action."""

from __future__ import annotations

from typing import Any

from robo_rl.terms.base_motion import identity
from robo_rl.terms.records import ObservationTermRecord, per_action_column, per_joint, register_observation


def joint_pos_rel(joint_pos: Any, default_joint_pos: Any) -> Any:
    """Joint positions relative to the default pose (N, J) or (J,), policy joint order (both sides)."""
    return joint_pos - default_joint_pos


register_observation(ObservationTermRecord(
    name="joint_pos_rel", inputs=("joint_pos", "default_joint_pos"), torch=joint_pos_rel, numpy=joint_pos_rel,
    dim=per_joint, framework_names=("joint_pos_rel",),
))
register_observation(ObservationTermRecord(
    name="joint_vel", inputs=("joint_vel",), torch=identity, numpy=identity, dim=per_joint,
    framework_names=("joint_vel_rel",),  # relative to a default velocity of 0
))
register_observation(ObservationTermRecord(
    name="last_action", inputs=("action",), torch=identity, numpy=identity, dim=per_action_column,
    state="the previous raw action; zero after a reset (the sim's action manager, the robot's PolicyStep)",
    framework_names=("last_action",),
))
