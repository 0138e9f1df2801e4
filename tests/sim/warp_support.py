"""Paired rollouts of one task on the mujoco_cpu and mujoco_warp backends, for the parity tests."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from robo_rl.tasks.task_registry import make_env

BACKENDS = ("mujoco_cpu", "mujoco_warp")
WARP_DEVICE = os.environ.get("ROBO_RL_TEST_WARP_DEVICE", "cpu")
"""Device of the Warp side of the parity tests (`scripts/gpu_check.py` sets cuda:0)."""


def env_pair(task: str, num_envs: int, **kwargs):
    """The task on the CPU backend and on the Warp backend (on WARP_DEVICE), with the same arguments."""
    return (make_env(task, num_envs, **kwargs),
            make_env(task, num_envs, backend="mujoco_warp", device=WARP_DEVICE, **kwargs))


@dataclass
class Paired:
    """Each field (2, T, N, ...) float64: [0] the CPU backend, [1] the Warp backend, per policy step."""

    qpos: torch.Tensor
    qvel: torch.Tensor
    reward: torch.Tensor
    obs: torch.Tensor
    done: torch.Tensor


def paired_rollout(task: str, num_envs: int, steps: int, *, cfg=None, seed: int = 0, scale: float = 0.5) -> Paired:
    """Both backends from the same seed (so the same initial states) under the same random actions."""
    envs = env_pair(task, num_envs, cfg=cfg, seed=seed)
    try:
        for env in envs:
            env.reset()
        gen = torch.Generator().manual_seed(seed + 1)
        rows: dict[str, list[list[torch.Tensor]]] = {k: [[], []] for k in ("qpos", "qvel", "reward", "obs", "done")}
        for _ in range(steps):
            actions = scale * torch.randn(num_envs, envs[0].action_dim, generator=gen)  # (N, A)
            for k, env in enumerate(envs):
                obs, reward, terminated, truncated, _ = env.step(actions)
                rows["qpos"][k].append(env.backend.qpos.to("cpu", torch.float64, copy=True))
                rows["qvel"][k].append(env.backend.qvel.to("cpu", torch.float64, copy=True))
                rows["reward"][k].append(reward.double().cpu())
                rows["obs"][k].append(obs["policy"].double().cpu())
                rows["done"][k].append((terminated | truncated).double().cpu())
        return Paired(**{name: torch.stack([torch.stack(r) for r in pair]) for name, pair in rows.items()})
    finally:
        for env in envs:
            env.close()
