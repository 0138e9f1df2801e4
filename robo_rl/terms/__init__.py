"""Every observation term and action term, one record each, in two open registries.

Loads on the robot: numpy only (a term's torch side is reached through tensor methods, or imported by its
builder where torch is). The built-in terms register when this package is imported; a new term is one module that
builds its record and calls `register_observation` / `register_action`.
"""

from robo_rl.terms import (  # noqa: F401  built-in terms: each module registers its records
    base_motion,
    ee_delta,
    gripper,
    joint_position,
    joint_position_offset,
    joint_state,
    positions,
)
from robo_rl.terms.records import (
    ACTION_TERMS,
    OBSERVATION_TERMS,
    SOURCES,
    ActionTermRecord,
    ObservationTermRecord,
    TermContext,
    per_action_column,
    per_joint,
    register_action,
    register_observation,
)
from robo_rl.terms.validation import validate_action, validate_contract

__all__ = [
    "ACTION_TERMS",
    "OBSERVATION_TERMS",
    "SOURCES",
    "ActionTermRecord",
    "ObservationTermRecord",
    "TermContext",
    "per_action_column",
    "per_joint",
    "register_action",
    "register_observation",
    "validate_action",
    "validate_contract",
]
