"""Config fields every task shares: what models the step from simulation to a real robot."""

from __future__ import annotations

from dataclasses import dataclass, field

from robo_rl.core.config import _f
from robo_rl.tasks.events import DomainRandConfig


@dataclass(frozen=True, kw_only=True)
class TaskConfig:
    """Base of every task's config dataclass (one level: tasks add their own fields)."""

    randomization: DomainRandConfig = field(default_factory=DomainRandConfig)
    """Domain randomisation ranges (robo_rl.tasks.events; all off by default)."""
    motor_lag_s: float = _f(0.0, ge=0.0, le=1.0)
    """Time constant (s) of a first-order lag between commanded and applied joint targets (0: none)."""
    setpoint_controller: str = ""
    """A hardware file whose controller takes setpoints (`controller.setpoint_rate_hz`, a Franka's 1 kHz): the
    policy's targets reach the actuators as that robot's jerk-limited setpoint stream, as the deploy core sends it
    (robo_rl.tasks.setpoint_path); "": each target steps in at the tick."""
    obs_history: dict[str, int] = _f({})
    """Stacked steps of a policy observation term (default 1); recorded in the deploy contract and honoured there."""
    reset_group_size: int = _f(1, ge=1)
    """M: worlds g*M .. g*M+M-1 form a group that starts every episode from one shared initial state (GRPO's
    groups; `TaskEnv._reset_ids`); the number of worlds must be a multiple of M. Evaluation envs are never grouped."""
