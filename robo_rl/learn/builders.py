"""One way to build what a config describes: the task env, the policy, and both from a checkpoint.

The runner, evaluation, video and export all build through these functions, so a trained policy is
always rebuilt exactly as it was trained.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from robo_rl.adapters.chunked import chunked
from robo_rl.core.config import ConfigError, TrainConfig, learner_device, resolve_train_config
from robo_rl.learn.algorithms import EnvSpec, algorithm_configs, algorithm_entry
from robo_rl.learn.algorithms.base import Algorithm
from robo_rl.learn.checkpoint import load_run_checkpoint, resolve_checkpoint
from robo_rl.tasks import make_env, task_config_class
from robo_rl.tasks.base import TaskEnv


def build_env(cfg: TrainConfig, num_envs: int | None = None, seed: int | None = None) -> TaskEnv:
    """The task env of `cfg`: `num_envs` worlds (default cfg.sim.num_envs), seeded with `seed` (default cfg.seed).

    A policy that executes action chunks (`policy.execute_steps` E > 1) gets the env that runs E actions per
    step (`robo_rl.adapters.chunked`): training, evaluation, videos and export all see chunk transitions.
    """
    env = make_env(cfg.task, num_envs or cfg.sim.num_envs, cfg=cfg.env, seed=cfg.seed if seed is None else seed,
                   num_threads=cfg.sim.num_threads, backend=cfg.sim.backend, device=cfg.sim.device,
                   nconmax=cfg.sim.nconmax, njmax=cfg.sim.njmax)
    try:
        return chunked(env, getattr(cfg.policy, "execute_steps", 1))
    except ValueError as exc:
        env.close()
        raise ConfigError(f"config error: policy.execute_steps = {cfg.policy.execute_steps}: {exc}") from None


def env_spec(env: Any, device: str = "cpu") -> EnvSpec:
    """Sizes and action clip of a VecEnv (its `obs_dims`, `action_dim` and `action_clip`)."""
    dims = env.obs_dims
    return EnvSpec(
        num_envs=env.num_envs,
        obs_dim=dims["policy"],
        critic_obs_dim=dims.get("critic", dims["policy"]),
        action_dim=env.action_dim,
        action_clip=env.action_clip,
        device=torch.device(device),
    )


def build_policy(cfg: TrainConfig, env: TaskEnv) -> nn.Module:
    """The algorithm's freshly initialised policy module, sized for `env` (an ActorCritic for PPO)."""
    return algorithm_entry(cfg.algo_name).build_policy(cfg.policy, env_spec(env, learner_device(cfg)))


def build_algorithm(cfg: TrainConfig, env: TaskEnv, policy: nn.Module, generator: torch.Generator) -> Algorithm:
    """The registered algorithm `cfg.algo_name`, training `policy` on `env`."""
    return algorithm_entry(cfg.algo_name).build(cfg.algo, policy, env_spec(env, learner_device(cfg)), generator)


def resolve_config(raw: dict[str, Any], overrides: list[str] = ()) -> TrainConfig:
    """`resolve_train_config` with the task and algorithm registries."""
    return resolve_train_config(raw, overrides, env_config_cls=task_config_class, algo_configs=algorithm_configs)


def config_from_checkpoint(state: dict[str, Any]) -> TrainConfig:
    """Rebuild the TrainConfig stored in a checkpoint."""
    return resolve_config(dict(state["config"]))


def load_trained(run_or_checkpoint: str | Path) -> tuple[Path, dict[str, Any], TrainConfig]:
    """(checkpoint path, checkpoint payload, its config) of a run folder, run name or checkpoint file.

    Raises:
        ConfigError: one line when the path is not a readable robo_rl checkpoint.
    """
    path = resolve_checkpoint(run_or_checkpoint)
    state = load_run_checkpoint(path)
    return path, state, config_from_checkpoint(state)


def load_policy(state: dict[str, Any], cfg: TrainConfig, env: TaskEnv) -> nn.Module:
    """The checkpoint's policy module in eval mode, built for `env` (no optimiser or replay buffer)."""
    policy = build_policy(cfg, env)
    policy.load_state_dict(state["algo"]["policy"])
    return policy.eval()
