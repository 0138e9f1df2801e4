"""Evaluate a trained policy: one full episode per world, deterministic actions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from robo_rl.checkpoint import check_output_file, load_run_checkpoint, resolve_checkpoint
from robo_rl.config import ConfigError
from robo_rl.runner import build_env, build_policy, config_from_checkpoint


@torch.no_grad()
def run_episodes(env, policy, *, video_frames: list | None = None) -> dict[str, Any]:
    """Run each world of `env` for exactly one episode; returns mean return and mean task metrics."""
    n = env.num_envs
    obs = env.reset(random_start=False)
    returns = torch.zeros(n)
    active = torch.ones(n, dtype=torch.bool)
    metrics: dict[str, torch.Tensor] = {}
    while active.any():
        obs, reward, terminated, truncated, info = env.step(policy(obs["policy"]))
        returns += reward * active
        if video_frames is not None and active[0]:
            video_frames.append(env.render(0))
        episode = info["episode"]
        if episode:
            first = episode["ids"][active[episode["ids"]]]  # worlds ending their first episode
            keep = active[episode["ids"]]
            for k, v in episode.items():
                if k != "ids":
                    metrics.setdefault(k, torch.full((n,), float("nan")))[first] = v[keep].to(torch.float32)
        active &= ~(terminated | truncated)
    return {
        "episodes": n,
        "mean_return": returns.mean().item(),
        "metrics": {k: v.nanmean().item() for k, v in metrics.items()},
    }


def evaluate_checkpoint(run: str | Path, *, episodes: int, seed: int, video: str | None = None) -> dict[str, Any]:
    """Mean return and task metrics of a checkpoint's deterministic policy, one episode per world.

    Every input is checked before the evaluation runs (ConfigError, one line): the checkpoint, and
    that `video` (optional .mp4 path for the first episode) can be written.
    """
    if video is not None:
        if Path(video).suffix.lower() != ".mp4":
            raise ConfigError(f"--video {video!r}: the file name must end in .mp4")
        check_output_file(video, "--video")
    state = load_run_checkpoint(resolve_checkpoint(run))
    cfg = config_from_checkpoint(state)
    env = build_env(cfg, num_envs=episodes, seed=seed)
    policy = build_policy(cfg, env)
    policy.load_state_dict(state["algo"]["policy"])
    policy.eval()
    frames: list | None = [] if video else None
    try:
        result = run_episodes(env, policy.act_inference, video_frames=frames)
    finally:
        env.close()
    if video:
        from robo_rl.video import write_mp4

        write_mp4(video, frames, fps=1.0 / env.dt)
    return result
