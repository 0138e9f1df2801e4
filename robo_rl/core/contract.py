"""The deploy contract: what a policy expects from the robot, carried inside the exported file.

Written by each task (`env.contract`), embedded into ONNX metadata at export, and checked by the
robot side before a policy may run. Plain dataclasses and JSON; imports neither torch nor numpy.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

CONTRACT_VERSION = 2
"""Schema version written by this build. Version 2 describes actions as a tuple of terms (`ActionSpec.terms`)."""

READABLE_VERSIONS = (1, 2)
"""Versions `DeployContract.from_json` reads; a version-1 contract (one `action.kind` for all joints) is read
as the equivalent version-2 contract with one term. Any other version is refused."""

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
    "object_pos",
    "gripper",
)
"""Shared vocabulary of observation term names (plus `image:<camera>`)."""

ACTION_KINDS = ("joint_position_offset", "joint_position", "ee_delta", "gripper")
"""Action term kinds: what one group of raw policy outputs means (see ActionTermSpec)."""

ACTION_PARAMS: dict[str, tuple[str, ...]] = {
    "joint_position_offset": (),
    "joint_position": ("offset",),
    "ee_delta": ("chain", "damping", "yaw", "max_joint_step", "orientation"),
    "gripper": ("open", "closed", "max_step"),
}
"""The `params` keys each action kind requires (no others are allowed)."""

TERM_DIMS = {
    "base_ang_vel": 3,
    "base_lin_vel": 3,
    "projected_gravity": 3,
    "velocity_command": 3,
    "ee_pos": 3,
    "ee_pose": 7,
    "target_pos": 3,
    "target_pose": 7,
    "object_pos": 3,
}
"""Fixed sizes of vocabulary terms; `joint_pos_rel`, `joint_vel` have one entry per joint, `last_action` one per
raw action column (`ActionSpec.dim`)."""

PER_JOINT_TERMS = ("joint_pos_rel", "joint_vel")
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
class ActionTermSpec:
    """One action term: a group of consecutive raw policy outputs and the joints it drives.

    Kinds (a: the term's clipped raw actions; q: the measured positions of its joints):
    - `joint_position_offset`: q* = default_joint_pos + scale * a, one column per joint.
    - `joint_position`: q* = params.offset + scale * a, one column per joint (absolute targets).
    - `ee_delta`: a Cartesian step of the chain's site, scale * a[:3] (m, base frame), plus a yaw step
      scale[3] * a[3] (rad) when params.yaw; the hand keeps params.orientation's pointing direction (and its yaw
      without a yaw column). Damped least squares on the site Jacobian at q (damping params.damping, 6-D
      position + orientation error) gives dq, scaled so that max |dq| <= params.max_joint_step; q* = q + dq,
      clamped into the chain's joint ranges. params.chain is the kinematic chain (see `validate_chain`).
    - `gripper`: one column; scale * a > 0 closes (goal params.closed), otherwise opens (params.open). The
      target moves from the previous target toward the goal by at most params.max_step per policy step (the
      hand's speed).

    params hold JSON values only (lists, not tuples), so a contract equals its JSON round trip.
    """

    kind: str
    """One of ACTION_KINDS."""
    joints: tuple[str, ...]
    """The contract joints this term drives (each contract joint is driven by exactly one term)."""
    scale: tuple[float, ...]
    """One multiplier per raw action column of the term; its length is the term's size."""
    params: dict[str, Any] = field(default_factory=dict)
    """Kind-specific parameters; the keys are ACTION_PARAMS[kind]."""

    @property
    def dim(self) -> int:
        """Raw action columns of this term."""
        return len(self.scale)


@dataclass(frozen=True, kw_only=True)
class ActionSpec:
    """How raw policy outputs become joint commands: clipped, then split into terms in order."""

    terms: tuple[ActionTermSpec, ...]
    """Action terms in the order of the raw action columns."""
    clip: float | None = None
    """Symmetric clip of the raw policy output before the terms see it."""
    chunk: int = 1
    """Actions per inference, executed open-loop one per policy_dt (action chunking); 1 for plain policies. With
    chunk E > 1 the policy's outputs are (B, E, A) and (B, E, J)."""

    @property
    def dim(self) -> int:
        """Raw action columns A (the policy's output size)."""
        return sum(t.dim for t in self.terms)

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(t.kind for t in self.terms)

    @property
    def scale(self) -> tuple[float, ...]:
        """Every term's scale, concatenated: one per raw action column."""
        return tuple(v for t in self.terms for v in t.scale)


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
        """Raw action columns A (not the number of joints: an `ee_delta` term drives 7 joints with 3 columns)."""
        return self.action.dim

    def validate(self) -> None:
        """Check the contract on its own (no robot needed); ValueError with one line naming the field.

        Refuses: term names outside the vocabulary (OBSERVATION_TERMS, `image:<camera>`), dims <= 0 or
        different from the known size of the term, non-finite scale or clip, scale <= 0, clip <= 0,
        history < 1; policy_dt or physics_dt not finite > 0 or policy_dt not a whole number of
        physics steps; malformed action terms (`validate_action`), non-finite action clip, chunk < 1;
        per-joint arrays of the wrong length; kp, kd, torque_limits not finite >= 0; default_joint_pos not finite.
        """
        n = len(self.joint_names)
        if n == 0:
            raise ValueError("contract joint_names is empty")
        dupes = sorted({j for j in self.joint_names if self.joint_names.count(j) > 1})
        if dupes:
            raise ValueError(f"contract lists joint(s) {', '.join(dupes)} more than once")
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
        validate_action(a, self.joint_names)
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
            expected = n if t.name in PER_JOINT_TERMS else a.dim if t.name == "last_action" else TERM_DIMS.get(t.name)
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
        if version not in READABLE_VERSIONS or isinstance(version, bool):
            readable = ", ".join(map(str, READABLE_VERSIONS))
            raise ValueError(f"deploy contract version {version!r} is not supported (this build reads {readable})")
        try:
            raw["action"] = _action_v1(raw) if version == 1 else _action_v2(raw["action"])
            raw["version"] = CONTRACT_VERSION
            raw["observation"] = tuple(ObsTerm(**t) for t in raw["observation"])
            for key in ("joint_names", "default_joint_pos", "kp", "kd", "torque_limits"):
                raw[key] = tuple(raw[key])
            return DeployContract(**raw)
        except (KeyError, TypeError) as exc:
            raise ValueError(f"deploy contract is missing or has an unexpected field: {exc}") from None


def _action_v1(raw: dict[str, Any]) -> ActionSpec:
    """A version-1 action (one kind and a per-joint scale for every joint) as one version-2 term."""
    action = raw["action"]
    if action["kind"] != "joint_position_offset":
        raise ValueError(f"deploy contract version 1 with action.kind {action['kind']!r} cannot be read: version 1 "
                         f"only defined joint_position_offset targets; export the policy again")
    term = ActionTermSpec(kind=action["kind"], joints=tuple(raw["joint_names"]), scale=tuple(action["scale"]))
    return ActionSpec(terms=(term,), clip=action.get("clip"), chunk=action.get("chunk", 1))


def _action_v2(action: dict[str, Any]) -> ActionSpec:
    terms = tuple(
        ActionTermSpec(**{**t, "joints": tuple(t["joints"]), "scale": tuple(t["scale"])}) for t in action["terms"]
    )
    return ActionSpec(**{**action, "terms": terms})


def _vec(value: Any, n: int) -> bool:
    """True when `value` is a list of `n` finite numbers."""
    return isinstance(value, list) and len(value) == n and all(_finite(v) for v in value)


_CHAIN_KEYS = ("root", "links", "site")
_LINK_KEYS = ("body", "pos", "quat", "joint", "axis", "anchor", "qpos0", "range")
_SITE_KEYS = ("name", "pos", "quat")


def validate_chain(chain: Any, where: str) -> tuple[str, ...]:
    """Check a serial kinematic chain description; returns its joint names in chain order.

    Format (JSON; every position and axis in the frame of the element's parent; quaternions w, x, y, z):
        {"root": <body the chain is expressed in (the robot base)>,
         "links": [{"body": <name>, "pos": [3], "quat": [4], "joint": <hinge joint name> | null,
                    "axis": [3], "anchor": [3], "qpos0": <float>, "range": [low, high] | null}, ...],
         "site": {"name": <name>, "pos": [3], "quat": [4]}}
    A link's frame is its parent's frame moved by pos, rotated by quat, then (if it has a joint) rotated by
    q - qpos0 about `axis` through `anchor` (both in the link frame), as MuJoCo's kinematics do. Links without
    a joint carry null axis, anchor, qpos0 and range.

    Raises:
        ValueError: one line naming `where` and the first malformed entry.
    """
    if not isinstance(chain, dict) or sorted(chain) != sorted(_CHAIN_KEYS):
        raise ValueError(f"{where}: must be an object with keys {', '.join(_CHAIN_KEYS)}")
    links, site = chain["links"], chain["site"]
    if not isinstance(chain["root"], str) or not isinstance(links, list) or not links:
        raise ValueError(f"{where}: root must be a body name and links a non-empty list")
    joints: list[str] = []
    for i, link in enumerate(links):
        at = f"{where}.links[{i}]"
        if not isinstance(link, dict) or sorted(link) != sorted(_LINK_KEYS):
            raise ValueError(f"{at}: must be an object with keys {', '.join(_LINK_KEYS)}")
        if not isinstance(link["body"], str) or not _vec(link["pos"], 3) or not _unit_like(link["quat"]):
            raise ValueError(f"{at} ({link['body']!r}): needs a body name, pos (3 finite numbers) and a non-zero "
                             f"finite quat (4 numbers)")
        if link["joint"] is None:
            if any(link[k] is not None for k in ("axis", "anchor", "qpos0", "range")):
                raise ValueError(f"{at} ({link['body']!r}): a link without a joint has null axis, anchor, qpos0, range")
            continue
        if not isinstance(link["joint"], str) or not _unit_like(link["axis"], 3) or not _vec(link["anchor"], 3):
            raise ValueError(f"{at} ({link['body']!r}): joint needs a name, a non-zero axis and an anchor "
                             f"(3 finite numbers each)")
        if not _finite(link["qpos0"]):
            raise ValueError(f"{at} ({link['joint']!r}): qpos0 = {link['qpos0']!r}: must be a finite number")
        r = link["range"]
        if r is not None and not (_vec(r, 2) and r[0] < r[1]):
            raise ValueError(f"{at} ({link['joint']!r}): range = {r!r}: must be [low, high] with low < high, or null")
        joints.append(link["joint"])
    if not joints:
        raise ValueError(f"{where}: the chain has no joint")
    if not isinstance(site, dict) or sorted(site) != sorted(_SITE_KEYS) or not isinstance(site["name"], str):
        raise ValueError(f"{where}.site: must be an object with keys {', '.join(_SITE_KEYS)}")
    if not _vec(site["pos"], 3) or not _unit_like(site["quat"]):
        raise ValueError(f"{where}.site: pos must be 3 finite numbers and quat 4 finite numbers, not all zero")
    return tuple(joints)


def _unit_like(value: Any, n: int = 4) -> bool:
    """True for `n` finite numbers that are not all zero (a quaternion or an axis, normalised by the reader)."""
    return _vec(value, n) and any(v != 0 for v in value)


def validate_action(action: ActionSpec, joint_names: tuple[str, ...]) -> None:
    """Check the action terms against the contract's joints; ValueError (one line) naming the term and field.

    Every term: a known kind, joints that are contract joints and driven by no other term, finite scales of the
    kind's size (per joint; 3, or 4 with yaw, for ee_delta; 1 for gripper), exactly the kind's params, each of the
    right type. Every contract joint must be driven by some term.
    """
    if not isinstance(action.terms, tuple) or not action.terms:
        raise ValueError("contract action.terms: must list at least one action term")
    driven: dict[str, int] = {}
    for i, term in enumerate(action.terms):
        at = f"contract action.terms[{i}]"
        if not isinstance(term, ActionTermSpec) or term.kind not in ACTION_KINDS:
            kind = getattr(term, "kind", None)
            raise ValueError(f"{at}: kind = {kind!r}: allowed values are {', '.join(ACTION_KINDS)}")
        at = f"{at} ({term.kind})"
        if not term.joints or not all(isinstance(j, str) for j in term.joints):
            raise ValueError(f"{at}: joints must be a non-empty list of joint names")
        for j in term.joints:
            if j not in joint_names:
                raise ValueError(f"{at}: joint {j!r} is not in the contract's joint_names")
            if j in driven:
                raise ValueError(f"{at}: joint {j!r} is already driven by action.terms[{driven[j]}]")
            driven[j] = i
        if not term.scale or not all(_finite(v) for v in term.scale):
            raise ValueError(f"{at}: scale = {list(term.scale)!r}: must be finite numbers")
        if not isinstance(term.params, dict) or sorted(term.params) != sorted(ACTION_PARAMS[term.kind]):
            keys = ", ".join(ACTION_PARAMS[term.kind]) or "none"
            got = ", ".join(sorted(term.params)) if isinstance(term.params, dict) else repr(term.params)
            raise ValueError(f"{at}: params must have exactly the keys {keys} (got {got or 'none'})")
        _KIND_CHECKS[term.kind](term, at)
    undriven = [j for j in joint_names if j not in driven]
    if undriven:
        raise ValueError(f"contract joint(s) {', '.join(undriven)} are driven by no action term")


def _check_joint_space(term: ActionTermSpec, at: str) -> None:
    if len(term.scale) != len(term.joints):
        raise ValueError(f"{at}: scale has {len(term.scale)} entries for {len(term.joints)} joints")
    if term.kind == "joint_position" and not _vec(term.params["offset"], len(term.joints)):
        raise ValueError(f"{at}: params.offset = {term.params['offset']!r}: must be {len(term.joints)} finite numbers")


def _check_ee_delta(term: ActionTermSpec, at: str) -> None:
    p = term.params
    if not isinstance(p["yaw"], bool):
        raise ValueError(f"{at}: params.yaw = {p['yaw']!r}: must be true or false")
    want = 4 if p["yaw"] else 3
    if len(term.scale) != want:
        raise ValueError(f"{at}: scale has {len(term.scale)} entries; expected {want} (x, y, z{', yaw' * p['yaw']})")
    for key in ("damping", "max_joint_step"):
        if not _finite(p[key]) or p[key] <= 0:
            raise ValueError(f"{at}: params.{key} = {p[key]!r}: must be a finite number > 0")
    if not _unit_like(p["orientation"]):
        raise ValueError(f"{at}: params.orientation = {p['orientation']!r}: must be a quaternion (4 finite numbers)")
    chain_joints = validate_chain(p["chain"], f"{at}: params.chain")
    if chain_joints != term.joints:
        raise ValueError(f"{at}: params.chain moves joints {list(chain_joints)}, but the term drives "
                         f"{list(term.joints)} (they must be the same, in order)")


def _check_gripper(term: ActionTermSpec, at: str) -> None:
    p = term.params
    if len(term.joints) != 1 or len(term.scale) != 1 or not term.scale[0] > 0:
        raise ValueError(f"{at}: a gripper term drives one joint with one column of scale > 0")
    if not (_finite(p["open"]) and _finite(p["closed"]) and p["open"] != p["closed"]):
        raise ValueError(f"{at}: params.open = {p['open']!r}, params.closed = {p['closed']!r}: must be two "
                         f"different finite joint positions")
    if not _finite(p["max_step"]) or p["max_step"] <= 0:
        raise ValueError(f"{at}: params.max_step = {p['max_step']!r}: must be a finite number > 0")


_KIND_CHECKS = {
    "joint_position_offset": _check_joint_space,
    "joint_position": _check_joint_space,
    "ee_delta": _check_ee_delta,
    "gripper": _check_gripper,
}


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
