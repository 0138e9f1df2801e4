"""RLPD against plain SAC on arm-pick-place: success rate after the same env-step budget, with 50 expert demos.

Records `--demos` episodes (default 50) of the scripted `PickPlaceExpert` (robo_rl/tasks/experts.py) on
worlds seeded apart from training, then trains twice from sim_configs/arm-pick-place-sac.yaml for the same
env steps and seed:

  SAC   the preset as it is (no demonstrations);
  RLPD  the preset with RLPD's recipe (`robo_rl.learn.algorithms.sac.rlpd_variant`): half of every batch from the
        demonstrations, a LayerNorm critic ensemble whose target is the minimum of a random pair, and more
        gradient steps per env step (`--rlpd-critics`, `--rlpd-updates`, sized for a 2-core CPU), plus a
        behaviour-cloning term on the demonstration rows of the actor's batch (`--rlpd-bc`, 0 for plain
        RLPD): sim_configs/arm-pick-place-rlpd.yaml is this learner.

Both are evaluated every `--eval-every` iterations on the same fresh worlds (deterministic policy, one
episode each, `Metrics/success` at the episode's end). Prints the success curves, wall-clock times and ends with

    TARGET rlpd_minus_sac_success_arm_pick_place measured=<RLPD success - SAC success> goal=>0.0 PASS|FAIL

(the final evaluations) and exits 0 either way.

    PYTHONPATH=. python scripts/bench_rlpd.py                 # ~15 min on 2 cores (RLPD most of it)
    PYTHONPATH=. python scripts/bench_rlpd.py --smoke         # a smoke run
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from robo_rl.sim import set_training_process_defaults  # noqa: E402

set_training_process_defaults()  # before torch is imported, as the CLI does

import torch  # noqa: E402

from robo_rl.core.config import load_yaml  # noqa: E402
from robo_rl.learn.algorithms.sac import rlpd_variant  # noqa: E402
from robo_rl.learn.builders import resolve_config  # noqa: E402
from robo_rl.learn.runner import OffPolicyRunner, Runner  # noqa: E402
from robo_rl.learn.train_config import TrainConfig  # noqa: E402
from robo_rl.tasks.experts import PickPlaceExpert, rollout_expert  # noqa: E402
from robo_rl.tasks.task_registry import make_env, task_config_class  # noqa: E402

PRESET = REPO / "sim_configs" / "arm-pick-place-sac.yaml"
DEMO_SEED = 777
"""Seed of the demonstration worlds (training uses the preset's seed, evaluation seed + 54321)."""
SMOKE_EPISODE_S = 0.5
"""`--smoke`: the episodes of the demonstrations, the training and the evaluation last 0.5 s (the task's: 8 s)."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--iterations", type=int, default=500, help="training iterations of each learner")
    p.add_argument("--demos", type=int, default=50, help="scripted-expert episodes recorded")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eval-every", type=int, default=125, help="evaluate every this many iterations")
    p.add_argument("--eval-episodes", type=int, default=50)
    p.add_argument("--rlpd-critics", type=int, default=4, help="RLPD's critic ensemble size (RLPD: 10)")
    p.add_argument("--rlpd-updates", type=int, default=8, help="RLPD's gradient steps per vector env step")
    p.add_argument("--rlpd-bc", type=float, default=0.4,
                   help="RLPD's demo behaviour-cloning weight (algo.demo_bc_weight)")
    p.add_argument("--only", choices=("SAC", "RLPD"), help="train only this learner (a pilot; prints no TARGET)")
    p.add_argument("--smoke", action="store_true",
                   help="1 demo, 2 iterations, one evaluation of 1 episode of 0.5 s (a smoke run)")
    args = p.parse_args(argv)
    if args.smoke:
        args.iterations, args.demos, args.eval_every, args.eval_episodes = 2, 1, 2, 1
    return args


def record_demos(num_episodes: int, episode_length_s: float | None = None) -> tuple[dict[str, torch.Tensor], float]:
    """(transition arrays of `num_episodes` expert episodes, their success rate); one episode per world, of the
    task's length or `episode_length_s`."""
    cfg = None if episode_length_s is None else task_config_class("arm-pick-place")(episode_length_s=episode_length_s)
    env = make_env("arm-pick-place", num_episodes, cfg=cfg, seed=DEMO_SEED)
    try:
        demo = rollout_expert(env, PickPlaceExpert(env), num_episodes, seed=DEMO_SEED)
    finally:
        env.close()
    return demo.arrays(), demo.success_rate


def learner_config(args: argparse.Namespace, run_dir: Path, rlpd: bool) -> TrainConfig:
    cfg = resolve_config(load_yaml(PRESET), [f"seed={args.seed}", f"runner.max_iterations={args.iterations}",
                                             f"runner.save_interval={args.iterations}", "runner.eval_episodes=0",
                                             f"runner.log_dir={run_dir.parent}", f"runner.run_name={run_dir.name}",
                                             *([f"env.episode_length_s={SMOKE_EPISODE_S}"] if args.smoke else [])])
    if not rlpd:
        return cfg
    algo, policy = rlpd_variant(cfg.algo, cfg.policy, num_critics=args.rlpd_critics,
                                updates_per_step=args.rlpd_updates, demo_bc_weight=args.rlpd_bc)
    return dataclasses.replace(cfg, algo=algo, policy=policy)


def train(args: argparse.Namespace, name: str, cfg: TrainConfig, run_dir: Path,
          demos: dict[str, torch.Tensor] | None) -> list[tuple[int, float, float]]:
    """Train one learner; returns (iteration, training s, evaluation success) of every evaluation."""
    a, p = cfg.algo, cfg.policy
    print(f"{name}: {cfg.sim.num_envs} worlds x {cfg.runner.max_iterations * a.num_steps_per_env} steps, "
          f"{a.updates_per_step} gradient steps per vector step, batch {a.batch_size} "
          f"({a.demo_ratio:.0%} demonstrations), {p.num_critics} critics", flush=True)
    curve: list[tuple[int, float, float]] = []

    def evaluate(runner: Runner) -> bool:
        if runner.iteration % args.eval_every == 0 or runner.iteration == cfg.runner.max_iterations:
            result = runner.evaluate(args.eval_episodes)
            success = result["metrics"]["success"]
            curve.append((runner.iteration, runner.train_time, success))
            print(f"  {name:5s} iteration {runner.iteration:5d} {runner.train_time:7.0f} s  success {success:.2f}  "
                  f"return {result['mean_return']:.2f}", flush=True)
        return False

    runner = OffPolicyRunner(cfg, run_dir, demos=demos)
    try:
        runner.learn(stop=evaluate)
    finally:
        runner.close()
    return curve


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    t0 = time.perf_counter()
    demos, expert_success = record_demos(args.demos, SMOKE_EPISODE_S if args.smoke else None)
    print(f"{args.demos} expert demonstrations: {demos['obs'].shape[0]:,} transitions, success {expert_success:.2f} "
          f"({time.perf_counter() - t0:.0f} s)", flush=True)
    curves = {}
    with tempfile.TemporaryDirectory(prefix="bench_rlpd_") as tmp:
        for name, rlpd in (("SAC", False), ("RLPD", True)):
            if args.only not in (None, name):
                continue
            run_dir = Path(tmp) / name.lower()
            cfg = learner_config(args, run_dir, rlpd)
            curves[name] = train(args, name, cfg, run_dir, demos if rlpd else None)
    if args.only:
        return 0
    steps = args.iterations * cfg.algo.num_steps_per_env * cfg.sim.num_envs  # the same for both
    print(f"\narm-pick-place success ({args.eval_episodes} evaluation episodes) after {steps:,} env steps each")
    print(f"{'iteration':>10s}{'SAC':>10s}{'RLPD':>10s}")
    for (it, _, sac), (_, _, rlpd) in zip(curves["SAC"], curves["RLPD"], strict=True):
        print(f"{it:10d}{sac:10.2f}{rlpd:10.2f}")
    print(f"{'train s':>10s}{curves['SAC'][-1][1]:10.0f}{curves['RLPD'][-1][1]:10.0f}")
    diff = curves["RLPD"][-1][2] - curves["SAC"][-1][2]
    verdict = "PASS" if diff > 0 else "FAIL"
    print(f"TARGET rlpd_minus_sac_success_arm_pick_place measured={diff:.2f} goal=>0.0 {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
