"""A real robot's description (`hardware/<robot>.yaml`): joints as the robot reports them, limits,
gains, rates and safety margins. Loaded and validated before anything connects to the robot."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml


@dataclass(frozen=True, kw_only=True)
class SafetyConfig:
    """Margins of the SafetyFilter and the state machine."""

    joint_limit_margin: float = 0.05
    """Position targets are clamped this far (rad) inside the joint limits."""
    max_position_step: float = 0.25
    """Largest change of a position target between two ticks (rad)."""
    state_timeout_s: float = 0.1
    """State older than this (by header stamp or by receive time) trips the watchdog -> DAMP."""
    max_tilt_rad: float | None = None
    """Legged robots: roll or pitch beyond this -> DAMP (None disables the attitude guard)."""
    ramp_time_s: float = 2.0
    """RAMP: time to move position and gains from the current pose to the default pose."""
    damping_kd: float = 1.0
    """DAMP: joint damping (N m s/rad) with zero stiffness."""
    torque_margin: float = 1.0
    """Torque check: |kp (q* - q) - kd dq| must stay below torque_margin * torque limit."""


@dataclass(frozen=True, kw_only=True)
class HardwareSpec:
    """One robot. Arrays are in the robot's own joint order (`joint_names`)."""

    robot: str
    kind: str
    """`legged` (floating base, IMU) or `arm` (fixed base)."""
    joint_names: tuple[str, ...]
    joint_lower: np.ndarray
    joint_upper: np.ndarray
    velocity_limits: np.ndarray
    torque_limits: np.ndarray
    kp: np.ndarray
    """Stiffness used to hold and ramp (POLICY uses the contract's gains)."""
    kd: np.ndarray
    control_rate_hz: float
    """Rate of the policy loop; must match the contract's 1 / policy_dt."""
    quaternion_order: str = "wxyz"
    """Order in which the robot reports its IMU quaternion."""
    safety: SafetyConfig = field(default_factory=SafetyConfig)
    transport: dict[str, Any] = field(default_factory=dict)
    """Transport settings (topics, interfaces); read by the transport that is chosen."""

    def index_of(self, names: tuple[str, ...] | list[str]) -> np.ndarray:
        """Positions of `names` in this robot's joint order; ValueError naming a missing joint."""
        lookup = {n: i for i, n in enumerate(self.joint_names)}
        missing = [n for n in names if n not in lookup]
        if missing:
            raise ValueError(
                f"joint(s) {', '.join(missing)} not in hardware {self.robot!r} (joints: {', '.join(self.joint_names)})"
            )
        return np.array([lookup[n] for n in names], dtype=np.int64)


_KINDS = ("legged", "arm")
_QUAT_ORDERS = ("wxyz", "xyzw")


def _vector(raw: dict[str, Any], key: str, n: int, path: str) -> np.ndarray:
    value = raw.get(key)
    if not isinstance(value, list) or len(value) != n:
        raise ValueError(f"{path}: {key} must be a list of {n} numbers (one per joint)")
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{path}: {key} must hold numbers only") from None
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{path}: {key} holds a non-finite value")
    return arr


def load_hardware(path: str | Path) -> HardwareSpec:
    """Read and validate `hardware/<robot>.yaml`; ValueError with one line naming the problem."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"hardware file {str(p)!r} does not exist")
    try:
        raw = yaml.safe_load(p.read_text())
    except yaml.YAMLError:
        raise ValueError(f"hardware file {p} is not valid YAML") from None
    if not isinstance(raw, dict):
        raise ValueError(f"hardware file {p}: top level must be a mapping")
    known = set(HardwareSpec.__dataclass_fields__)
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ValueError(f"{p}: unknown key(s) {', '.join(unknown)}; valid keys: {', '.join(sorted(known))}")

    names = raw.get("joint_names")
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise ValueError(f"{p}: joint_names must be a non-empty list of names")
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"{p}: joint_names lists {', '.join(dupes)} more than once")
    n = len(names)
    kind = raw.get("kind")
    if kind not in _KINDS:
        raise ValueError(f"{p}: kind = {kind!r}: allowed values are {', '.join(_KINDS)}")
    quat = raw.get("quaternion_order", "wxyz")
    if quat not in _QUAT_ORDERS:
        raise ValueError(f"{p}: quaternion_order = {quat!r}: allowed values are {', '.join(_QUAT_ORDERS)}")
    rate = raw.get("control_rate_hz")
    if not isinstance(rate, (int, float)) or not 0 < rate <= 10_000 or isinstance(rate, bool):
        raise ValueError(f"{p}: control_rate_hz = {rate!r}: must be a number in (0, 10000]")
    safety_raw = raw.get("safety") or {}
    if not isinstance(safety_raw, dict):
        raise ValueError(f"{p}: safety must be a mapping")
    unknown = sorted(set(safety_raw) - set(SafetyConfig.__dataclass_fields__))
    if unknown:
        raise ValueError(f"{p}: unknown safety key(s) {', '.join(unknown)}")
    safety = SafetyConfig(**safety_raw)
    for key, value in vars(safety).items():
        if value is not None and (not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0):
            raise ValueError(f"{p}: safety.{key} = {value!r}: must be a non-negative number")

    spec = HardwareSpec(
        robot=str(raw.get("robot", p.stem)),
        kind=kind,
        joint_names=tuple(names),
        joint_lower=_vector(raw, "joint_lower", n, str(p)),
        joint_upper=_vector(raw, "joint_upper", n, str(p)),
        velocity_limits=_vector(raw, "velocity_limits", n, str(p)),
        torque_limits=_vector(raw, "torque_limits", n, str(p)),
        kp=_vector(raw, "kp", n, str(p)),
        kd=_vector(raw, "kd", n, str(p)),
        control_rate_hz=float(rate),
        quaternion_order=quat,
        safety=safety,
        transport=dict(raw.get("transport") or {}),
    )
    bad = [spec.joint_names[i] for i in np.flatnonzero(spec.joint_lower >= spec.joint_upper)]
    if bad:
        raise ValueError(f"{p}: joint_lower must be below joint_upper for {', '.join(bad)}")
    return spec
