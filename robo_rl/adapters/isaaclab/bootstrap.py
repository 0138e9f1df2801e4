"""Finding and launching Isaac Lab or mjlab, and making one of their envs from the framework's own registry.

Everything framework-specific is imported here, inside functions: both frameworks are optional dependencies
(mjlab in its own virtual environment, Isaac Lab in Isaac Sim's Python), so importing robo_rl never needs them.
"""

from __future__ import annotations

from typing import Any, Protocol

from robo_rl.core.config import ConfigError, UserError
from robo_rl.sim.mjmodel import configure_warp

FRAMEWORKS = {"mjlab": "mjlab:", "isaaclab": "isaaclab:"}
"""Framework name -> task-name prefix."""

INSTALL_HINT = {
    "mjlab": "build its virtual environment with `bash scripts/setup_mjlab.sh` and run `.venv-mjlab/bin/robo-rl`",
    "isaaclab": "install Isaac Lab 3 (Python 3.12, a CUDA GPU; see docs/isaaclab.md) and robo_rl into its Python",
}


class FrameworkTaskConfig(Protocol):
    """What `make_framework_env` reads of a task's config (`adapter.ExternalTaskConfig`)."""

    framework: str
    id: str
    episode_length_s: float
    terminal_obs: bool


def _import_framework(framework: str, task: str) -> None:
    """UserError (one line, with the install hint) when the framework is not importable here."""
    import importlib.util

    module = "mjlab" if framework == "mjlab" else "isaaclab"
    if importlib.util.find_spec(module) is None:
        raise UserError(f"task {task!r} needs {framework}, which is not installed in this Python; "
                        f"{INSTALL_HINT[framework]}")


def make_framework_env(cfg: FrameworkTaskConfig, num_envs: int, device: str, seed: int) -> tuple[Any, Any]:
    """(env, clip_actions) of `cfg.id` from the framework's registry: `num_envs` worlds on `device`, seeded."""
    task = f"{FRAMEWORKS[cfg.framework]}{cfg.id}"
    _import_framework(cfg.framework, task)
    if cfg.framework == "mjlab":
        import warp as wp  # optional: mjlab's own dependency

        configure_warp(wp, "mjlab")  # kernels cached in an ignored folder, before mjlab compiles any
        import mjlab.tasks  # noqa: F401  (optional: registers the tasks)
        from mjlab.envs import ManagerBasedRlEnv
        from mjlab.tasks.registry import list_tasks, load_env_cfg, load_rl_cfg

        if cfg.id not in list_tasks():
            raise ConfigError(f"unknown mjlab task {cfg.id!r} in task {task!r}; mjlab's tasks: "
                              f"{', '.join(list_tasks())}")
        env_cfg = load_env_cfg(cfg.id)
        env_cfg.scene.num_envs = num_envs
        env_cfg.seed = seed
        if cfg.episode_length_s:
            env_cfg.episode_length_s = cfg.episode_length_s
        if cfg.terminal_obs:
            env_cfg.auto_reset = False  # we reset ended worlds ourselves, after reading their last observation
        env = ManagerBasedRlEnv(cfg=env_cfg, device=str(device), render_mode="rgb_array")
        return env, load_rl_cfg(cfg.id).clip_actions
    return _make_isaaclab_env(cfg, num_envs, device, seed, task)  # pragma: no cover - needs Isaac Lab and a GPU


def _make_isaaclab_env(cfg: FrameworkTaskConfig, num_envs: int, device: str, seed: int,
                       task: str) -> tuple[Any, Any]:  # pragma: no cover - needs Isaac Lab 3 and a GPU
    """Isaac Lab: start Isaac Sim headless (once per process), then make the task as its train scripts do."""
    from isaaclab.app import AppLauncher

    global _ISAAC_APP
    if _ISAAC_APP is None:
        _ISAAC_APP = AppLauncher(headless=True, device=str(device)).app
    import gymnasium
    import isaaclab_tasks  # noqa: F401  (registers the tasks)
    from isaaclab_tasks.utils import parse_env_cfg

    if cfg.id not in gymnasium.registry:
        raise ConfigError(f"unknown Isaac Lab task {cfg.id!r} in task {task!r}")
    if cfg.terminal_obs:
        raise ConfigError(f"config error: env.terminal_obs = true: task {task!r} is an Isaac Lab task, which always "
                          "resets inside step; terminal observations need mjlab")
    env_cfg = parse_env_cfg(cfg.id, device=str(device), num_envs=num_envs)
    env_cfg.seed = seed
    if cfg.episode_length_s:
        env_cfg.episode_length_s = cfg.episode_length_s
    env = gymnasium.make(cfg.id, cfg=env_cfg, render_mode="rgb_array")
    entry = gymnasium.spec(cfg.id).kwargs.get("rsl_rl_cfg_entry_point")
    clip = getattr(_load_entry(entry), "clip_actions", None) if entry else None
    return env, clip


_ISAAC_APP: Any = None


def _load_entry(entry: Any) -> Any:  # pragma: no cover - Isaac Lab only
    if isinstance(entry, str):
        import importlib

        module, _, name = entry.partition(":")
        entry = getattr(importlib.import_module(module), name)
    return entry() if callable(entry) else entry
