"""Time to walk: wall-clock seconds until `robo-rl train --task quadruped-walk-flat` (its preset) tracks its velocity
commands, against rsl-rl-lib's PPO on the same env.

Per seed, one run after the other (never two at once):
  1. ours: the preset through our OnPolicyRunner, stopped once the logged tracking reward
     (`Episode_Reward/track_lin_vel_xy`, reward per second of episode, maximum 1.0) has held >= 0.9 of its maximum
     for 10 consecutive iterations (or after `--budget` seconds); the time is the training time at that point. The
     policy at that point is evaluated on 64 fresh episodes (the CLI's evaluation): planar velocity error.
     That policy is then exported (`robo-rl export`) and rehearsed on the Go2 twin through the deploy core
     (`RobotEnv`: its safety filter, its action terms, the robot-side base velocity estimate), tracking velocity
     commands drawn from the trained range: its planar error there against the evaluation's.
  2. rsl-rl-lib 5's OnPolicyRunner on the same env (robo_rl.adapters.to_rsl_rl: same worlds, same task) with
     rsl-rl-lib's own defaults for PPO and its networks and 24 steps per iteration, as its examples
     (`--rsl-config defaults`, as the issue asks: whatever its PPO and MLPModel take when nothing is said), or with
     our preset's hyper-parameters and network sizes (`--rsl-config ours`: scripts/bench_ppo.py's mapping, the
     loop-against-loop comparison). One iteration per `learn` call, timed, with the same stopping rule, for at most
     twice our time (enough to decide the 0.5 ratio; capped by `--budget`). When it has not walked by then, the
     ratio is an upper bound.

    PYTHONPATH=. .venv/bin/python scripts/bench_time_to_walk.py                 # seeds 0 1 2, up to ~1 h
    PYTHONPATH=. .venv/bin/python scripts/bench_time_to_walk.py --seeds 0 --budget 600
    PYTHONPATH=. .venv/bin/python scripts/bench_time_to_walk.py --smoke         # tiny: checks the script

Ends with (medians over seeds)
    TARGET go2_seconds_to_walk measured=<s> goal=<=180 PASS|FAIL
    TARGET go2_eval_planar_error_m_per_s measured=<m/s> goal=<=0.1 PASS|FAIL
    TARGET go2_time_to_walk_vs_rsl_rl measured=<ours / rsl-rl-lib> goal=<=0.5 PASS|FAIL
    TARGET go2_deploy_minus_eval_error_m_per_s measured=<deployed - evaluated> goal=<=0.05 PASS|FAIL
and exits 0 either way.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from robo_rl.sim import set_training_process_defaults  # noqa: E402

set_training_process_defaults()

TASK = "quadruped-walk-flat"
METRIC = "Episode_Reward/track_lin_vel_xy"
MAX_TRACKING = 1.0
"""The tracking reward per second of a perfect walker (the term's weight)."""
FRACTION, HOLD = 0.9, 10
EVAL_EPISODES = 64


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--budget", type=float, default=900.0, help="seconds of training at most, per learner and seed")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override the preset for both learners")
    p.add_argument("--rsl-config", choices=("defaults", "ours"), default="defaults",
                   help="rsl-rl-lib with its own PPO and network defaults, or with our preset's hyper-parameters")
    p.add_argument("--smoke", action="store_true", help="tiny sizes: checks the script, measures nothing")
    return p.parse_args(argv)


def walked_at(values: list[float | None], times: list[float]) -> float | None:
    """Training time at the first iteration that ends HOLD consecutive logged values >= FRACTION * MAX_TRACKING."""
    run = 0
    for value, t in zip(values, times, strict=True):
        run = run + 1 if value is not None and value >= FRACTION * MAX_TRACKING else 0
        if run >= HOLD:
            return t
    return None


def config(args: argparse.Namespace, seed: int):
    from robo_rl.core.config import load_yaml
    from robo_rl.learn.builders import resolve_config

    raw = {**load_yaml(REPO / "sim_configs" / f"{TASK}.yaml"), "task": TASK}
    smoke = ["sim.num_envs=16", "algo.num_steps_per_env=8", "env.episode_length_s=0.5"] if args.smoke else []
    return resolve_config(raw, [*smoke, *args.overrides, f"seed={seed}", "runner.max_iterations=1000000",
                                f"runner.max_time_s={args.budget}", "runner.save_interval=1000000"])


class _Recorder:
    """TrainLogger stand-in: the tracking value and training time of every iteration."""

    def __init__(self) -> None:
        self.values: list[float | None] = []
        self.times: list[float] = []

    def log(self, iteration: int, scalars: dict[str, float], elapsed: float, final: bool) -> None:
        self.values.append(scalars.get(METRIC))
        self.times.append(elapsed)

    def video(self, *args: object) -> None:
        pass


def train_ours(cfg, smoke: bool) -> dict:
    from robo_rl.learn.runner import OnPolicyRunner

    rec = _Recorder()
    with tempfile.TemporaryDirectory() as run_dir:
        runner = OnPolicyRunner(cfg, run_dir)
        try:
            hold = 2 if smoke else None
            runner.learn(rec, stop=lambda r: (r.iteration >= hold) if hold else walked_at(rec.values, rec.times)
                         is not None)
            metrics = runner.evaluate(4 if smoke else EVAL_EPISODES)["metrics"]
            runner.save()
        finally:
            runner.close()
        deployed = exported_error(run_dir, smoke)
    return {"walked": walked_at(rec.values, rec.times), "trained": runner.train_time,
            "iterations": runner.iteration, "error": float(metrics["lin_vel_error"]), "deployed": deployed}


def exported_error(run_dir: str, smoke: bool) -> float:
    """Export the run's policy and rehearse it on the Go2 twin: planar velocity error through the deploy core."""
    from robo_rl.export.onnx_export import export_policy

    onnx = Path(run_dir) / "policy.onnx"
    with contextlib.redirect_stdout(io.StringIO()):
        export_policy(run_dir, onnx, parity_envs=8 if smoke else 32, parity_steps=5 if smoke else 20)
    return deploy_error(onnx, commands=2 if smoke else 8, seconds=1.0 if smoke else 4.0, settle_s=0.1 if smoke else 1.0)


def deploy_error(policy: Path | str, *, commands: int = 8, seconds: float = 4.0, settle_s: float = 1.0,
                 seed: int = 0) -> float:
    """Mean planar velocity error (m/s) of an exported Go2 policy on the twin through the deploy core (`RobotEnv`):
    `commands` velocity commands drawn from the trained range, each held `seconds`, scored after `settle_s`; a fall
    ends the episode and the next command starts from a fresh stand-up."""
    import numpy as np

    from robo_rl.adapters.robot_env import RobotEnv
    from robo_rl.deploy.policy import OnnxPolicy

    env = RobotEnv(policy, REPO / "hardware" / "go2.yaml", rewards=("velocity_tracking",), reset_module=None,
                   max_episode_steps=10**6, sample_commands=False, seed=seed)
    act, errors = OnnxPolicy(policy), []
    rng = np.random.default_rng(seed)
    try:
        low, high = env.runtime.policy.commands.ranges["velocity_command"]
        steps, settle = round(seconds * 50), round(settle_s * 50)
        obs, _ = env.reset(seed=seed)
        for _ in range(commands):
            command = env.set_command("velocity_command", rng.uniform(low, high))
            for k in range(steps):
                obs, _, terminated, truncated, _ = env.step(act(obs)[0])
                if k >= settle:
                    lin, _ = env.runtime.robot.base_twist()
                    errors.append(float(np.hypot(command[0] - lin[0], command[1] - lin[1])))
                if terminated or truncated:
                    obs, _ = env.reset()
                    break
    finally:
        env.close()
    return float(np.mean(errors)) if errors else float("nan")


RSL_STEPS_PER_ENV = 24
"""rsl-rl-lib's runner has no default rollout length: 24, what its examples and legged_gym use."""


def rsl_default_config(num_steps_per_env: int = RSL_STEPS_PER_ENV) -> dict:
    """rsl-rl-lib's OnPolicyRunner config that sets nothing it has a default for: PPO's own hyper-parameters
    (5 epochs x 4 minibatches, lr 1e-3 adaptive, entropy 0.01, ...) and MLPModel's (256, 256, 256) ELU networks
    without observation normalisation, and 24 steps per iteration (`RSL_STEPS_PER_ENV`)."""
    return {
        "num_steps_per_env": num_steps_per_env,
        "save_interval": 10**9,
        "obs_groups": {"actor": ["policy"], "critic": ["critic"]},
        "algorithm": {"class_name": "PPO"},
        "actor": {"class_name": "MLPModel", "distribution_cfg": {"class_name": "GaussianDistribution"}},
        "critic": {"class_name": "MLPModel"},
    }


def train_rsl(cfg, limit: float, smoke: bool, rsl_config: str = "defaults") -> dict:
    from rsl_rl.runners import OnPolicyRunner as RslRunner

    from robo_rl.adapters.to_rsl_rl import RslRlVecEnv
    from robo_rl.learn.builders import build_env

    spec = importlib.util.spec_from_file_location("bench_ppo", REPO / "scripts" / "bench_ppo.py")
    bench_ppo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench_ppo)
    import torch

    torch.manual_seed(cfg.seed)
    env = build_env(cfg)
    env.reset()
    venv = RslRlVecEnv(env)
    values: list[float | None] = []
    times: list[float] = []
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            train_cfg = (rsl_default_config(cfg.algo.num_steps_per_env if smoke else RSL_STEPS_PER_ENV)
                         if rsl_config == "defaults" else bench_ppo.rsl_train_config(cfg, "scalar"))
            runner = RslRunner(venv, train_cfg, log_dir=None, device="cpu")
        elapsed, steps = 0.0, train_cfg["num_steps_per_env"]
        while elapsed < limit and (not smoke or len(values) < 2):
            t0 = time.perf_counter()
            runner.learn(1, init_at_random_ep_len=False)
            elapsed += time.perf_counter() - t0
            logged = [log[METRIC] for log in venv.step_logs[-steps:] if METRIC in log]
            values.append(sum(logged) / len(logged) if logged else None)
            times.append(elapsed)
            if walked_at(values, times) is not None:
                break
    finally:
        env.close()
    return {"walked": walked_at(values, times), "trained": elapsed, "iterations": len(values)}


def target(name: str, value: float, op: str, goal: float) -> None:
    ok = value <= goal if op == "<=" else value >= goal
    print(f"TARGET {name} measured={value:.4g} goal={op}{goal} {'PASS' if ok else 'FAIL'}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    ours_times, errors, ratios, gaps = [], [], [], []
    for seed in args.seeds:
        cfg = config(args, seed)
        ours = train_ours(cfg, args.smoke)
        ours_time = ours["walked"] if ours["walked"] is not None else ours["trained"]
        print(f"seed {seed} robo_rl: {'walked at' if ours['walked'] is not None else 'did not walk in'} "
              f"{ours_time:.0f} s ({ours['iterations']} iterations); evaluation planar error "
              f"{ours['error']:.3f} m/s, exported and rehearsed on the twin {ours['deployed']:.3f} m/s", flush=True)
        limit = min(args.budget, 2 * ours_time)
        rsl = train_rsl(cfg, limit, args.smoke, args.rsl_config)
        rsl_time = rsl["walked"] if rsl["walked"] is not None else rsl["trained"]
        walked = "walked at" if rsl["walked"] is not None else "did not walk in"
        print(f"seed {seed} rsl-rl-lib ({args.rsl_config}): {walked} {rsl_time:.0f} s ({rsl['iterations']} "
              "iterations)", flush=True)
        ours_times.append(ours_time)  # the whole budget when it did not walk
        errors.append(ours["error"])
        gaps.append(ours["deployed"] - ours["error"])
        ratios.append(ours_time / max(rsl_time, 1e-9))  # an upper bound when rsl-rl-lib did not walk
    print(f"\nrobo_rl seconds to walk: {ours_times}; evaluation errors: {[round(e, 3) for e in errors]}; "
          f"ratios to rsl-rl-lib: {[round(r, 3) for r in ratios]} (a bound where rsl-rl-lib did not walk)")
    target("go2_seconds_to_walk", statistics.median(ours_times), "<=", 180)
    target("go2_eval_planar_error_m_per_s", statistics.median(errors), "<=", 0.1)
    target("go2_time_to_walk_vs_rsl_rl", statistics.median(ratios), "<=", 0.5)
    target("go2_deploy_minus_eval_error_m_per_s", statistics.median(gaps), "<=", 0.05)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
