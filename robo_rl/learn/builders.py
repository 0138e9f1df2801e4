"""One way to build what a config describes: the task env, the policy (with the weights it starts from), the
algorithm, and all of them from a checkpoint.

The runner, evaluation, video and export all build through these functions, so a trained policy is
always rebuilt exactly as it was trained. Algorithms, tasks and physics backends are found only through their
registries; importing this module registers the task name families of the adapters (`gym:`, `isaaclab:`,
`mjlab:`), since it is where task names are resolved.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch
from torch import nn

import robo_rl.adapters.from_gymnasium  # noqa: F401  (registers the gym:<id> tasks)
import robo_rl.adapters.isaaclab.adapter  # noqa: F401  (registers the isaaclab:<id> and mjlab:<id> tasks)
from robo_rl.adapters.chunked import chunked
from robo_rl.core.config import ConfigError
from robo_rl.learn.algorithm_registry import ALGORITHMS, EnvSpec, InitFrom
from robo_rl.learn.checkpoint import load_run_checkpoint, resolve_checkpoint
from robo_rl.learn.train_config import TrainConfig, learner_device, resolve_train_config
from robo_rl.tasks.task_env import TaskEnv
from robo_rl.tasks.task_registry import make_env, task_config_class


def build_env(cfg: TrainConfig, num_envs: int | None = None, seed: int | None = None) -> TaskEnv:
    """The task env of `cfg`: `num_envs` worlds (default cfg.sim.num_envs), seeded with `seed` (default cfg.seed).

    A policy that executes action chunks (`policy.execute_steps` E > 1) gets the env that runs E actions per
    step (`robo_rl.adapters.chunked`): training, evaluation, videos and export all see chunk transitions.
    An env of `num_envs` worlds (evaluation, videos, export's parity check) is never grouped: every world draws its
    own initial states whatever `env.reset_group_size` says (training's groups, GRPO's).
    """
    env_cfg = cfg.env
    if num_envs is not None and getattr(env_cfg, "reset_group_size", 1) > 1:
        env_cfg = dataclasses.replace(env_cfg, reset_group_size=1)
    env = make_env(cfg.task, num_envs or cfg.sim.num_envs, cfg=env_cfg, seed=cfg.seed if seed is None else seed,
                   num_threads=cfg.sim.num_threads, backend=cfg.sim.backend, device=cfg.sim.device,
                   nconmax=cfg.sim.nconmax, njmax=cfg.sim.njmax)
    try:
        return chunked(env, getattr(cfg.policy, "execute_steps", 1))
    except ValueError as exc:
        env.close()
        raise ConfigError(f"config error: policy.execute_steps = {cfg.policy.execute_steps}: {exc}") from None


def env_spec(env: Any, device: str = "cpu") -> EnvSpec:
    """Sizes and action clip of a VecEnv (its `obs_dims`, `action_dim` and `action_clip`), what a policy reading
    images and instructions needs (its policy terms, camera and image size, and instruction texts), and its
    episodes: groups of worlds with shared initial states, decisions to an episode's time-out."""
    dims = env.obs_dims
    cfg = getattr(env, "cfg", None)
    images = getattr(env, "camera", None) is not None and getattr(cfg, "images", False)
    return EnvSpec(
        num_envs=env.num_envs,
        obs_dim=dims["policy"],
        critic_obs_dim=dims.get("critic", dims["policy"]),
        action_dim=env.action_dim,
        action_clip=env.action_clip,
        device=torch.device(device),
        policy_terms=tuple((t.name, t.dim * t.history) for t in getattr(env, "policy_terms", ())),
        camera=env.camera if images else None,
        image_size=cfg.image_size if images else 0,
        instructions=tuple(getattr(env, "instructions", ())),
        reset_group_size=getattr(env, "reset_group_size", 1),
        episode_decisions=-(-getattr(env, "max_episode_length", 0) // getattr(env, "steps_per_action", 1)),
    )


def build_policy(cfg: TrainConfig, env: TaskEnv) -> nn.Module:
    """The algorithm's freshly initialised policy module, sized for `env` (an ActorCritic for PPO)."""
    return ALGORITHMS.get(cfg.algo_name).build_policy(cfg.policy, env_spec(env, learner_device(cfg)))


def build_algorithm(cfg: TrainConfig, env: TaskEnv, policy: nn.Module, generator: torch.Generator,
                    **inputs: Any) -> Any:
    """The registered algorithm `cfg.algo_name` (an `Algorithm` of `robo_rl.learn.algorithms.algorithm`), training
    `policy` on `env` (first loaded from the run its entry's `init_from` names, if any); `inputs`: more keyword
    arguments of its `build` (what its runner makes for it, `Runner._algorithm_inputs`)."""
    entry = ALGORITHMS.get(cfg.algo_name)
    if entry.init_from is not None:
        init_from(entry.init_from, cfg, policy)
    return entry.build(cfg.algo, policy, env_spec(env, learner_device(cfg)), generator, **inputs)


def init_from(spec: InitFrom, cfg: TrainConfig, policy: nn.Module) -> None:
    """Copy the weights `spec` names from the run `cfg.algo.<spec.field>` into `policy`.

    Raises:
        ConfigError: no run given, a run of another algorithm, other policy settings or other sizes (one line).
    """
    source = getattr(cfg.algo, spec.field)
    if not source:
        raise ConfigError(f"config error: algo.{spec.field} is not set: {spec.missing}")
    _, state, source_cfg = load_trained(source)
    if source_cfg.algo_name not in spec.algorithms:
        raise ConfigError(f"config error: algo.{spec.field} = {source!r} is a {source_cfg.algo_name} run; "
                          f"{cfg.algo_name} starts from a {' or '.join(spec.algorithms)} run")
    for key in spec.same_policy_fields:
        ours, theirs = getattr(cfg.policy, key), getattr(source_cfg.policy, key)
        if ours != theirs:
            raise ConfigError(f"config error: policy.{key} = {ours!r}, but the pretrained run has {theirs!r}; use "
                              f"the same (--set policy.{key}=...)")
    own = policy.state_dict()
    keep = {k: v for k, v in state["algo"]["policy"].items() if k.startswith(spec.keys)}
    bad = [k for k, v in keep.items() if k not in own or own[k].shape != v.shape]
    if bad:
        raise ConfigError(f"config error: algo.{spec.field} = {source!r} was trained on other sizes "
                          f"({bad[0]}); fine-tune it on its own task")
    policy.load_state_dict({**own, **keep})


def resolve_config(raw: dict[str, Any], overrides: list[str] = ()) -> TrainConfig:
    """`resolve_train_config` with the task and algorithm registries."""
    return resolve_train_config(raw, overrides, env_config_cls=task_config_class)


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
