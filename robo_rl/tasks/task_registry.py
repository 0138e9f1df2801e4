"""The task registry: task name -> (env class, config class), open to registration from anywhere.

Each task module registers its tasks at its bottom (`TASKS.register("arm-reach", TaskEntry(ArmReachEnv,
ArmReachConfig))`); `robo_rl.tasks` imports the built-in task modules, so they are known whenever anything of
`robo_rl.tasks` is. Whole families of names are resolved by prefix, registered by the adapter that runs them:
`gym:<id>` (`robo_rl.adapters.from_gymnasium`), `isaaclab:<id>` and `mjlab:<id>` (`robo_rl.adapters.isaaclab`).
An unknown name is answered with one line listing the tasks and the prefixes.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from robo_rl.core.config import ConfigError
from robo_rl.core.registry import Registry
from robo_rl.tasks.task_env import device_scope


class TaskEntry(NamedTuple):
    """One registered task."""

    env_cls: type
    """The VecEnv class: `env_cls(cfg, num_envs, *, seed, num_threads, backend, device, nconmax, njmax)`."""
    config_cls: type
    """Its config dataclass (`TrainConfig.env`)."""


TASKS: Registry[TaskEntry] = Registry("task", field="task", entry_type=TaskEntry)
"""Every registered task (`robo-rl tasks` lists them), plus the prefix families of the adapters."""


def task_entry(name: str) -> TaskEntry:
    """(env class, config class) of a registered task or a prefixed name; one-line ConfigError otherwise."""
    return TASKS.get(name)


def task_config_class(name: str) -> type:
    """The config dataclass of task `name` (ConfigError for an unknown name)."""
    return task_entry(name).config_cls


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
