"""One way to build what a config describes: the task env, the policy, and both from a checkpoint.

The runner, evaluation, video and export all build through these functions, so a trained policy is
always rebuilt exactly as it was trained.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from robo_rl.checkpoint import load_run_checkpoint, resolve_checkpoint
from robo_rl.config import TrainConfig, resolve_train_config
from robo_rl.networks.actor_critic import ActorCritic
from robo_rl.tasks import task_config_class, task_entry
from robo_rl.tasks.base import TaskEnv


def build_env(cfg: TrainConfig, num_envs: int | None = None, seed: int | None = None) -> TaskEnv:
    """The task env of `cfg`: `num_envs` worlds (default cfg.sim.num_envs), seeded with `seed` (default cfg.seed)."""
    env_cls, _ = task_entry(cfg.task)
    return env_cls(
        cfg.env,
        num_envs or cfg.sim.num_envs,
        seed=cfg.seed if seed is None else seed,
        num_threads=cfg.sim.num_threads,
        backend=cfg.sim.backend,
    )


def build_policy(cfg: TrainConfig, env: TaskEnv) -> ActorCritic:
    """A freshly initialised actor-critic sized for `env`'s observation groups and actions."""
    return ActorCritic(env.obs_dims["policy"], env.obs_dims["critic"], env.action_dim, cfg.policy)


def config_from_checkpoint(state: dict[str, Any]) -> TrainConfig:
    """Rebuild the TrainConfig stored in a checkpoint."""
    return resolve_train_config(dict(state["config"]), env_config_cls=task_config_class)


def load_trained(run_or_checkpoint: str | Path) -> tuple[Path, dict[str, Any], TrainConfig]:
    """(checkpoint path, checkpoint payload, its config) of a run folder, run name or checkpoint file.

    Raises:
        ConfigError: one line when the path is not a readable robo_rl checkpoint.
    """
    path = resolve_checkpoint(run_or_checkpoint)
    state = load_run_checkpoint(path)
    return path, state, config_from_checkpoint(state)


def load_policy(state: dict[str, Any], cfg: TrainConfig, env: TaskEnv) -> ActorCritic:
    """The checkpoint's actor-critic in eval mode, built for `env`."""
    policy = build_policy(cfg, env)
    policy.load_state_dict(state["algo"]["policy"])
    return policy.eval()
