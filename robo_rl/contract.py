"""The deploy contract: what a policy expects from the robot, carried inside the exported file.

Written by each task (`env.contract`), embedded into ONNX metadata at export, and checked by the
robot side before a policy may run. Plain dataclasses and JSON; imports neither torch nor numpy.
"""

from __future__ import annotations

import json
import math
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

TERM_DIMS = {
    "base_ang_vel": 3,
    "base_lin_vel": 3,
    "projected_gravity": 3,
    "velocity_command": 3,
    "ee_pos": 3,
    "ee_pose": 7,
    "target_pos": 3,
    "target_pose": 7,
}
"""Fixed sizes of vocabulary terms; `joint_pos_rel`, `joint_vel`, `last_action` have one entry per joint."""

PER_JOINT_TERMS = ("joint_pos_rel", "joint_vel", "last_action")
"""Terms whose size is the number of policy joints."""

COMMAND_TERMS = ("velocity_command", "target_pos")
"""Observation terms that are operator inputs; their trained ranges are read by `command_ranges`."""


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


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

    def validate(self) -> None:
        """Check the contract on its own (no robot needed); ValueError with one line naming the field.

        Refuses: term names outside the vocabulary (OBSERVATION_TERMS, `image:<camera>`), dims <= 0 or
        different from the known size of the term, non-finite scale or clip, scale <= 0, clip <= 0,
        history < 1; policy_dt or physics_dt not finite > 0 or policy_dt not a whole number of
        physics steps; an unknown action kind, non-finite action scale or clip, chunk < 1; per-joint
        arrays of the wrong length; kp, kd, torque_limits not finite >= 0; default_joint_pos not finite.
        """
        n = len(self.joint_names)
        if n == 0:
            raise ValueError("contract joint_names is empty")
        for key in ("default_joint_pos", "kp", "kd", "torque_limits"):
            values = getattr(self, key)
            if len(values) != n:
                raise ValueError(f"contract {key} has {len(values)} entries for {n} joints")
            for name, v in zip(self.joint_names, values, strict=True):
                if not _finite(v) or (key != "default_joint_pos" and v < 0):
                    allowed = "a finite number" if key == "default_joint_pos" else "a finite number >= 0"
                    raise ValueError(f"contract {key} for {name} = {v!r}: must be {allowed}")
        for key in ("policy_dt", "physics_dt"):
            v = getattr(self, key)
            if not _finite(v) or v <= 0:
                raise ValueError(f"contract {key} = {v!r}: must be a finite number > 0 (s)")
        steps = self.policy_dt / self.physics_dt
        if abs(steps - round(steps)) > 1e-6 * max(1.0, steps):
            raise ValueError(f"contract policy_dt = {self.policy_dt!r} is not a whole number of physics_dt = "
                             f"{self.physics_dt!r} steps")
        a = self.action
        if a.kind not in ACTION_KINDS:
            raise ValueError(f"contract action.kind = {a.kind!r}: allowed values are {', '.join(ACTION_KINDS)}")
        if len(a.scale) != n:
            raise ValueError(f"contract action.scale has {len(a.scale)} entries for {n} joints")
        if not all(_finite(v) for v in a.scale):
            raise ValueError(f"contract action.scale = {list(a.scale)!r}: must be finite numbers")
        if a.clip is not None and (not _finite(a.clip) or a.clip <= 0):
            raise ValueError(f"contract action.clip = {a.clip!r}: must be a finite number > 0 or null")
        if not isinstance(a.chunk, int) or isinstance(a.chunk, bool) or a.chunk < 1:
            raise ValueError(f"contract action.chunk = {a.chunk!r}: must be an integer >= 1")
        if not self.observation:
            raise ValueError("contract observation lists no terms")
        for i, t in enumerate(self.observation):
            where = f"contract observation[{i}] ({t.name!r})"
            if not isinstance(t.name, str) or not (t.name in OBSERVATION_TERMS or t.name.startswith("image:")):
                raise ValueError(f"{where}: unknown term name; allowed: {', '.join(OBSERVATION_TERMS)}, image:<camera>")
            expected = n if t.name in PER_JOINT_TERMS else TERM_DIMS.get(t.name)
            if not isinstance(t.dim, int) or isinstance(t.dim, bool) or t.dim <= 0:
                raise ValueError(f"{where}: dim = {t.dim!r}: must be an integer > 0")
            if expected is not None and t.dim != expected:
                raise ValueError(f"{where}: dim = {t.dim}: the term has {expected} entries")
            if not _finite(t.scale) or t.scale <= 0:
                raise ValueError(f"{where}: scale = {t.scale!r}: must be a finite number > 0")
            if t.clip is not None and (not _finite(t.clip) or t.clip <= 0):
                raise ValueError(f"{where}: clip = {t.clip!r}: must be a finite number > 0 or null")
            if not isinstance(t.history, int) or isinstance(t.history, bool) or t.history < 1:
                raise ValueError(f"{where}: history = {t.history!r}: must be an integer >= 1")

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


def _range_pair(extra: dict[str, Any], low_key: str, high_key: str, dim: int) -> tuple[tuple[float, ...], ...]:
    low, high = extra.get(low_key), extra.get(high_key)
    for key, v in ((low_key, low), (high_key, high)):
        if not isinstance(v, (list, tuple)) or len(v) != dim or not all(_finite(x) for x in v):
            raise ValueError(f"contract extra.{key} = {v!r}: must be {dim} finite numbers")
    if any(lo > hi for lo, hi in zip(low, high, strict=True)):
        raise ValueError(f"contract extra.{low_key} = {list(low)} exceeds extra.{high_key} = {list(high)}")
    return tuple(float(x) for x in low), tuple(float(x) for x in high)


def _interval(extra: dict[str, Any], key: str) -> tuple[float, float]:
    v = extra.get(key)
    if not isinstance(v, (list, tuple)) or len(v) != 2 or not all(_finite(x) for x in v) or v[0] > v[1]:
        raise ValueError(f"contract extra.{key} = {v!r}: must be [low, high], finite, low <= high")
    return float(v[0]), float(v[1])


def command_ranges(contract: DeployContract) -> dict[str, tuple[tuple[float, ...], tuple[float, ...]]]:
    """The operator-command ranges the policy was trained on, by observation term name.

    Read from `contract.extra`: `velocity_command` from `lin_vel_x`, `lin_vel_y`, `ang_vel_z` (each
    [low, high]); `target_pos` from `target_low`, `target_high` (3-vectors, base frame). Only terms the
    policy observes are returned; a command term whose ranges the contract does not record is absent.

    Returns:
        {term: (low, high)}, low and high tuples of the term's size.

    Raises:
        ValueError: naming the `extra` field when a recorded range is malformed (non-finite, wrong size,
            low > high).
    """
    names = {t.name for t in contract.observation}
    extra = contract.extra or {}
    out: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {}
    keys = ("lin_vel_x", "lin_vel_y", "ang_vel_z")
    if "velocity_command" in names and all(k in extra for k in keys):
        intervals = [_interval(extra, key) for key in keys]
        out["velocity_command"] = (tuple(lo for lo, _ in intervals), tuple(hi for _, hi in intervals))
    if "target_pos" in names and ("target_low" in extra or "target_high" in extra):
        out["target_pos"] = _range_pair(extra, "target_low", "target_high", 3)
    return out
