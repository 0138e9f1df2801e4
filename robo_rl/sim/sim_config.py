"""The config of batched physics (`TrainConfig.sim`): which backend, where, how many worlds.

Light on purpose (no torch, no mujoco): the CLI checks its limits before anything heavy is imported.
"""

from __future__ import annotations

from dataclasses import dataclass

from robo_rl.core.config import _f

MAX_NUM_ENVS = 1_000_000
"""Most parallel worlds (sim.num_envs; also `play --episodes`, one world per episode)."""


@dataclass(frozen=True, kw_only=True)
class SimConfig:
    """Batched physics."""

    backend: str = "mujoco_cpu"
    """Physics backend, a name in `robo_rl.sim.backend.BACKENDS` (checked by `check_train_config`): `mujoco_cpu`
    (float64, threads over `mujoco.rollout`), `mujoco_warp` (MuJoCo Warp, float32, on a CUDA GPU or Warp's CPU
    device; needs the `gpu` extra), or one registered there."""
    device: str = "cpu"
    """Where the worlds live and step: `cpu`, or `cuda` / `cuda:N` with `mujoco_warp`. The learner follows it
    (top-level `device: auto`)."""
    nconmax: int | None = _f(None, ge=1, le=100_000)
    """Contacts allocated per world by `mujoco_warp` (fixed buffers; None: the task's size, else MuJoCo Warp's
    default). `mujoco_cpu` grows its buffers as needed and ignores it."""
    njmax: int | None = _f(None, ge=1, le=100_000)
    """Constraint rows allocated per world by `mujoco_warp` (None: the task's size, else MuJoCo Warp's default)."""
    num_envs: int = _f(1024, ge=1, le=MAX_NUM_ENVS)
    """Number of parallel worlds."""
    num_threads: int = _f(0, ge=0, le=1024)
    """Worker threads for physics; 0 means one per CPU core."""

