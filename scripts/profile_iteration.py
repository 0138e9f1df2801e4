"""Where one PPO training iteration spends its time: physics, the task's own computation, policy inference, storage,
returns, the update, and the rest of the loop.

Builds the runner exactly as `robo-rl train --task TASK` does (the task's preset, `--set` overrides), wraps the
pieces of one iteration with wall-clock timers (everything runs synchronously on the CPU, so the timers add up), runs
`--warmup` iterations untimed, then `--iterations` timed ones, for each world count of `--num-envs`:

    PYTHONPATH=. .venv/bin/python scripts/profile_iteration.py     # quadruped-walk-flat at 256, 1024, 4096 worlds
    PYTHONPATH=. .venv/bin/python scripts/profile_iteration.py --task arm-reach --num-envs 512
    PYTHONPATH=. .venv/bin/python scripts/profile_iteration.py --smoke

The rows, per iteration (ms) and as a share of it:
  physics           the backend's step (`mujoco.rollout` over the worlds, `decimation` substeps per policy step)
  actions           the action terms: clipping, latency queue, targets (before physics)
  task              after physics: state refresh, rewards, terminations, observations, resets of ended worlds
  policy            `algo.act`: normaliser update, actor and critic forward, sampling, writes into the storage
  storage           `algo.process_env_step`: time-out bootstrapping, rewards and dones into the storage
  returns           `algo.compute_returns`: GAE and advantage normalisation
  update            `algo.update`: the PPO epochs
  loop              everything else of `Runner.learn` (NaN guard, episode logs, return tracking, logging)
and the physics bound: env steps/s if an iteration were physics alone, beside the measured env steps/s.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

ROWS = ("physics", "actions", "task", "policy", "storage", "returns", "update", "loop")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--task", default="quadruped-walk-flat")
    p.add_argument("--num-envs", type=int, nargs="+", default=None, help="world counts (default 256 1024 4096)")
    p.add_argument("--iterations", type=int, default=None, help="timed iterations per world count (default 10)")
    p.add_argument("--warmup", type=int, default=None, help="untimed iterations first (default 3)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--smoke", action="store_true", help="tiny: checks the script, measures nothing")
    return p.parse_args(argv)


class Timers:
    """Wall-clock seconds per row, accumulated by wrapped callables."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.on = False

    def wrap(self, row: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            if not self.on:
                return fn(*args, **kwargs)
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[row] += time.perf_counter() - t0
        return timed


def profile(task: str, num_envs: int, iterations: int, warmup: int, overrides: list[str]) -> dict[str, float]:
    """Per-iteration seconds of each row, of the whole iteration ("iteration") and its env steps ("steps")."""
    import tempfile

    from robo_rl.cli.main import _preset_name
    from robo_rl.core.assets import find_data_file
    from robo_rl.core.config import load_yaml
    from robo_rl.learn.builders import resolve_config
    from robo_rl.learn.runner import make_runner

    preset = find_data_file("sim_configs", _preset_name(task, None, "ppo"))
    raw = {**(load_yaml(preset) if preset else {}), "task": task}
    cfg = resolve_config(raw, [*overrides, f"sim.num_envs={num_envs}", "runner.eval_episodes=0",
                               f"runner.max_iterations={warmup + iterations}", "runner.save_interval=100000"])
    with tempfile.TemporaryDirectory() as tmp:
        runner = make_runner(cfg, Path(tmp) / "run")
        env, algo, timers = runner.env, runner.algo, Timers()
        env.backend.step = timers.wrap("physics", env.backend.step)
        env._apply_action = timers.wrap("actions", env._apply_action)
        env_step = timers.wrap("env", env.step)
        env.step = env_step
        algo.act = timers.wrap("policy", algo.act)
        algo.process_env_step = timers.wrap("storage", algo.process_env_step)
        algo.compute_returns = timers.wrap("returns", algo.compute_returns)
        algo.update = timers.wrap("update", algo.update)
        marks: list[float] = []  # after each iteration (the stop callback), loop overhead included

        def mark(r: Any) -> bool:
            marks.append(time.perf_counter())
            timers.on = r.iteration >= warmup
            return False

        runner.learn(None, stop=mark)
        steps = runner._samples_per_iteration()
        runner.close()
    out = {k: v / iterations for k, v in timers.seconds.items()}
    out["task"] = out.pop("env", 0.0) - out.get("physics", 0.0) - out.get("actions", 0.0)
    out["iteration"] = (marks[-1] - marks[warmup - 1]) / iterations
    out["steps"] = steps
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from robo_rl.sim import set_training_process_defaults

    set_training_process_defaults()
    counts = args.num_envs or ([16] if args.smoke else [256, 1024, 4096])
    iterations = args.iterations or (1 if args.smoke else 10)
    warmup = max(1, args.warmup if args.warmup is not None else (1 if args.smoke else 3))
    print(f"{args.task}: {iterations} timed iterations after {warmup} untimed, per iteration")
    for n in counts:
        rows = profile(args.task, n, iterations, warmup, args.overrides)
        total, steps = rows.pop("iteration"), rows.pop("steps")
        rows["loop"] = max(0.0, total - sum(rows.values()))
        print(f"\n{n} worlds: {total * 1000:.0f} ms per iteration, {steps / total:,.0f} env steps/s "
              f"(physics alone would allow {steps / rows['physics']:,.0f})")
        for row in ROWS:
            print(f"  {row:8s} {rows.get(row, 0.0) * 1000:9.1f} ms  {100 * rows.get(row, 0.0) / total:5.1f} %")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
