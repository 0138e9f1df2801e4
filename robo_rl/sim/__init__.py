"""Batched physics backends (mujoco_cpu is the embedded default)."""

from __future__ import annotations

import os

TRAINING_ENV_DEFAULTS = {"OMP_WAIT_POLICY": "PASSIVE"}
"""Environment defaults of a process that steps batched physics (an explicit value in the environment wins).

OMP_WAIT_POLICY=PASSIVE: torch's OpenMP workers otherwise spin-wait after each parallel op and steal
the cores MuJoCo's physics threads need (measured on 2 cores: env/raw rollout 0.81 -> 0.90); sleeping
workers cost nothing measurable in the PPO update. It only takes effect if set before torch starts
its OpenMP pool, i.e. before `import torch`.
"""


def set_training_process_defaults() -> None:
    """Apply TRAINING_ENV_DEFAULTS to os.environ where unset; call before torch is imported.

    The `robo-rl` train, play and export commands and the benchmarks call it. (Rendering picks a
    headless MUJOCO_GL, egl or osmesa, when the MuJoCo backend is imported and none is set.)
    """
    for key, value in TRAINING_ENV_DEFAULTS.items():
        os.environ.setdefault(key, value)
