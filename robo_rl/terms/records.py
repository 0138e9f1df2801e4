"""What an observation term and an action term are, and the two registries that hold them.

A term is one record: its name, its size (fixed, or computed from the task: per joint, per action column), its
parameter schema, the torch function the simulation runs (batched), the numpy function the robot runs (one
state), the state it keeps and how that resets, and what it writes into the deploy contract. Every consumer (the
contract validator, the task's observation and action managers, the ONNX exporter, the deploy side's
observation builder and action map, the Isaac Lab / mjlab vocabulary mapping) loops over these registries and
never names a term. Adding a term is one new module that builds its record and registers it (a user's script or a
test module may do the same at run time).

numpy and torch are not imported here: this module is loaded on the robot, where torch is absent. A term's torch
function uses tensor methods only, or its builder imports its torch module inside the function.

Observation terms read *sources*: named quantities that both sides provide under the same names and meanings
(the sim from its batched state, (N, ...) tensors; the robot from its RobotState and operator inputs, single
arrays). `SOURCES` lists the shared ones; a task may provide more for its own simulation-only terms.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from robo_rl.core.contract import ActionTermSpec
from robo_rl.core.registry import Registry

SOURCES = {
    "joint_pos": "(J,) measured joint positions, policy joint order",
    "joint_vel": "(J,) measured joint velocities",
    "default_joint_pos": "(J,) the contract's default pose",
    "action": "(A,) the policy's previous raw action (what it sent, clipped)",
    "base_quat": "(4,) base orientation in the world, (w, x, y, z) (floating base, from the IMU)",
    "base_ang_vel_b": "(3,) base angular velocity in the base frame (IMU gyro)",
    "base_lin_vel_b": "(3,) base linear velocity in the base frame (an estimator's, on a robot)",
    "base_pos": "(3,) origin of the robot base in the frame the positions below are given in (zero on a robot)",
    "ee_pos": "(3,) end-effector position",
    "object_pos": "(3,) position of the object being manipulated",
    "velocity_command": "(3,) operator command: v_x, v_y, yaw rate in the base frame",
    "target_pos": "(3,) operator command: reach or place target",
}
"""Source names shared by the sim and the robot side, with their sizes and meaning."""


@dataclass(frozen=True, kw_only=True)
class TermContext:
    """What a term's size may depend on."""

    num_joints: int
    """J: the policy's joints."""
    action_dim: int | None
    """A: raw action columns (None where unknown, e.g. while mapping another framework's terms)."""


@dataclass(frozen=True, kw_only=True)
class ObservationTermRecord:
    """One observation term.

    The sim computes `torch(*sources)` on (N, ...) tensors, the robot `numpy(*sources)` on single arrays, with
    the sources named in `inputs`; a parity test feeds both the same states (to within `parity_tolerance`).
    Scale, clip, noise and history are applied around every term alike (`robo_rl.core.contract.ObsTerm`).
    """

    name: str
    """Vocabulary name, as written into the deploy contract."""
    inputs: tuple[str, ...]
    """Source names the functions take, in order (see SOURCES)."""
    torch: Callable[..., Any]
    """Sim function: (N, ...) tensors -> (N, dim). Uses tensor methods only (torch is not imported here)."""
    numpy: Callable[..., Any] | None
    """Robot function: single arrays -> (dim,); None for a simulation-only (privileged critic) term."""
    dim: int | Callable[[TermContext], int | None] | None
    """Size of one step: a number, a function of the context (per joint, per action column), or None (the task
    says, e.g. a height scan's points)."""
    state: str = ""
    """What the term keeps between steps and how it resets ("" for none); history is kept for every term alike."""
    command: bool = False
    """True for an operator input (its trained range comes from `command_range`)."""
    command_range: Callable[[dict[str, Any]], tuple[tuple[float, ...], tuple[float, ...]] | None] | None = None
    """Trained (low, high) of a command term read from the contract's `extra`; None when not recorded."""
    command_neutral: Callable[[tuple[tuple[float, ...], tuple[float, ...]] | None], Any] | None = None
    """The value a command term starts at (given its trained range or None): standing still, the target box's
    centre."""
    framework_names: tuple[str, ...] = ()
    """Function names of Isaac Lab / mjlab observation terms that compute this term."""
    parity_tolerance: float = 1e-6
    """Largest |torch - numpy| allowed on the same states (float32 sim against float64 robot)."""

    def expected_dim(self, context: TermContext) -> int | None:
        """The term's size in `context`, or None when the task decides it."""
        return self.dim(context) if callable(self.dim) else self.dim


@dataclass(frozen=True, kw_only=True)
class ActionTermRecord:
    """One action term kind: how its raw action columns and the measured joints become joint position targets.

    `build_torch(spec, default)` and `build_numpy(spec, default)` build the term of one contract spec, with its
    constants, once; the sim then calls `.targets(action (N, dim), q (N, J_t), prev (N, J_t) | None)` and the robot
    `(action (dim,), q (J_t,), prev (J_t,)) -> (J_t,)`. A parity test feeds both the same states.
    """

    name: str
    """The kind, as written into the deploy contract (`ActionTermSpec.kind`)."""
    params: dict[str, str]
    """Parameter schema: each key the spec's params must have (exactly these) -> what it holds."""
    check: Callable[[ActionTermSpec, str], None]
    """Checks a spec's scale size and params values; raises ValueError (one line, starting with the location)."""
    build_torch: Callable[[ActionTermSpec, Any], Any]
    """(spec, default pose of its joints (J_t,) tensor: dtype and device of the term) -> sim term object."""
    build_numpy: Callable[[ActionTermSpec, Any], Callable[[Any, Any, Any], Any]]
    """(spec, default pose (J_t,) float64) -> robot function (action, q, prev_target) -> targets."""
    graph_affine: Callable[[ActionTermSpec, list[float]], tuple[list[float], list[float]]] | None = None
    """For a stateless joint-space kind: (spec, default pose) -> (offset, scale) with targets = offset + scale * a,
    which the exported graph computes; None for kinds that need the robot's state (the graph writes NaN)."""
    uses_previous_target: bool = False
    """True when the term moves on from the targets it gave last (reset: from the measured joints)."""
    state: str = ""
    """What the term keeps between steps and how it resets ("" for none)."""
    robot_kinds: tuple[str, ...] | None = None
    """Hardware kinds that can carry the term out (None: any)."""
    robot_kinds_reason: str = ""
    """Why, for the refusal on other hardware (e.g. "end-effector actions need a fixed-base arm")."""
    fixed_targets: Callable[[ActionTermSpec], list[tuple[str, str, float]]] = field(default=lambda spec: [])
    """(param, joint, value) of joint positions the spec names, which must lie inside the robot's joint limits."""
    parity_tolerance: float = 1e-5
    """Largest |torch - numpy| allowed on the same states."""


OBSERVATION_TERMS: Registry[ObservationTermRecord] = Registry("observation term", entry_type=ObservationTermRecord)
"""Every observation term, by name."""

ACTION_TERMS: Registry[ActionTermRecord] = Registry("action term kind", entry_type=ActionTermRecord)
"""Every action term kind, by name."""


def register_observation(record: ObservationTermRecord) -> ObservationTermRecord:
    """Register an observation term under its name; returns it."""
    for source in record.inputs:
        if not isinstance(source, str) or not source:
            raise ValueError(f"observation term {record.name!r}: inputs must be source names, got {source!r}")
    return OBSERVATION_TERMS.register(record.name, record)


def register_action(record: ActionTermRecord) -> ActionTermRecord:
    """Register an action term kind under its name; returns it."""
    return ACTION_TERMS.register(record.name, record)


def per_joint(context: TermContext) -> int:
    """Size of a per-joint term: J."""
    return context.num_joints


def per_action_column(context: TermContext) -> int | None:
    """Size of a term with one entry per raw action column: A."""
    return context.action_dim
