"""Task registry: an explicit dict of task name -> (env class, config class), plus `gym:<id>`, `mjlab:<id>` and
`isaaclab:<id>` names.

A name `gym:<id>` (e.g. `gym:Hopper-v5`) is any registered gymnasium environment, run through
`robo_rl.adapters.from_gymnasium` (gymnasium itself is imported only when such a name is used).
`mjlab:<id>` and `isaaclab:<id>` are the frameworks' own tasks, run through `robo_rl.adapters.isaaclab`.
"""

from __future__ import annotations

from typing import Any

import torch

from robo_rl.adapters.from_gymnasium import GYM_PREFIX, gym_task_entry
from robo_rl.adapters.isaaclab import FRAMEWORKS, external_task_entry
from robo_rl.core.config import ConfigError
from robo_rl.tasks.arm_pick_place import (
    ArmPickPlaceConfig,
    ArmPickPlaceEnv,
    ArmPickPlaceVisionConfig,
    ArmPickPlaceVisionEnv,
)
from robo_rl.tasks.arm_reach import ArmReachConfig, ArmReachEnv
from robo_rl.tasks.base import TaskEnv, device_scope
from robo_rl.tasks.quadruped_rough import QuadrupedWalkRoughConfig, QuadrupedWalkRoughEnv
from robo_rl.tasks.quadruped_walk import QuadrupedWalkConfig, QuadrupedWalkEnv

TASKS: dict[str, tuple[type[TaskEnv], type]] = {
    "arm-reach": (ArmReachEnv, ArmReachConfig),
    "quadruped-walk-flat": (QuadrupedWalkEnv, QuadrupedWalkConfig),
    "arm-pick-place": (ArmPickPlaceEnv, ArmPickPlaceConfig),
    "arm-pick-place-vision": (ArmPickPlaceVisionEnv, ArmPickPlaceVisionConfig),
    "quadruped-walk-rough": (QuadrupedWalkRoughEnv, QuadrupedWalkRoughConfig),
}


def task_entry(name: str) -> tuple[type, type]:
    """(env class, config class) of a registered task, `gym:<id>`, `mjlab:<id>` or `isaaclab:<id>`; one-line
    ConfigError otherwise."""
    if name.startswith(GYM_PREFIX):
        return gym_task_entry(name[len(GYM_PREFIX) :])
    for framework, prefix in FRAMEWORKS.items():
        if name.startswith(prefix):
            return external_task_entry(framework, name[len(prefix) :])
    if name not in TASKS:
        raise ConfigError(
            f"unknown task {name!r}; valid tasks: {', '.join(TASKS)}, {GYM_PREFIX}<id> for a gymnasium environment, "
            f"or {' / '.join(p + '<id>' for p in FRAMEWORKS.values())} for an mjlab or Isaac Lab task"
        )
    return TASKS[name]


def task_config_class(name: str) -> type:
    """The config dataclass of task `name` (ConfigError for an unknown name)."""
    return task_entry(name)[1]


def make_env(name: str, num_envs: int, *, cfg: Any = None, seed: int = 0, num_threads: int = 0,
             backend: str = "mujoco_cpu", device: str = "cpu", **buffers: int) -> Any:
    """Build a registered task with its default config (or `cfg`); `buffers`: nconmax / njmax (mujoco_warp)."""
    env_cls, cfg_cls = task_entry(name)
    cfg = cfg if cfg is not None else cfg_cls()
    if torch.device(device).type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"config error: sim.device = {device!r}: this torch has no CUDA device (a CPU build, or "
                          "no GPU); use cpu")
    with device_scope(device):  # every tensor the task makes lives where its backend keeps the state
        return env_cls(cfg, num_envs, seed=seed, num_threads=num_threads, backend=backend, device=device, **buffers)
