"""SAC beside PPO on quadruped-walk-flat for the same wall-clock budget: velocity tracking and return.

FastSAC (holosoma) reports that SAC with many worlds trains legged locomotion faster than PPO on a GPU;
this measures the claim on this CPU. Each algorithm trains from its preset (sim_configs/quadruped-walk-flat.yaml
for PPO: 1,024 worlds; sim_configs/quadruped-walk-flat-sac.yaml for SAC: 128 worlds) for `--minutes` of
training time (`runner.max_time_s`), one after the other, then its deterministic policy is evaluated on the
same `--eval-episodes` fresh worlds (one episode each): the mean return, the reward per second of the two
tracking terms, the mean planar velocity error and the share of falls. SAC has no target: the printout is the
measurement. PPO's walk is the suite's former quadruped learning check, kept here as a target: its evaluation
tracking reward per second (of a maximum 1.0; standing still earns ~0.33) must reach 0.45.

    PYTHONPATH=. python scripts/bench_sac_locomotion.py               # 2 x 10 min on 2 cores
    PYTHONPATH=. python scripts/bench_sac_locomotion.py --minutes 2
    PYTHONPATH=. python scripts/bench_sac_locomotion.py --smoke       # a smoke run
"""

from __future__ import annotations

import argparse
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
from robo_rl.learn.evaluation import rollout  # noqa: E402
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
        for step in rollout(env, runner.policy.act_inference):
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
