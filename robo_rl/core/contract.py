"""The deploy contract: what a policy expects from the robot, carried inside the exported file.

Written by each task (`env.contract`), embedded into ONNX metadata at export, and checked by the
robot side before a policy may run. Plain dataclasses and JSON; imports neither torch nor numpy.

This module checks the contract's structure only; what each observation term and action term means (their
names, sizes and parameters) is the term registry's (`robo_rl.terms`), and `robo_rl.terms.validate_contract`
checks a contract against it.
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

IMAGE_PREFIX = "image:"
"""Input terms `image:<camera>`: the camera's frames, uint8 (1, 3, height, width) RGB in the graph."""
INSTRUCTION = "instruction"
"""The input term `instruction`: the sentence embedding (1, dim) float32 of the operator's instruction text, computed by
the instruction encoder graph written beside the policy (`params.encoder`)."""
IMAGE_PARAMS = ("height", "width", "channels", "resize")
INSTRUCTION_PARAMS = ("encoder", "model", "max_length")
RESIZE_RULES = ("none", "area")
"""How a frame of another size becomes the graph's: `none` refuses it; `area` averages integer blocks (a frame
k * height x k * width, the same k for both sides)."""


def finite_number(value: Any) -> bool:
    """True for an int or float (not a bool) that is finite."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True, kw_only=True)
class ObsTerm:
    """One observation term, in the order the policy reads them."""

    name: str
    """A registered observation term (`robo_rl.terms.OBSERVATION_TERMS`); in `DeployContract.inputs`, an input term
    (`image:<camera>`, `instruction`)."""
    dim: int
    """Size of the term for one history step."""
    scale: float = 1.0
    """Multiplier applied after computing the term."""
    clip: float | None = None
    """Symmetric clip applied after scaling (None: no clip)."""
    history: int = 1
    """Number of stacked steps, newest last."""
    params: dict[str, Any] = field(default_factory=dict)
    """Input terms only (`DeployContract.inputs`): what the graph input is (IMAGE_PARAMS, INSTRUCTION_PARAMS)."""


@dataclass(frozen=True, kw_only=True)
class ActionTermSpec:
    """One action term: a group of consecutive raw policy outputs and the joints it drives.

    Each kind is one record of the term registry (`robo_rl.terms.ACTION_TERMS`), in its own module with its
    maths (e.g. `robo_rl.terms.ee_delta`): parameter schema, checks, the sim's torch and the robot's numpy side.

    params hold JSON values only (lists, not tuples), so a contract equals its JSON round trip.
    """

    kind: str
    """A registered action term kind (`robo_rl.terms.ACTION_TERMS`)."""
    joints: tuple[str, ...]
    """The contract joints this term drives (each contract joint is driven by exactly one term)."""
    scale: tuple[float, ...]
    """One multiplier per raw action column of the term; its length is the term's size."""
    params: dict[str, Any] = field(default_factory=dict)
    """Kind-specific parameters; exactly the keys of the kind's parameter schema."""

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
    """The flat observation vector (graph input `obs`), terms in order."""
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
    inputs: tuple[ObsTerm, ...] = ()
    """Graph inputs beyond `obs`, each under its own name (a VLA's): `image:<camera>` (uint8 frames) and
    `instruction` (a sentence embedding); each input's `dim` is its size per batch row."""

    @property
    def obs_dim(self) -> int:
        return sum(t.dim * t.history for t in self.observation)

    @property
    def action_dim(self) -> int:
        """Raw action columns A (not the number of joints: an `ee_delta` term drives 7 joints with 3 columns)."""
        return self.action.dim

    def validate(self) -> None:
        """Check the contract's structure on its own (no robot, no term registry); ValueError with one line naming
        the field. `robo_rl.terms.validate_contract` runs this and then checks every term against the registry.

        Refuses: dims <= 0, non-finite scale or clip, scale <= 0, clip <= 0, history < 1 of an observation term;
        policy_dt or physics_dt not finite > 0 or policy_dt not a whole number of physics steps; action terms
        that are malformed in structure (`validate_action_structure`), non-finite action clip, chunk < 1;
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
                if not finite_number(v) or (key != "default_joint_pos" and v < 0):
                    allowed = "a finite number" if key == "default_joint_pos" else "a finite number >= 0"
                    raise ValueError(f"contract {key} for {name} = {v!r}: must be {allowed}")
        for key in ("policy_dt", "physics_dt"):
            v = getattr(self, key)
            if not finite_number(v) or v <= 0:
                raise ValueError(f"contract {key} = {v!r}: must be a finite number > 0 (s)")
        steps = self.policy_dt / self.physics_dt
        if abs(steps - round(steps)) > 1e-6 * max(1.0, steps):
            raise ValueError(f"contract policy_dt = {self.policy_dt!r} is not a whole number of physics_dt = "
                             f"{self.physics_dt!r} steps")
        a = self.action
        validate_action_structure(a, self.joint_names)
        if a.clip is not None and (not finite_number(a.clip) or a.clip <= 0):
            raise ValueError(f"contract action.clip = {a.clip!r}: must be a finite number > 0 or null")
        if not isinstance(a.chunk, int) or isinstance(a.chunk, bool) or a.chunk < 1:
            raise ValueError(f"contract action.chunk = {a.chunk!r}: must be an integer >= 1")
        if not self.observation:
            raise ValueError("contract observation lists no terms")
        for i, t in enumerate(self.observation):
            where = f"contract observation[{i}] ({t.name!r})"
            if not isinstance(t.name, str) or not t.name:
                raise ValueError(f"{where}: name must be a non-empty term name")
            if not isinstance(t.dim, int) or isinstance(t.dim, bool) or t.dim <= 0:
                raise ValueError(f"{where}: dim = {t.dim!r}: must be an integer > 0")
            if not finite_number(t.scale) or t.scale <= 0:
                raise ValueError(f"{where}: scale = {t.scale!r}: must be a finite number > 0")
            if t.clip is not None and (not finite_number(t.clip) or t.clip <= 0):
                raise ValueError(f"{where}: clip = {t.clip!r}: must be a finite number > 0 or null")
            if not isinstance(t.history, int) or isinstance(t.history, bool) or t.history < 1:
                raise ValueError(f"{where}: history = {t.history!r}: must be an integer >= 1")
            if t.params:
                raise ValueError(f"{where}: params = {t.params!r}: only input terms (contract inputs) have params")
        validate_inputs(self.inputs)

    def with_run(self, run_id: str, config_hash: str, obs_normalization: bool) -> DeployContract:
        return replace(self, run_id=run_id, config_hash=config_hash, obs_normalization=obs_normalization)

    def to_json(self) -> str:
        """The contract as JSON; empty `params` and `inputs` are left out (a contract without input terms reads as
        it did before they existed)."""
        raw = asdict(self)
        for term in raw["observation"] + raw["inputs"]:
            if not term["params"]:
                del term["params"]
        if not raw["inputs"]:
            del raw["inputs"]
        return json.dumps(raw, indent=2, sort_keys=True)

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
            raw["inputs"] = tuple(ObsTerm(**t) for t in raw.get("inputs", ()))
            for key in ("joint_names", "default_joint_pos", "kp", "kd", "torque_limits"):
                raw[key] = tuple(raw[key])
            return DeployContract(**raw)
        except (KeyError, TypeError) as exc:
            raise ValueError(f"deploy contract is missing or has an unexpected field: {exc}") from None


def image_input(camera: str, height: int, width: int, resize: str = "none") -> ObsTerm:
    """The input term of a camera's RGB frames as the graph takes them: uint8 (B, 3, height, width)."""
    return ObsTerm(name=f"{IMAGE_PREFIX}{camera}", dim=3 * height * width,
                   params={"height": height, "width": width, "channels": "rgb", "resize": resize})


def validate_inputs(inputs: tuple[ObsTerm, ...]) -> None:
    """Check the input terms (`DeployContract.inputs`); ValueError (one line) naming the term and field."""
    names = [t.name for t in inputs]
    for i, t in enumerate(inputs):
        where = f"contract inputs[{i}] ({t.name!r})"
        if names.count(t.name) > 1:
            raise ValueError(f"{where}: listed more than once")
        if t.history != 1 or t.scale != 1.0 or t.clip is not None:
            raise ValueError(f"{where}: input terms have history 1, scale 1 and no clip")
        if t.name.startswith(IMAGE_PREFIX) and len(t.name) > len(IMAGE_PREFIX):
            keys = IMAGE_PARAMS
        elif t.name == INSTRUCTION:
            keys = INSTRUCTION_PARAMS
        else:
            raise ValueError(f"{where}: unknown input term; allowed: {IMAGE_PREFIX}<camera>, {INSTRUCTION}")
        if sorted(t.params) != sorted(keys):
            raise ValueError(f"{where}: params must have exactly the keys {', '.join(keys)} (got "
                             f"{', '.join(sorted(t.params)) or 'none'})")
        if t.name == INSTRUCTION:
            if not isinstance(t.params["encoder"], str) or not t.params["encoder"].endswith(".onnx"):
                raise ValueError(f"{where}: params.encoder = {t.params['encoder']!r}: must name the encoder's .onnx "
                                 "file")
            if not isinstance(t.dim, int) or t.dim <= 0:
                raise ValueError(f"{where}: dim = {t.dim!r}: must be an integer > 0")
            continue
        h, w = t.params["height"], t.params["width"]
        for key, v in (("height", h), ("width", w)):
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise ValueError(f"{where}: params.{key} = {v!r}: must be an integer > 0")
        if t.params["channels"] != "rgb":
            raise ValueError(f"{where}: params.channels = {t.params['channels']!r}: allowed values are rgb")
        if t.params["resize"] not in RESIZE_RULES:
            raise ValueError(f"{where}: params.resize = {t.params['resize']!r}: allowed values are "
                             f"{', '.join(RESIZE_RULES)}")
        if t.dim != 3 * h * w:
            raise ValueError(f"{where}: dim = {t.dim!r}: must be 3 * height * width = {3 * h * w}")


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


def validate_action_structure(action: ActionSpec, joint_names: tuple[str, ...]) -> None:
    """Check the action terms' structure against the contract's joints; ValueError (one line) naming the term.

    Every term: a kind name, joints that are contract joints and driven by no other term, finite scales, params an
    object. Every contract joint must be driven by some term. What each kind requires of its scale and params is
    checked by the term registry (`robo_rl.terms.validate_action`).
    """
    if not isinstance(action.terms, tuple) or not action.terms:
        raise ValueError("contract action.terms: must list at least one action term")
    driven: dict[str, int] = {}
    for i, term in enumerate(action.terms):
        at = f"contract action.terms[{i}]"
        if not isinstance(term, ActionTermSpec) or not isinstance(term.kind, str):
            raise ValueError(f"{at}: must be an action term with a kind name")
        at = f"{at} ({term.kind})"
        if not term.joints or not all(isinstance(j, str) for j in term.joints):
            raise ValueError(f"{at}: joints must be a non-empty list of joint names")
        for j in term.joints:
            if j not in joint_names:
                raise ValueError(f"{at}: joint {j!r} is not in the contract's joint_names")
            if j in driven:
                raise ValueError(f"{at}: joint {j!r} is already driven by action.terms[{driven[j]}]")
            driven[j] = i
        if not term.scale or not all(finite_number(v) for v in term.scale):
            raise ValueError(f"{at}: scale = {list(term.scale)!r}: must be finite numbers")
        if not isinstance(term.params, dict):
            raise ValueError(f"{at}: params = {term.params!r}: must be an object")
    undriven = [j for j in joint_names if j not in driven]
    if undriven:
        raise ValueError(f"contract joint(s) {', '.join(undriven)} are driven by no action term")
