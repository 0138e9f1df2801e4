"""Benchmark: ReinFlow fine-tuning of a BC-pretrained flow policy on arm-pick-place, K = 4 and K = 1 denoising steps.

In one run: record scripted-expert demonstrations (DART noise on the executed actions), pretrain one
shortcut-model flow policy on them (`--algo flow-bc`), evaluate its deterministic chain with K = 4 and
K = 1 (one episode per world), fine-tune it with ReinFlow for the same wall-clock budget at each K,
and evaluate again: the deployed policy (the chain from a drawn x_0, without step noise), and, printed for
comparison, the stochastic chain ReinFlow trains (`policy.step_noise`). Target per K: the success rate of
the deployed policy rises by >= 20 points absolute, or to >= 95 %.
Also printed: the wall time per ReinFlow iteration at each K.

    python scripts/bench_reinflow.py                # ~30 min on this 2-core machine
    python scripts/bench_reinflow.py --smoke        # a smoke test: every step once, at the smallest sizes
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from robo_rl.cli import main as cli
from robo_rl.learn.evaluation import evaluate_checkpoint

TASK = "arm-pick-place"
SMOKE_BC = ("env.episode_length_s=0.2", "algo.num_steps_per_env=2", "algo.batch_size=64")
"""`--smoke`: flow-bc's 2 gradient steps on batches of 64 (its worlds only evaluate, on 0.2 s episodes)."""
SMOKE_REINFLOW = ("env.episode_length_s=0.2", "runner.max_iterations=2", "algo.critic_warmup_iterations=1",
                  "algo.num_learning_epochs=1", "algo.num_mini_batches=2")
"""`--smoke`: ReinFlow's 2 iterations, the first training the critic only, the second the actor too, on 0.2 s
episodes (the task's: 8 s)."""


def run_cli(argv: list[str]) -> None:
    code = cli.main(argv)
    if code:
        raise SystemExit(f"robo-rl {' '.join(argv[:3])} ... failed with exit code {code}")


def smoke_sets(smoke: bool, overrides: tuple[str, ...]) -> list[str]:
    """`--set KEY=VALUE` arguments of `overrides` with `--smoke`, none without."""
    return [arg for override in overrides for arg in ("--set", override)] if smoke else []


def success(run: Path, episodes: int, flow_steps: int, step_noise: bool = False) -> float:
    return evaluate_checkpoint(run, episodes=episodes, seed=4321, flow_steps=flow_steps,
                               step_noise=step_noise)["metrics"]["success"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--demos", type=int, default=100, help="expert episodes")
    parser.add_argument("--noise", type=float, default=0.2, help="DART noise on the executed expert actions")
    parser.add_argument("--bc-iterations", type=int, default=100, help="flow-bc iterations (100 gradient steps each)")
    parser.add_argument("--minutes", type=float, default=10.0, help="ReinFlow training time per K")
    parser.add_argument("--num-envs", type=int, default=256)
    parser.add_argument("--steps", type=int, default=25, help="ReinFlow steps per world per iteration")
    parser.add_argument("--episodes", type=int, default=64, help="evaluation episodes")
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--out", default="", help="keep the runs here (default: a temporary folder)")
    args = parser.parse_args()
    if args.smoke:  # every step once, at the smallest sizes
        args.demos, args.bc_iterations, args.num_envs, args.episodes, args.steps = 1, 1, 4, 1, 4
        torch.set_num_threads(1)  # tiny tensors: a second thread only spin-waits for a core another process holds
    root = Path(args.out or tempfile.mkdtemp(prefix="bench_reinflow_"))
    common = ["--task", TASK, "--num-envs", str(args.num_envs), "--set", f"runner.log_dir={root}",
              "--set", "runner.eval_episodes=0", "--set", "runner.progress_bar=false"]

    t0 = time.perf_counter()
    run_cli(["record", "--task", TASK, "--expert", "--episodes", str(args.demos), "--noise", str(args.noise),
             "--num-envs", str(min(args.num_envs, 32)), "--out", str(root / "demos")])
    run_cli(["train", "--algo", "flow-bc", "--dataset", str(root / "demos"), "--max-iterations",
             str(args.bc_iterations), *common, *smoke_sets(args.smoke, SMOKE_BC), "--run-name", "flow_bc"])
    print(f"demonstrations and flow-bc pretraining: {time.perf_counter() - t0:.0f} s")

    results = {}
    for k in (4, 1):
        before = success(root / "flow_bc", args.episodes, k)
        before_noisy = success(root / "flow_bc", args.episodes, k, step_noise=True)  # its noise net is untrained
        name = f"reinflow_k{k}"
        run_cli(["train", "--algo", "reinflow", "--set", f"algo.pretrained={root / 'flow_bc'}",
                 "--set", f"policy.num_steps={k}", "--set", f"algo.num_steps_per_env={args.steps}",
                 "--max-time", str(args.minutes * 60), "--max-iterations", "100000",
                 *common, *smoke_sets(args.smoke, SMOKE_REINFLOW), "--run-name", name])
        from robo_rl.learn.builders import load_trained

        _, state, _ = load_trained(root / name)
        iterations, seconds = int(state["iteration"]), float(state["train_time"])
        after = success(root / name, args.episodes, k)
        after_noisy = success(root / name, args.episodes, k, step_noise=True)  # the stochastic chain ReinFlow trained
        results[k] = (before, after, iterations, seconds)
        print(f"K={k}: success {before:.3f} -> {after:.3f} (with step noise: {before_noisy:.3f} -> {after_noisy:.3f}) "
              f"after {iterations} ReinFlow iterations in {seconds:.0f} s ({seconds / max(iterations, 1):.2f} s per "
              f"iteration, {args.num_envs} worlds x {args.steps} steps)")

    print(f"runs in {root}")
    for k, (before, after, _, _) in results.items():
        gain = 100.0 * (after - before)
        ok = gain >= 20.0 or after >= 0.95
        print(f"TARGET reinflow_success_gain_points_k{k} measured={gain:.1f} goal=>=20 {'PASS' if ok else 'FAIL'}")


if __name__ == "__main__":
    main()
