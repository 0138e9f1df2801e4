"""SAC beside PPO on quadruped-walk-flat for the same wall-clock budget: velocity tracking and return.

FastSAC (holosoma) reports that SAC with many worlds trains legged locomotion faster than PPO on a GPU;
this measures the claim on this CPU. Each algorithm trains from its preset (sim_configs/quadruped-walk-flat.yaml
for PPO: 1,024 worlds; sim_configs/quadruped-walk-flat-sac.yaml for SAC: 128 worlds) for `--minutes` of
training time (`runner.max_time_s`), one after the other, then its deterministic policy is evaluated on the
same `--eval-episodes` fresh worlds (one episode each): the mean return, the reward per second of the two
tracking terms, the mean planar velocity error and the share of falls. SAC has no target: the printout is the
measurement. PPO's walk is the suite's former quadruped learning check, kept here as a target: its evaluation
tracking reward per second (of a maximum 1.0; standing still earns ~0.33) must reach 0.45.

A second part is the suite's former terrain learning check: PPO on quadruped-walk-rough with its terrain
curriculum (256 worlds, 60 iterations, 3 m cells on 5 levels x 5 columns, no pushes; ~0.37 M steps, ~1.5 min).
Robots start on level 0 and the curriculum promotes those that walk out of their cell: the mean terrain level of
the first 5 iterations must stay below 0.02 and that of the last 5 must reach 0.1.

    PYTHONPATH=. python scripts/bench_sac_locomotion.py               # 2 x 10 min on 2 cores
    PYTHONPATH=. python scripts/bench_sac_locomotion.py --minutes 2
    PYTHONPATH=. python scripts/bench_sac_locomotion.py --smoke       # a smoke run
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from robo_rl.sim import set_training_process_defaults  # noqa: E402

set_training_process_defaults()  # before torch is imported, as the CLI does

import torch  # noqa: E402

from robo_rl.core.config import load_yaml  # noqa: E402
from robo_rl.learn.builders import build_env, resolve_config  # noqa: E402
from robo_rl.learn.evaluation import inference_actor, rollout  # noqa: E402
from robo_rl.learn.runner import Runner, make_runner  # noqa: E402

PRESETS = {"PPO": "quadruped-walk-flat.yaml", "SAC": "quadruped-walk-flat-sac.yaml"}
PPO_WALK_GOAL = 0.45
"""PPO's evaluation tracking reward per second that counts as walking (standing still earns ~0.33)."""
ROWS = (
    ("evaluation return", "return"),
    ("track_lin_vel_xy [reward/s]", "track_lin_vel_xy"),
    ("track_ang_vel_z [reward/s]", "track_ang_vel_z"),
    ("planar velocity error [m/s]", "lin_vel_error"),
    ("episode length [s]", "length_s"),
    ("fell [fraction]", "fell"),
)
"""(label, key of `evaluate`'s result) of the side-by-side table."""
SMOKE_OVERRIDES = ("runner.max_iterations=2", "sim.num_envs=8", "env.episode_length_s=0.5")
"""`--smoke`: each algorithm trains 2 iterations of 8 worlds (within its 0.1 min) and is evaluated on 0.5 s episodes."""


@torch.no_grad()
def evaluate(runner: Runner, episodes: int, seed: int) -> dict[str, float]:
    """One deterministic episode per world of a fresh env: means of the return, of each reward term per second
    (its weighted sum over the episode up to its last step, whose terms the env's reset clears), of the
    velocity error, of the length and of the share of episodes that ended in a fall."""
    env = build_env(runner.cfg, num_envs=episodes, seed=seed)
    n = env.num_envs
    out = {k: torch.zeros(n) for k in ("return", "lin_vel_error", "length_s", "fell", *env.reward_terms)}
    active = torch.ones(n, dtype=torch.bool)
    sums, steps = env.episode_sums.clone(), env.episode_steps.clone()  # before the step that ends an episode
    try:
        for step in rollout(env, inference_actor(runner.policy)):
            out["return"] += step.reward * active
            episode = step.info["episode"]
            if episode:
                ids = episode["ids"]
                first = ids[active[ids]]  # worlds ending their first episode
                seconds = (steps[first] + 1).to(torch.float32) * env.dt
                for k, term in enumerate(env.reward_terms):
                    out[term][first] = sums[k, first] / seconds
                out["lin_vel_error"][first] = episode["lin_vel_error"][active[ids]]
                out["length_s"][first] = seconds
                out["fell"][first] = step.terminated[first].to(torch.float32)
                active[first] = False
            if not active.any():
                break
            sums, steps = env.episode_sums.clone(), env.episode_steps.clone()
    finally:
        env.close()
    return {k: float(v.mean()) for k, v in out.items()}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=10.0, help="training time of each algorithm")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eval-episodes", type=int, default=64)
    p.add_argument("--smoke", action="store_true", help="2 iterations of 8 worlds each, 2 short evaluation episodes")
    args = p.parse_args(argv)
    if args.smoke:
        args.minutes, args.eval_episodes = 0.1, 2
    return args


def train_and_evaluate(name: str, args: argparse.Namespace, tmp: Path) -> dict:
    run_dir = tmp / name.lower()
    cfg = resolve_config(load_yaml(REPO / "sim_configs" / PRESETS[name]), [
        f"seed={args.seed}", "runner.max_iterations=1000000", f"runner.max_time_s={args.minutes * 60}",
        "runner.save_interval=1000000", "runner.eval_episodes=0", f"runner.log_dir={run_dir.parent}",
        f"runner.run_name={run_dir.name}", *(SMOKE_OVERRIDES if args.smoke else ())])
    print(f"{name} on {cfg.task}: {cfg.sim.num_envs} worlds, {args.minutes:g} min of training", flush=True)
    runner = make_runner(cfg, run_dir)
    try:
        runner.learn()
        result = evaluate(runner, args.eval_episodes, cfg.seed + 54321)
        steps = runner.iteration * cfg.algo.num_steps_per_env * cfg.sim.num_envs
        result.update(train_s=runner.train_time, env_steps=steps, iterations=runner.iteration)
    finally:
        runner.close()
    print(f"  {runner.iteration} iterations, {steps:,} env steps in {result['train_s']:.0f} s; "
          f"evaluation return {result['return']:.2f}", flush=True)
    return result


TERRAIN_OVERRIDES = (
    "sim.num_envs=256", "runner.max_iterations=60", "env.randomization.push_interval_s=0",
    "env.terrain.sub_terrain_size=3.0", "env.terrain.platform_size=1.0", "env.terrain.num_levels=5",
    "env.terrain.num_columns=5",
)
"""PPO on quadruped-walk-rough (task defaults otherwise): 256 worlds, 60 iterations, 3 m cells, no pushes."""
TERRAIN_SMOKE_OVERRIDES = ("sim.num_envs=16", "runner.max_iterations=3")
"""`--smoke`: a few iterations of a few worlds (the terrain and the curriculum as in the full run)."""
TERRAIN_START_MAX = 0.02
"""Mean terrain level of the first 5 iterations must stay below: everyone starts on level 0."""
TERRAIN_LEVEL_GOAL = 0.1
"""Mean terrain level of the last 5 iterations that counts as the curriculum promoting walkers."""


class _TerrainLevels:
    """TrainLogger stand-in: keeps each iteration's mean terrain level (`Metrics/terrain_level`) and value loss."""

    def __init__(self):
        self.levels: list[float] = []
        self.value_losses: list[float] = []

    def log(self, iteration: int, scalars: dict[str, float], elapsed: float, final: bool) -> None:
        if "Metrics/terrain_level" in scalars:
            self.levels.append(scalars["Metrics/terrain_level"])
        self.value_losses.append(scalars["Loss/value_loss"])

    def video(self, iteration: int, *args) -> None:
        pass


def ppo_terrain_levels(args: argparse.Namespace, window: int = 5) -> tuple[float, float]:
    """Train PPO on quadruped-walk-rough with the terrain curriculum (`TERRAIN_OVERRIDES`; `--smoke`: tiny);
    returns the mean terrain level of the first and of the last `window` iterations.

    Raises:
        RuntimeError: the level was never logged or a value loss was not finite (a broken run, not a miss).
    """
    sizes = TERRAIN_SMOKE_OVERRIDES if args.smoke else ()
    with tempfile.TemporaryDirectory(prefix="bench_terrain_") as tmp:
        cfg = resolve_config({"task": "quadruped-walk-rough"}, [
            *TERRAIN_OVERRIDES, *sizes, f"seed={args.seed}", "runner.eval_episodes=0",
            "runner.save_interval=1000000", f"runner.log_dir={tmp}", "runner.run_name=terrain"])
        print(f"PPO on {cfg.task} with the terrain curriculum: {cfg.sim.num_envs} worlds, "
              f"{cfg.runner.max_iterations} iterations", flush=True)
        runner = make_runner(cfg, Path(tmp) / "terrain")
        rec = _TerrainLevels()
        try:
            runner.learn(rec)
        finally:
            runner.close()
    if not rec.levels or not all(math.isfinite(v) for v in rec.value_losses):
        raise RuntimeError(f"terrain run broken: {len(rec.levels)} levels logged, value losses {rec.value_losses}")
    first, last = rec.levels[:window], rec.levels[-window:]
    print(f"  {runner.iteration} iterations in {runner.train_time:.0f} s; mean terrain level per iteration "
          f"{[round(v, 3) for v in rec.levels]}", flush=True)
    return sum(first) / len(first), sum(last) / len(last)


def print_terrain_target(first: float, last: float) -> None:
    """The start check line and `TARGET ppo_terrain_level_rise`: PASS needs the last 5 iterations' mean level to
    reach the goal and the first 5 iterations' to stay below `TERRAIN_START_MAX` (the rise is the curriculum's)."""
    start_ok = first < TERRAIN_START_MAX
    print(f"terrain level at the start (first 5 iterations) {first:.3f} < {TERRAIN_START_MAX}: "
          f"{'ok' if start_ok else 'NOT ok (robots left level 0 at once)'}")
    passed = start_ok and last >= TERRAIN_LEVEL_GOAL
    print(f"TARGET ppo_terrain_level_rise measured={last:.3f} goal=>={TERRAIN_LEVEL_GOAL} "
          f"{'PASS' if passed else 'FAIL'}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench_sac_loco_") as tmp:
        results = {name: train_and_evaluate(name, args, Path(tmp)) for name in PRESETS}
    print(f"\nquadruped-walk-flat after {args.minutes:g} min of training each "
          f"({args.eval_episodes} deterministic evaluation episodes)")
    print(f"{'':30s}{'PPO':>12s}{'SAC':>12s}")
    for label, key in ROWS:
        print(f"{label:30s}" + "".join(f"{results[n][key]:12.3f}" for n in PRESETS))
    for label, key, fmt in (("training time [s]", "train_s", "{:12.0f}"), ("env steps", "env_steps", "{:12,d}")):
        print(f"{label:30s}" + "".join(fmt.format(results[n][key]) for n in PRESETS))
    walk = results["PPO"]["track_lin_vel_xy"]
    print(f"TARGET ppo_quadruped_track_lin_vel_per_s measured={walk:.3f} goal=>={PPO_WALK_GOAL} "
          f"{'PASS' if walk >= PPO_WALK_GOAL else 'FAIL'}")
    print_terrain_target(*ppo_terrain_levels(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
