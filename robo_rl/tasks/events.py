"""Domain randomisation and other events, as pure functions over per-world model fields and state.

What breaks sim-to-real transfer is modelled here: contact friction, link masses and centres of mass,
PD gains and motor strength, joint damping and armature, observation noise, action latency (an
action queue) and external pushes. `DomainRandConfig` holds the ranges (all off by default); the
task base class samples them from the env's seeded generator at startup (`mode: startup`) or at
every reset of a world (`mode: reset`), writes them into the backend's per-world model fields, and
keeps the sampled values (`TaskEnv.randomization`) for logging and checkpoints.

Every `randomize_*` function maps nominal values and uniform samples to new values; none reads the
env, so they run unchanged on any backend (the MuJoCo Warp one holds model fields as (N, ...) arrays).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from robo_rl.core.config import ConfigError, _f

_RANGE_FIELDS = (
    "friction_scale", "mass_scale", "kp_scale", "kd_scale", "motor_strength", "damping_add", "armature_add",
    "action_latency_steps",
)


@dataclass(frozen=True, kw_only=True)
class DomainRandConfig:
    """Ranges of the randomised physics, each [low, high] sampled uniformly per world (off by default)."""

    mode: str = _f("startup", choices=("startup", "reset"))
    """`startup`: physics parameters are sampled once per world; `reset`: again at every reset of a world."""
    friction_scale: tuple[float, ...] = _f((1.0, 1.0), ge=0.0)
    """Multiplier of every geom's sliding friction (MuJoCo uses the larger of two touching geoms)."""
    mass_scale: tuple[float, ...] = _f((1.0, 1.0), gt=0.0)
    """Multiplier of each body's mass, drawn per body (the world body excluded)."""
    com_offset: float = _f(0.0, ge=0.0)
    """Half-width (m) of a uniform offset added to each body's centre of mass, per axis."""
    kp_scale: tuple[float, ...] = _f((1.0, 1.0), gt=0.0)
    """Multiplier of each joint actuator's stiffness (the policy's kp), drawn per joint."""
    kd_scale: tuple[float, ...] = _f((1.0, 1.0), ge=0.0)
    """Multiplier of each joint actuator's damping (kd), drawn per joint."""
    motor_strength: tuple[float, ...] = _f((1.0, 1.0), gt=0.0)
    """Multiplier of each joint actuator's torque limit, drawn per joint."""
    damping_add: tuple[float, ...] = _f((0.0, 0.0), ge=0.0)
    """Joint damping (N m s/rad) added to each policy joint, drawn per joint."""
    armature_add: tuple[float, ...] = _f((0.0, 0.0), ge=0.0)
    """Rotor inertia (kg m^2) added to each policy joint, drawn per joint."""
    action_latency_steps: tuple[int, ...] = _f((0, 0), ge=0, le=10)
    """Delay of the applied action in control steps, an integer drawn per world at each reset."""
    push_interval_s: float = _f(0.0, ge=0.0)
    """Seconds between pushes of a floating base (0: no pushes)."""
    push_velocity: float = _f(0.0, ge=0.0)
    """Half-width (m/s) of the planar velocity a push adds to the base."""
    obs_noise: dict[str, float] = _f({})
    """Half-width of uniform noise added to a policy observation term (term units, before its scale)."""

    def validate(self) -> None:
        for name in _RANGE_FIELDS:
            lo_hi = getattr(self, name)
            if len(lo_hi) != 2 or lo_hi[0] > lo_hi[1]:
                raise ConfigError(
                    f"config error: env.randomization.{name} = {list(lo_hi)!r}: expected [low, high] with low <= high"
                )
        for term, width in self.obs_noise.items():
            if not math.isfinite(width) or width < 0:
                raise ConfigError(f"config error: env.randomization.obs_noise.{term} = {width!r}: must be >= 0")

    def enabled(self, name: str) -> bool:
        """True when range `name` is not the identity (its samples change something)."""
        lo, hi = getattr(self, name)
        neutral = 0.0 if name in ("damping_add", "armature_add", "action_latency_steps") else 1.0
        return not (lo == hi == neutral)


def uniform(generator: torch.Generator, shape: tuple[int, ...], low: float, high: float) -> Tensor:
    """Samples uniform in [low, high) of `shape`, from `generator` (float64: model fields are float64)."""
    return torch.rand(shape, generator=generator, dtype=torch.float64) * (high - low) + low


def randomize_friction(friction: Tensor, scale: Tensor) -> Tensor:
    """geom_friction (K, G, 3) with the sliding coefficient multiplied by scale (K,)."""
    out = friction.clone()
    out[..., 0] *= scale[:, None]
    return out


def randomize_mass(mass: Tensor, scale: Tensor) -> Tensor:
    """body_mass (K, B) times a per-body scale (K, B); the world body (index 0) keeps its (zero) mass."""
    out = mass * scale
    out[:, 0] = mass[:, 0]
    return out


def randomize_com(ipos: Tensor, offset: Tensor) -> Tensor:
    """body_ipos (K, B, 3) plus offset (K, B, 3); the world body is left alone."""
    out = ipos + offset
    out[:, 0] = ipos[:, 0]
    return out


def randomize_pd_gains(gainprm: Tensor, biasprm: Tensor, actuators: Tensor, kp_scale: Tensor,
                       kd_scale: Tensor) -> tuple[Tensor, Tensor]:
    """Scale the stiffness and damping of position actuators `actuators` (J,) by (K, J) factors.

    A MuJoCo position actuator has force = kp * ctrl - kp * q - kd * qdot: gainprm[0] = kp,
    biasprm[1] = -kp, biasprm[2] = -kd. gainprm and biasprm are (K, U, 10).
    """
    gain, bias = gainprm.clone(), biasprm.clone()
    gain[:, actuators, 0] *= kp_scale
    bias[:, actuators, 1] *= kp_scale
    bias[:, actuators, 2] *= kd_scale
    return gain, bias


def randomize_motor_strength(forcerange: Tensor, actuators: Tensor, scale: Tensor) -> Tensor:
    """actuator_forcerange (K, U, 2) of `actuators` (J,) multiplied by (K, J) factors."""
    out = forcerange.clone()
    out[:, actuators] *= scale[..., None]
    return out


def add_to_dofs(values: Tensor, dofs: Tensor, added: Tensor) -> Tensor:
    """dof_damping or dof_armature (K, V) with (K, J) added to the dofs `dofs` (J,)."""
    out = values.clone()
    out[:, dofs] += added
    return out


def push_base(qvel: Tensor, velocity: Tensor) -> Tensor:
    """Free-base velocities (K, nv) with a planar push velocity (K, 2) added to the world-frame x, y."""
    out = qvel.clone()
    out[:, 0:2] += velocity
    return out


def delayed_actions(queue: Tensor, actions: Tensor, delay: Tensor) -> Tensor:
    """Push `actions` (N, A) into the action queue (N, L, A), newest first, and return what each world applies.

    World i applies the action from `delay[i]` control steps ago (0: the newest). `queue` is updated in
    place; L = 1 + the largest delay.
    """
    queue[:, 1:] = queue[:, :-1].clone()
    queue[:, 0] = actions
    return queue[torch.arange(queue.shape[0]), delay]  # (N, A)
