"""Roll a policy out in a task env, and evaluate a trained policy: one full episode per world.

`rollout` is the one policy-rollout loop; evaluation, videos and export's parity data all use it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from robo_rl.core.config import ConfigError
from robo_rl.demos.mp4_writer import write_mp4
from robo_rl.learn.builders import build_env, load_policy, load_trained
from robo_rl.learn.checkpoint import check_output_file


@dataclass(frozen=True)
class RolloutStep:
    """One policy step: what the policy saw, what it did and what the env returned."""

    obs: dict[str, Tensor]
    """Observation groups the action was computed from ("policy" (N, O), ...)."""
    actions: Tensor
    """(N, A) the policy's actions."""
    next_obs: dict[str, Tensor]
    """Observations after the step (ended worlds already reset)."""
    reward: Tensor
    """(N,)"""
    terminated: Tensor
    """(N,) bool"""
    truncated: Tensor
    """(N,) bool"""
    info: dict[str, Any]


Actor = Callable[[dict[str, Tensor]], Tensor]
"""What drives a rollout: observation groups ({"policy": (N, O), "image": ..., ...}) -> actions (N, A) (or chunks)."""


def inference_actor(policy: Any) -> Actor:
    """The deterministic actor of a trained policy module (`act_inference`), fed the groups it reads: the whole
    observation dict for a policy that declares `reads_observation_groups` (a VLA: image, instruction, state), the
    "policy" group (N, O) for every other."""
    if getattr(policy, "reads_observation_groups", False):
        return policy.act_inference
    return lambda obs: policy.act_inference(obs["policy"])


@torch.no_grad()
def rollout(env, policy: Actor, *, random_start: bool = False) -> Iterator[RolloutStep]:
    """Reset `env`, then step it with `policy` (observation groups -> actions (N, A)) forever.

    The caller stops iterating when it has what it needs. `random_start` as in `TaskEnv.reset`.
    """
    obs = env.reset(random_start=random_start)
    while True:
        actions = policy(obs)
        next_obs, reward, terminated, truncated, info = env.step(actions)
        yield RolloutStep(obs, actions, next_obs, reward, terminated, truncated, info)
        obs = next_obs


def on_every_step(env, callback: Callable[[Tensor], None]) -> bool:
    """Have an env that runs action chunks (`robo_rl.adapters.chunked`) call `callback(ended)` after each of its env
    steps (`ended` (N,) bool: the worlds whose episode ended in this chunk before that step); False for any
    other env, whose caller sees every step itself."""
    if getattr(env, "steps_per_action", 1) <= 1:
        return False
    env.on_substep = callback
    return True


def by_instruction(instruction_set: Any, instruction: Tensor, success: Tensor) -> dict[str, float]:
    """The success of episodes (N,) per goal their instruction names and per phrasing group (train, held-out):
    {"success/<goal>": ..., "success/<split>": ...} for the goals and groups that occur, from each episode's
    instruction index (N,) (`InstructionSet`)."""
    ids = instruction.tolist()
    goals = torch.tensor([instruction_set.goal_of(i) for i in ids])
    splits = [instruction_set.split_of(i) for i in ids]
    out = {}
    for g, name in enumerate(instruction_set.goal_names):
        if (goals == g).any():
            out[f"success/{name}"] = success[goals == g].mean().item()
    for split in ("train", "heldout"):
        mask = torch.tensor([s == split for s in splits])
        if mask.any():
            out[f"success/{split}"] = success[mask].mean().item()
    return out


def run_episodes(env, policy: Actor, *, video_frames: list | None = None) -> dict[str, Any]:
    """Run each world of `env` for exactly one episode; returns mean return and mean task metrics.

    A task with instructions (`env.instruction_set`) also gets its success per goal and per phrasing group
    (`by_instruction`: "success/red", "success/train", ...). With `video_frames`, frames of world 0 during its
    episode are appended to it (every env step, also inside an action chunk).
    """
    n = env.num_envs
    returns = torch.zeros(n)
    active = torch.ones(n, dtype=torch.bool)
    metrics: dict[str, Tensor] = {}
    every_step = video_frames is not None and on_every_step(
        env, lambda ended: active[0] and not ended[0] and video_frames.append(env.render(0)))
    instructions = getattr(env, "instruction_set", None)
    first_instruction = None  # (N,) each world's instruction in its first episode
    for step in rollout(env, policy):
        if instructions is not None and first_instruction is None and "text" in step.obs:
            first_instruction = step.obs["text"].clone()  # the first step's: every world's first episode
        returns += step.reward * active
        if video_frames is not None and not every_step and active[0]:
            video_frames.append(env.render(0))
        episode = step.info["episode"]
        if episode:
            first = episode["ids"][active[episode["ids"]]]  # worlds ending their first episode
            keep = active[episode["ids"]]
            for k, v in episode.items():
                if k != "ids":
                    metrics.setdefault(k, torch.full((n,), float("nan")))[first] = v[keep].to(torch.float32)
        active &= ~(step.terminated | step.truncated)
        if not active.any():
            break
    out = {k: v.nanmean().item() for k, v in metrics.items()}
    if first_instruction is not None and "success" in metrics:
        out.update(by_instruction(instructions, first_instruction, metrics["success"]))
    return {"episodes": n, "mean_return": returns.mean().item(), "metrics": out}


def evaluate_checkpoint(run: str | Path, *, episodes: int, seed: int, video: str | None = None,
                        flow_steps: int | None = None, step_noise: bool | None = None) -> dict[str, Any]:
    """Mean return and task metrics of a checkpoint's deterministic policy, one episode per world.

    `flow_steps` runs a flow policy's deterministic chain with that many denoising steps instead of its trained K;
    `step_noise` turns its step noise (`policy.step_noise`) on or off instead of as configured.
    Every input is checked before the evaluation runs (ConfigError, one line): the checkpoint, that
    `flow_steps` applies, and that `video` (optional .mp4 path for the first episode) can be written.
    """
    if video is not None:
        if Path(video).suffix.lower() != ".mp4":
            raise ConfigError(f"--video {video!r}: the file name must end in .mp4")
        check_output_file(video, "--video")
    _, state, cfg = load_trained(run)
    if flow_steps is not None and (not hasattr(cfg.policy, "num_steps") or not 1 <= flow_steps <= 128):
        raise ConfigError(f"--flow-steps {flow_steps}: " + ("must be 1 .. 128" if hasattr(cfg.policy, "num_steps")
                          else f"the {cfg.algo_name} policy of this run is not a flow policy"))
    env = build_env(cfg, num_envs=episodes, seed=seed)
    frames: list | None = [] if video else None
    try:
        policy = load_policy(state, cfg, env)
        if flow_steps is not None:
            policy.actor.num_steps = flow_steps
        if step_noise is not None:
            if not hasattr(policy.actor, "step_noise"):
                raise ConfigError(f"step noise: the {cfg.algo_name} policy of this run is not a flow policy")
            policy.actor.step_noise = step_noise
        result = run_episodes(env, inference_actor(policy), video_frames=frames)
    finally:
        env.close()
    if video:
        write_mp4(video, frames, fps=1.0 / env.dt)
    return result
