"""Benchmark: env steps/s of an mjlab task through our adapter vs mjlab's own rsl_rl wrapper.

Both drive the same env object (one `ManagerBasedRlEnv`, made by our adapter; mjlab's
`RslRlVecEnvWrapper` wraps that same env), so physics, N and actions are identical and only the
wrappers differ: ours passes the framework's tensors through and tracks episode returns; mjlab's
builds a TensorDict per step. The two take turns in short timed chunks (a few untimed steps first),
so both are measured in the same spell of this shared machine; the ratio is the median of the
per-round ratios. Target: >= 0.95 (the adapter adds no copies).

mjlab lives in its own venv (it pins mujoco 3.11): run this with `.venv-mjlab/bin/python` (built by
`bash scripts/setup_mjlab.sh`); from another Python it re-runs itself there.

    .venv-mjlab/bin/python scripts/bench_adapter.py                 # Go1 flat, N=64, on Warp's CPU device
    .venv-mjlab/bin/python scripts/bench_adapter.py --device cuda:0 --num-envs 4096
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def reexec_in_mjlab_venv() -> None:
    """Run this script again with .venv-mjlab's Python when mjlab is not importable here."""
    venv = Path(os.environ.get("ROBO_RL_MJLAB_VENV") or REPO / ".venv-mjlab")
    python = venv / "bin" / "python"
    if not python.is_file():
        sys.exit(f"mjlab is not installed in this Python and {venv} does not exist; build it with "
                 "`bash scripts/setup_mjlab.sh`")
    os.execv(str(python), [str(python), *sys.argv])


def timed_steps(step, actions, steps: int) -> float:
    """Seconds for `steps` calls of step(actions), after synchronising the device."""
    import torch

    if actions.is_cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        step(actions)
    if actions.is_cuda:
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", default="Mjlab-Velocity-Flat-Unitree-Go1")
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--steps", type=int, default=25, help="env steps per timed chunk")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--smoke", action="store_true", help="N=16, 10 steps x 3 rounds (a smoke test)")
    args = parser.parse_args()
    if args.smoke:
        args.num_envs, args.steps, args.rounds = 16, 10, 3

    import torch
    from mjlab.rl import RslRlVecEnvWrapper

    import robo_rl.adapters  # noqa: F401  (registers the mjlab: task names)
    from robo_rl.tasks.task_registry import make_env

    warnings.filterwarnings("ignore", message=".*does not return the observation before an auto-reset")
    ours = make_env(f"mjlab:{args.task}", args.num_envs, seed=0, device=args.device)
    theirs = RslRlVecEnvWrapper(ours.env)  # the same env object: only the wrapper differs
    ours.reset()
    gen = torch.Generator().manual_seed(0)
    actions = (0.3 * torch.randn(args.num_envs, ours.action_dim, generator=gen)).to(ours.device)
    loops = {"ours": ours.step, "mjlab_rsl_rl": theirs.step}
    rates: dict[str, list[float]] = {k: [] for k in loops}
    ratios = []
    with torch.inference_mode():
        for _ in range(args.rounds):
            for name, step in loops.items():
                timed_steps(step, actions, 2)  # warm this loop up again
                rates[name].append(args.num_envs * args.steps / timed_steps(step, actions, args.steps))
            ratios.append(rates["ours"][-1] / rates["mjlab_rsl_rl"][-1])
    ours.close()
    print(f"task {args.task}, N={args.num_envs}, device {args.device}, {args.rounds} rounds of {args.steps} steps")
    for name, r in rates.items():
        print(f"  {name:14s} env steps/s median {statistics.median(r):10.0f}  (min {min(r):.0f}, max {max(r):.0f})")
    ratio = statistics.median(ratios)
    print(f"  per-round ratios ours / mjlab_rsl_rl: {', '.join(f'{x:.3f}' for x in ratios)}")
    print(f"TARGET adapter_vs_mjlab_rsl_rl_wrapper_steps measured={ratio:.3f} goal=>=0.95 "
          f"{'PASS' if ratio >= 0.95 else 'FAIL'}")


if __name__ == "__main__":
    if importlib.util.find_spec("mjlab") is None:
        reexec_in_mjlab_venv()
    main()
