"""Task registry: an explicit dict of task name -> (env class, config class)."""

from __future__ import annotations

from typing import Any

from robo_rl.config import ConfigError
from robo_rl.tasks.arm_reach import ArmReachConfig, ArmReachEnv
from robo_rl.tasks.base import TaskEnv
from robo_rl.tasks.quadruped_rough import QuadrupedWalkRoughConfig, QuadrupedWalkRoughEnv
from robo_rl.tasks.quadruped_walk import QuadrupedWalkConfig, QuadrupedWalkEnv

TASKS: dict[str, tuple[type[TaskEnv], type]] = {
    "arm-reach": (ArmReachEnv, ArmReachConfig),
    "quadruped-walk-flat": (QuadrupedWalkEnv, QuadrupedWalkConfig),
    "quadruped-walk-rough": (QuadrupedWalkRoughEnv, QuadrupedWalkRoughConfig),
}


def task_entry(name: str) -> tuple[type[TaskEnv], type]:
    """(env class, config class) of a registered task; ConfigError listing the valid names otherwise."""
    if name not in TASKS:
        raise ConfigError(f"unknown task {name!r}; valid tasks: {', '.join(TASKS)}")
    return TASKS[name]


def task_config_class(name: str) -> type:
    return task_entry(name)[1]


def make_env(name: str, num_envs: int, *, cfg: Any = None, seed: int = 0, num_threads: int = 0) -> TaskEnv:
    """Build a registered task with its default config (or `cfg`)."""
    env_cls, cfg_cls = task_entry(name)
    return env_cls(cfg if cfg is not None else cfg_cls(), num_envs, seed=seed, num_threads=num_threads)
