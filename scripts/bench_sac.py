"""Our SAC against stable-baselines3's SAC: wall-clock time to a fixed evaluation return, same env-step budget.

Two environments, each trained once by both, one after the other in this process:

  pendulum   gymnasium's Pendulum-v1. Ours: sim_configs/gym-pendulum-sac.yaml (16 copies through the
             gymnasium adapter). SB3: RL Zoo's Pendulum-v1 SAC (learning_rate 1e-3, the rest SB3's defaults)
             on one `gymnasium.make("Pendulum-v1")`.
  arm-reach  our arm-reach task. Ours: sim_configs/arm-reach-sac.yaml (64 worlds). SB3: its default SAC on
             one world through `robo_rl.adapters.to_gymnasium.TaskGymEnv`, with our preset's task
             settings (its `env` section: the same rewards) and the action space narrowed to our preset's
             `policy.action_bound` so both explore the same range.

Both learners get the same budget of env steps (`--budget-scale` scales them) and are evaluated every
`1/EVALS_PER_BUDGET` of it on the same fresh evaluation worlds (same seed, one deterministic episode each,
`robo_rl.learn.evaluation.run_episodes`); the clock counts training only, not evaluation. A learner that never reaches
the threshold within its budget or `--sb3-max-s` seconds is reported at the time it stopped: for SB3 the
ratio is then a lower bound (said so above the TARGET lines); if ours never reaches it, the ratio is 0.
Torch runs on `THREADS` thread(s) for both (see there). Ends with

    TARGET sac_pendulum_time_to_threshold_speedup measured=<SB3 time / our time> goal=>=3.0 PASS|FAIL
    TARGET sac_arm_reach_time_to_threshold_speedup measured=<SB3 time / our time> goal=>=3.0 PASS|FAIL

and exits 0 either way.

    PYTHONPATH=. python scripts/bench_sac.py                    # both environments (~15 min on 2 cores)
    PYTHONPATH=. python scripts/bench_sac.py --env pendulum
    PYTHONPATH=. python scripts/bench_sac.py --smoke            # a smoke run: 120 env steps each, 1 evaluation
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from robo_rl.sim import set_training_process_defaults  # noqa: E402

set_training_process_defaults()  # before torch is imported, as the CLI does

import numpy as np  # noqa: E402
import torch  # noqa: E402

from robo_rl.core.config import load_yaml  # noqa: E402
from robo_rl.learn.builders import build_env, resolve_config  # noqa: E402
from robo_rl.learn.evaluation import run_episodes  # noqa: E402
from robo_rl.learn.runner import OffPolicyRunner, Runner  # noqa: E402
from robo_rl.learn.train_config import TrainConfig  # noqa: E402

GOAL = 3.0
"""Our time to the threshold must be this many times shorter than SB3's."""
EVALS_PER_BUDGET = 40
"""Evaluations over each learner's env-step budget."""
SMOKE_EVALS_PER_BUDGET = 1
"""`--smoke`: evaluations over each learner's budget (`smoke_case`)."""
THREADS = 1
"""Torch threads of both learners' gradient steps. Measured in this script on the idle 2-core machine, one is faster
than two for both: to Pendulum's threshold SB3 took 35.6 s with one and 49.5 s with two, ours 9.1 and 14.7 s."""


@dataclass(frozen=True)
class Case:
    name: str
    preset: str
    """File in sim_configs/ that our SAC trains."""
    threshold: float
    """Mean evaluation return that counts as solved."""
    budget_steps: int
    """Env steps each learner may use."""
    eval_episodes: int
    sb3_kwargs: dict[str, Any] = field(default_factory=dict)
    """SB3 SAC arguments beyond its defaults."""
    num_envs: int | None = None
    """Our worlds (None: the preset's)."""


CASES = {
    "pendulum": Case("pendulum", "gym-pendulum-sac.yaml", threshold=-200.0, budget_steps=40_000, eval_episodes=10,
                     sb3_kwargs={"learning_rate": 1e-3}),  # RL Zoo hyperparams/sac.yml, Pendulum-v1
    "arm-reach": Case("arm-reach", "arm-reach-sac.yaml", threshold=-0.35, budget_steps=200_000, eval_episodes=32),
}


def smoke_case(case: Case) -> Case:
    """`case` at the smallest sizes that run every part (`--smoke`): 120 env steps, past SB3's 100 random ones
    (`learning_starts`), so both learners take gradient steps; ours on 8 worlds, which take gradient steps within
    them too; 1 evaluation episode."""
    return dataclasses.replace(case, budget_steps=120, eval_episodes=1, num_envs=8)


@dataclass
class Race:
    """One learner's run: when (training seconds, env steps) it first evaluated at or above the threshold."""

    learner: str
    threshold: float
    evals: list[tuple[float, int, float]] = field(default_factory=list)
    """(training s, env steps, mean evaluation return) of every evaluation."""

    def record(self, train_s: float, steps: int, mean_return: float) -> bool:
        """Store one evaluation; True once the threshold is reached."""
        self.evals.append((train_s, steps, mean_return))
        print(f"  {self.learner:8s} {steps:9,d} env steps {train_s:7.1f} s  evaluation return {mean_return:9.3f}",
              flush=True)
        return self.solved

    @property
    def solved(self) -> bool:
        return bool(self.evals) and self.evals[-1][2] >= self.threshold

    @property
    def time_s(self) -> float:
        """Training seconds to the threshold, or until it stopped."""
        return self.evals[-1][0] if self.evals else math.nan

    @property
    def steps(self) -> int:
        return self.evals[-1][1] if self.evals else 0


def our_config(case: Case, budget: int, run_dir: Path, seed: int) -> TrainConfig:
    raw = load_yaml(REPO / "sim_configs" / case.preset)
    sizes = [f"seed={seed}", *([f"sim.num_envs={case.num_envs}"] if case.num_envs else [])]
    base = resolve_config(raw, sizes)
    per_iteration = base.algo.num_steps_per_env * base.sim.num_envs
    iterations = max(1, math.ceil(budget / per_iteration))
    return resolve_config(raw, [*sizes, f"runner.max_iterations={iterations}", "runner.eval_episodes=0",
                                f"runner.save_interval={iterations}", f"runner.log_dir={run_dir.parent}",
                                f"runner.run_name={run_dir.name}", f"algo.update_threads={THREADS}"])


def eval_env(cfg: TrainConfig, episodes: int):
    """The evaluation worlds both learners are scored on (the seed `Runner.evaluate` uses)."""
    return build_env(cfg, num_envs=episodes, seed=cfg.seed + 54321)


def race_ours(case: Case, budget: int, evals: int, seed: int, tmp: Path) -> Race:
    cfg = our_config(case, budget, tmp / f"ours_{case.name}", seed)
    per_iteration = cfg.algo.num_steps_per_env * cfg.sim.num_envs
    every = max(1, round(budget / evals / per_iteration))
    print(f"robo_rl SAC on {cfg.task}: {cfg.sim.num_envs} worlds, batch {cfg.algo.batch_size}, "
          f"{cfg.algo.updates_per_step} gradient steps per vector step, evaluated every {every * per_iteration:,} "
          f"env steps", flush=True)
    race = Race("robo_rl", case.threshold)

    def stop(runner: Runner) -> bool:
        if runner.iteration % every:
            return False
        result = runner.evaluate(case.eval_episodes)
        return race.record(runner.train_time, runner.iteration * per_iteration, result["mean_return"])

    runner = OffPolicyRunner(cfg, tmp / f"ours_{case.name}")
    try:
        runner.learn(stop=stop)
    finally:
        runner.close()
    return race


def sb3_env(case: Case, cfg: TrainConfig):
    """The single gymnasium env SB3 trains on, and the map from its actions to our eval env's actions."""
    import gymnasium

    if cfg.task.startswith("gym:"):
        env = gymnasium.make(cfg.task[len("gym:"):])
        space = env.action_space
        center, half = (space.high + space.low) / 2, (space.high - space.low) / 2
        return env, lambda a: (a - center) / half  # our adapter maps [-1, 1] onto the Box
    from robo_rl.adapters.to_gymnasium import TaskGymEnv

    env = TaskGymEnv(cfg.task, config=load_yaml(REPO / "sim_configs" / case.preset).get("env"), seed=cfg.seed)
    bound = float(cfg.policy.action_bound) or float(env.action_space.high[0])
    env = gymnasium.Wrapper(env)
    env.action_space = gymnasium.spaces.Box(-bound, bound, env.action_space.shape, np.float32)
    return env, lambda a: a


def race_sb3(case: Case, budget: int, evals: int, seed: int, max_s: float, tmp: Path) -> Race:
    from stable_baselines3 import SAC
    from stable_baselines3.common.callbacks import BaseCallback

    cfg = our_config(case, budget, tmp / f"sb3_{case.name}", seed)
    env, to_ours = sb3_env(case, cfg)
    every = max(1, round(budget / evals))
    print(f"stable-baselines3 SAC on {cfg.task}: 1 env, {case.sb3_kwargs or 'defaults'}, evaluated every "
          f"{every:,} env steps", flush=True)
    model = SAC("MlpPolicy", env, seed=seed, device="cpu", **case.sb3_kwargs)
    race = Race("SB3", case.threshold)
    evaluation = eval_env(cfg, case.eval_episodes)

    def policy(obs: dict[str, torch.Tensor]) -> torch.Tensor:
        actions, _ = model.predict(obs["policy"].numpy(), deterministic=True)
        return torch.as_tensor(to_ours(actions), dtype=torch.float32)

    class Clock(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.excluded = 0.0

        def _on_training_start(self) -> None:
            self.start = time.perf_counter()

        def _on_step(self) -> bool:
            if self.num_timesteps % every:
                return True
            t0 = time.perf_counter()
            train_s = t0 - self.start - self.excluded
            result = run_episodes(evaluation, policy)
            solved = race.record(train_s, self.num_timesteps, result["mean_return"])
            self.excluded += time.perf_counter() - t0
            return not solved and train_s < max_s

    try:
        model.learn(budget, callback=Clock())
    finally:
        evaluation.close()
        env.close()
    return race


def summary(case: Case, ours: Race, sb3: Race) -> tuple[str, float]:
    """Side-by-side table rows and the TARGET line of one case."""
    ratio = sb3.time_s / ours.time_s if ours.solved else 0.0
    print(f"\n{case.name}: time to evaluation return >= {case.threshold:g}")
    print(f"{'':28s}{'robo_rl SAC':>16s}{'SB3 SAC':>16s}")
    for label, fn in (("reached", lambda r: "yes" if r.solved else "no"),
                      ("training time [s]", lambda r: f"{r.time_s:.1f}"),
                      ("env steps", lambda r: f"{r.steps:,d}"),
                      ("last evaluation return", lambda r: f"{r.evals[-1][2]:.3f}" if r.evals else "-"),
                      ("env steps / training s", lambda r: f"{r.steps / r.time_s:,.0f}" if r.evals else "-")):
        print(f"{label:28s}{fn(ours):>16s}{fn(sb3):>16s}")
    if not ours.solved:
        print("robo_rl SAC did not reach the threshold: speed-up reported as 0")
    elif not sb3.solved:
        print(f"SB3 did not reach the threshold before it stopped: the speed-up is a lower bound (>= {ratio:.1f}x)")
    verdict = "PASS" if ratio >= GOAL else "FAIL"
    name = case.name.replace("-", "_")
    return f"TARGET sac_{name}_time_to_threshold_speedup measured={ratio:.2f} goal=>={GOAL} {verdict}", ratio


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--env", choices=[*CASES, "all"], default="all")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--budget-scale", type=float, default=1.0, help="scale every env-step budget")
    p.add_argument("--sb3-max-s", type=float, default=480.0, help="stop SB3 after this many training seconds")
    p.add_argument("--smoke", action="store_true", help="120 env steps each, evaluated once (a smoke run)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(THREADS)
    lines = []
    names: list[str] = list(CASES) if args.env == "all" else [args.env]
    with tempfile.TemporaryDirectory(prefix="bench_sac_") as tmp:
        for name in names:
            case = smoke_case(CASES[name]) if args.smoke else CASES[name]
            budget = case.budget_steps if args.smoke else max(1000, round(case.budget_steps * args.budget_scale))
            evals = SMOKE_EVALS_PER_BUDGET if args.smoke else EVALS_PER_BUDGET
            ours = race_ours(case, budget, evals, args.seed, Path(tmp))
            sb3 = race_sb3(case, budget, evals, args.seed, args.sb3_max_s, Path(tmp))
            lines.append(summary(case, ours, sb3)[0])
    print()
    for line in lines:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
