"""The deploy contract: what a policy expects from the robot, carried inside the exported file.

Written by each task (`env.contract`), embedded into ONNX metadata at export, and checked by the
robot side before a policy may run. Plain dataclasses and JSON; imports neither torch nor numpy.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any

CONTRACT_VERSION = 1
"""Schema version; the deploy side refuses contracts of any other version."""

OBSERVATION_TERMS = (
    "base_ang_vel",
    "base_lin_vel",
    "projected_gravity",
    "velocity_command",
    "joint_pos_rel",
    "joint_vel",
    "last_action",
    "ee_pos",
    "ee_pose",
    "target_pos",
    "target_pose",
    "gripper",
)
"""Shared vocabulary of observation term names (plus `image:<camera>`)."""

ACTION_KINDS = ("joint_position_offset", "joint_position", "ee_delta")


@dataclass(frozen=True, kw_only=True)
class ObsTerm:
    """One observation term, in the order the policy reads them."""

    name: str
    """Vocabulary name (see OBSERVATION_TERMS)."""
    dim: int
    """Size of the term for one history step."""
    scale: float = 1.0
    """Multiplier applied after computing the term."""
    clip: float | None = None
    """Symmetric clip applied after scaling (None: no clip)."""
    history: int = 1
    """Number of stacked steps, newest last."""


@dataclass(frozen=True, kw_only=True)
class ActionSpec:
    """How policy outputs become joint commands: q_cmd = default + scale * clip(a) for offsets."""

    kind: str
    """One of ACTION_KINDS."""
    scale: tuple[float, ...]
    """Per-joint multiplier (policy order)."""
    clip: float | None = None
    """Symmetric clip of the raw policy output before scaling."""
    chunk: int = 1
    """Actions per inference (action chunking); 1 for plain policies."""


@dataclass(frozen=True, kw_only=True)
class DeployContract:
    """Everything the robot side needs to run a policy exactly as it was trained."""

    robot: str
    joint_names: tuple[str, ...]
    """Joints in policy order; the robot side maps by name, never by index."""
    default_joint_pos: tuple[float, ...]
    kp: tuple[float, ...]
    kd: tuple[float, ...]
    torque_limits: tuple[float, ...]
    action: ActionSpec
    observation: tuple[ObsTerm, ...]
    policy_dt: float
    physics_dt: float
    quaternion_order: str = "wxyz"
    obs_normalization: bool = False
    """True when the observation normaliser is baked into the exported graph."""
    version: int = CONTRACT_VERSION
    run_id: str = ""
    config_hash: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    """Task-specific facts (e.g. command ranges, target workspace)."""

    @property
    def obs_dim(self) -> int:
        return sum(t.dim * t.history for t in self.observation)

    @property
    def action_dim(self) -> int:
        return len(self.joint_names)

    def with_run(self, run_id: str, config_hash: str, obs_normalization: bool) -> DeployContract:
        return replace(self, run_id=run_id, config_hash=config_hash, obs_normalization=obs_normalization)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @staticmethod
    def from_json(text: str) -> DeployContract:
        """Parse a contract; ValueError naming the problem if it is malformed or of another version."""
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"deploy contract is not valid JSON: {exc.msg} at line {exc.lineno}") from None
        if not isinstance(raw, dict):
            raise ValueError("deploy contract must be a JSON object")
        version = raw.get("version")
        if version != CONTRACT_VERSION:
            raise ValueError(
                f"deploy contract version {version!r} is not supported (this build reads {CONTRACT_VERSION})"
            )
        try:
            raw["action"] = ActionSpec(**{**raw["action"], "scale": tuple(raw["action"]["scale"])})
            raw["observation"] = tuple(ObsTerm(**t) for t in raw["observation"])
            for key in ("joint_names", "default_joint_pos", "kp", "kd", "torque_limits"):
                raw[key] = tuple(raw[key])
            return DeployContract(**raw)
        except (KeyError, TypeError) as exc:
            raise ValueError(f"deploy contract is missing or has an unexpected field: {exc}") from None
