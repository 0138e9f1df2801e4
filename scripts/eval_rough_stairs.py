"""Does a trained quadruped-walk-rough policy climb stairs? One episode per world, on "up" stairs at each level.

Every world starts in the pit at the centre of a stairs_up cell (the run's terrain with every column
turned into stairs_up, no curriculum, no pushes) and is commanded straight ahead at `--speed` toward a
random heading; any heading leads up the pyramid. An episode climbs when the ground under the base
rose by at least `--steps` step heights above the pit at some point. Prints one line per level:

    level 2 | step 0.063 m | climbed >= 3 steps 0.84 | mean steps 4.1 | fell 0.03

Usage: .venv/bin/python scripts/eval_rough_stairs.py runs/<run> [--episodes 64] [--steps 3] [--speed 0.5]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

import torch

from robo_rl.learn.builders import build_env, load_policy, load_trained
from robo_rl.learn.evaluation import inference_actor, rollout
from robo_rl.tasks.terrain import TERRAIN_TYPES


def stairs_config(cfg, level: int, speed: float):
    """The run's config with stairs_up everywhere, every world on `level`, a fixed forward command, no pushes."""
    env = cfg.env
    terrain = dataclasses.replace(env.terrain, proportions={t: float(t == "stairs_up") for t in TERRAIN_TYPES})
    env = dataclasses.replace(
        env, terrain=terrain, init_level_range=(level, level), curriculum=False,
        randomization=dataclasses.replace(env.randomization, push_interval_s=0.0),
        lin_vel_x=(speed, speed), lin_vel_y=(0.0, 0.0), standing_fraction=0.0,
    )
    return dataclasses.replace(cfg, env=env)


@torch.no_grad()
def climb_episodes(env, policy) -> tuple[torch.Tensor, torch.Tensor]:
    """(highest ground reached above the start (N,) m, fell (N,) bool) of each world's first episode."""
    n = env.num_envs
    gain, fell = torch.zeros(n), torch.zeros(n, dtype=torch.bool)
    active = torch.ones(n, dtype=torch.bool)
    for step in rollout(env, policy):
        episode = step.info["episode"]
        if episode:
            first = episode["ids"][active[episode["ids"]]]
            keep = active[episode["ids"]]
            gain[first] = episode["ground_gain"][keep]
            fell[first] = step.terminated[first]
        active &= ~(step.terminated | step.truncated)
        if not active.any():
            return gain, fell


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run", help="run folder, run name or checkpoint of a quadruped-walk-rough training")
    p.add_argument("--episodes", type=int, default=64, help="episodes (worlds) per level")
    p.add_argument("--steps", type=int, default=3, help="steps of height that count as climbing")
    p.add_argument("--speed", type=float, default=0.5, help="commanded forward speed (m/s)")
    p.add_argument("--levels", type=int, nargs="*", help="levels to test (default: all)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    _, state, cfg = load_trained(args.run)
    if cfg.task != "quadruped-walk-rough":
        print(f"eval_rough_stairs: {args.run} trained {cfg.task!r}, not quadruped-walk-rough", file=sys.stderr)
        return 2
    levels = args.levels if args.levels else range(cfg.env.terrain.num_levels)
    for level in levels:
        env = build_env(stairs_config(cfg, level, args.speed), num_envs=args.episodes, seed=args.seed)
        try:
            step_height = float(env.terrain.difficulty_values[level, 0])
            gain, fell = climb_episodes(env, inference_actor(load_policy(state, cfg, env)))
        finally:
            env.close()
        steps = gain / step_height
        print(f"level {level} | step {step_height:.3f} m | climbed >= {args.steps} steps "
              f"{(steps >= args.steps - 1e-3).float().mean():.2f} | mean steps {steps.mean():.1f} | "
              f"fell {fell.float().mean():.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
