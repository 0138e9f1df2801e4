"""Data-parallel training on this machine: 2 ranks under torchrun (gloo) against one process, same total worlds.

Learning (`--learning`): `robo-rl train --task arm-reach` (its preset: 512 worlds, 200 iterations) in one process,
then the same under `torchrun --nproc_per_node=2 ... --distributed` (256 worlds per rank), one run after the other
for each seed (never two at once). Per run: the evaluation the CLI prints (64 episodes: end-effector distance and
success), the training time and the env steps/s. The 2-rank run trains to the single-process result when its median
evaluation distance stays within noise of the single process's: below 1 cm like it, and no more than 1.5x it.

Gradient exchange (`--sync`): PPO-sized updates (the quadruped's networks 512-256-128, 1024 worlds x 24 steps over 2
ranks, 4 minibatches x 5 epochs; surrogate + value loss) with the gradients averaged either by one all-reduce of their
concatenation after backward (what `robo_rl.learn.distributed.all_reduce_gradients` does) or by torch's
DistributedDataParallel (bucketed all-reduces overlapped with backward). Interleaved repeats, median time per update.

    PYTHONPATH=. python scripts/bench_distributed.py                 # both parts (~12 min on 2 cores)
    PYTHONPATH=. python scripts/bench_distributed.py --sync          # gradient exchange only (~1 min)
    PYTHONPATH=. python scripts/bench_distributed.py --learning --seeds 0 1 2
    PYTHONPATH=. python scripts/bench_distributed.py --smoke         # both, tiny

Scaling (`--scaling`, what `scripts/gpu_check.py --distributed` runs on a GPU machine): env steps/s of PPO training
(`--task`, default quadruped-walk-flat) in one process with `--worlds` worlds against `--ranks` ranks with `--worlds`
worlds each (weak scaling, as Isaac Lab reports it), on `--device` (cuda: the mujoco_warp backend, one GPU per rank);
the rate is the last progress line's, after the first iterations' warm-up.

    PYTHONPATH=. python scripts/bench_distributed.py --scaling --ranks 8 --device cuda --worlds 4096
    -> TARGET distributed_scaling_<G>_ranks measured=<G-rank steps/s / 1-rank steps/s> goal=>=<0.8 G> PASS|FAIL

Ends with
    TARGET distributed_arm_reach_distance_vs_single measured=<2-rank / 1-process median distance> goal=<=1.5 PASS|FAIL
    TARGET distributed_arm_reach_distance_m measured=<2-rank median distance> goal=<=0.01 PASS|FAIL
    TARGET flat_allreduce_vs_ddp_update_time measured=<flat / DDP> goal=<=1.0 PASS|FAIL
and exits 0 either way.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

EVAL_LINE = re.compile(r"evaluation: \d+ episodes .*ee_distance_final ([0-9.eE+-]+) \| success ([0-9.]+)")
DONE_LINE = re.compile(r"done: .*?, (\d+) iterations in (\d+) s")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--learning", action="store_true", help="only the learning comparison")
    p.add_argument("--sync", action="store_true", help="only the gradient-exchange timing")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--smoke", action="store_true", help="tiny sizes: checks the script, measures nothing")
    p.add_argument("--repeats", type=int, default=None, help="timed updates per method (default 10; 2 with --smoke)")
    p.add_argument("--scaling", action="store_true", help="only the 1 vs --ranks env steps/s comparison")
    p.add_argument("--ranks", type=int, default=2, help="--scaling: ranks of the scaled run (GPUs with cuda)")
    p.add_argument("--device", default="cpu", help="--scaling: cpu, or cuda (mujoco_warp, one GPU per rank)")
    p.add_argument("--worlds", type=int, default=1024, help="--scaling: worlds per rank")
    p.add_argument("--task", default="quadruped-walk-flat", help="--scaling: the task trained")
    p.add_argument("--iterations", type=int, default=30, help="--scaling: iterations per run")
    p.add_argument("--sync-worker", action="store_true", help=argparse.SUPPRESS)  # a rank of the --sync part
    p.add_argument("--out", default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def loopback_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "GLOO_SOCKET_IFNAME": "lo"}


def torchrun(nproc: int) -> list[str]:
    """torchrun on this machine: `--standalone` binds its store to a free localhost port itself (no race between
    picking a port and binding it, which concurrent jobs can lose)."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]


# ------------------------------------------------------------------------------------------------ learning
def train_run(ranks: int, seed: int, folder: Path, smoke: bool) -> dict[str, float]:
    """One `robo-rl train --task arm-reach` (one process, or `ranks` under torchrun); its evaluation and times."""
    args = ["train", "--task", "arm-reach", "--seed", str(seed), "--run-name", f"r{ranks}_s{seed}",
            "--set", "runner.progress_bar=false"]
    if smoke:
        args += ["--num-envs", "16", "--max-iterations", "2", "--set", "runner.eval_episodes=4"]
    if ranks == 1:
        cmd = [sys.executable, "-m", "robo_rl.cli", *args]
    else:
        cmd = [*torchrun(ranks), "-m", "robo_rl.cli", *args, "--distributed"]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=folder, env=loopback_env(), capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"bench_distributed: {' '.join(cmd)} failed:\n{done.stderr[-3000:]}")
    evaluation, finished = EVAL_LINE.search(done.stdout), DONE_LINE.search(done.stdout)
    iterations, train_s = int(finished.group(1)), float(finished.group(2))
    steps = re.findall(r"([0-9,]+) steps/s", done.stdout)
    return {"distance": float(evaluation.group(1)), "success": float(evaluation.group(2)), "train_s": train_s,
            "wall_s": wall, "iterations": iterations, "steps_per_s": float(steps[-1].replace(",", "")) if steps else 0}


def learning(seeds: list[int], smoke: bool) -> tuple[float, float]:
    results: dict[int, list[dict[str, float]]] = {1: [], 2: []}
    with tempfile.TemporaryDirectory(prefix="bench_distributed_") as tmp:
        for seed in seeds:
            for ranks in (1, 2):
                r = train_run(ranks, seed, Path(tmp), smoke)
                results[ranks].append(r)
                print(f"seed {seed} ranks {ranks}: distance {r['distance'] * 1000:.2f} mm, success "
                      f"{r['success'] * 100:.0f} %, {r['iterations']} iterations in {r['train_s']:.0f} s of training "
                      f"({r['wall_s']:.0f} s wall), last {r['steps_per_s']:,.0f} env steps/s", flush=True)
    print("\nranks | distance mm (median, min-max) | success % (median) | training s (median) | wall s (median)")
    for ranks, runs in results.items():
        d = [r["distance"] * 1000 for r in runs]
        print(f"{ranks:5d} | {statistics.median(d):6.2f} ({min(d):.2f}-{max(d):.2f}) | "
              f"{statistics.median(r['success'] * 100 for r in runs):5.0f} | "
              f"{statistics.median(r['train_s'] for r in runs):6.0f} | "
              f"{statistics.median(r['wall_s'] for r in runs):6.0f}")
    single = statistics.median(r["distance"] for r in results[1])
    split = statistics.median(r["distance"] for r in results[2])
    return split / single, split


# ------------------------------------------------------------------------------------------------ gradient exchange
def sync_worker(args: argparse.Namespace) -> None:
    """One rank: PPO-sized minibatch steps (the quadruped's networks, 1024 worlds x 24 steps over 2 ranks, 4
    minibatches x 5 epochs), the gradients averaged by the flat all-reduce or by DDP."""
    import torch
    from torch import distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    from robo_rl.learn import distributed
    from robo_rl.learn.algorithms.ppo import clipped_surrogate_loss
    from robo_rl.learn.networks.actor_critic import ActorCritic, PolicyConfig, gaussian_log_prob

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    batch, obs_dim, action_dim = (64, 48, 12) if args.smoke else (512 * 24, 48, 12)
    repeats = args.repeats or (2 if args.smoke else 10)

    class Forward(nn.Module):
        """Actor mean and critic value in one call (what DDP needs to see)."""

        def __init__(self, policy: ActorCritic):
            super().__init__()
            self.policy = policy

        def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return self.policy.actor(obs), self.policy.critic(obs).squeeze(-1)

    torch.manual_seed(0)
    dims = (512, 256, 128)
    model = Forward(ActorCritic(obs_dim, obs_dim, action_dim, PolicyConfig(actor_hidden_dims=dims,
                                                                            critic_hidden_dims=dims)))
    ddp = DistributedDataParallel(model, broadcast_buffers=False)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(rank)
    data = {"obs": torch.randn(batch, obs_dim, generator=g), "actions": torch.randn(batch, action_dim, generator=g),
            "old_log_prob": torch.randn(batch, generator=g), "advantages": torch.randn(batch, generator=g),
            "returns": torch.randn(batch, generator=g)}
    minibatches = [torch.arange(batch)[k::4] for k in range(4)]

    def update(method: str) -> float:
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(5):
            for idx in minibatches:
                mean, value = (ddp if method == "ddp" else model)(data["obs"][idx])
                log_std = model.policy.action_log_std()
                log_prob = gaussian_log_prob(data["actions"][idx], mean, log_std)
                loss = clipped_surrogate_loss(log_prob, data["old_log_prob"][idx], data["advantages"][idx], 0.2)
                loss = loss + (value - data["returns"][idx]).square().mean()
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if method == "flat":
                    distributed.all_reduce_gradients(model.parameters())
                optimizer.step()
        dist.barrier()
        return time.perf_counter() - t0

    times: dict[str, list[float]] = {"flat": [], "ddp": []}
    for i in range(repeats + 1):
        for method in (("flat", "ddp") if i % 2 == 0 else ("ddp", "flat")):
            took = update(method)
            if i:  # the first round warms up
                times[method].append(took)
    if rank == 0:
        Path(args.out).write_text(f"{statistics.median(times['flat'])} {statistics.median(times['ddp'])}")
    dist.destroy_process_group()


def sync(args: argparse.Namespace) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "times.txt"
        cmd = [*torchrun(2), str(Path(__file__).resolve()), "--sync-worker", "--out", str(out)]
        cmd += ["--smoke"] if args.smoke else []
        cmd += ["--repeats", str(args.repeats)] if args.repeats else []
        done = subprocess.run(cmd, env={**loopback_env(), "OMP_NUM_THREADS": "1"}, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"bench_distributed: the gradient-exchange ranks failed:\n{done.stderr[-3000:]}")
        flat, ddp = (float(v) for v in out.read_text().split())
    print(f"PPO update over 2 ranks: flat all-reduce {flat * 1000:.0f} ms, DDP {ddp * 1000:.0f} ms (median)")
    return flat / ddp


def scaling(args: argparse.Namespace) -> float:
    """Env steps/s with `--ranks` ranks of `--worlds` worlds each over one process with `--worlds` worlds."""
    sim = ["--set", "sim.backend=mujoco_warp", "--set", "sim.device=cuda"] if args.device.startswith("cuda") else []
    iterations = 3 if args.smoke else args.iterations
    rates = {}
    with tempfile.TemporaryDirectory(prefix="bench_distributed_") as tmp:
        for ranks in (1, args.ranks):
            train = ["train", "--task", args.task, "--num-envs", str(args.worlds * ranks), "--max-iterations",
                     str(iterations), "--run-name", f"scale{ranks}", "--set", "runner.eval_episodes=0", *sim]
            cmd = ([sys.executable, "-m", "robo_rl.cli", *train] if ranks == 1 else
                   [*torchrun(ranks), "-m", "robo_rl.cli", *train, "--distributed"])
            done = subprocess.run(cmd, cwd=tmp, env=loopback_env(), capture_output=True, text=True)
            if done.returncode != 0:
                raise SystemExit(f"bench_distributed: {' '.join(cmd)} failed:\n{done.stderr[-3000:]}")
            rates[ranks] = float(re.findall(r"([0-9,]+) steps/s", done.stdout)[-1].replace(",", ""))
            print(f"{args.task}, {ranks} rank(s) x {args.worlds} worlds on {args.device}: {rates[ranks]:,.0f} env "
                  "steps/s (training included)", flush=True)
    return rates[args.ranks] / rates[1]


def target(name: str, value: float, op: str, goal: float) -> None:
    ok = value <= goal if op == "<=" else value >= goal
    print(f"TARGET {name} measured={value:.4g} goal={op}{goal} {'PASS' if ok else 'FAIL'}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.sync_worker:
        sync_worker(args)
        return 0
    if args.scaling:
        target(f"distributed_scaling_{args.ranks}_ranks", scaling(args), ">=", round(0.8 * args.ranks, 2))
        return 0
    both = not (args.learning or args.sync)
    lines = []
    if args.learning or both:
        ratio, distance = learning(args.seeds, args.smoke)
        lines += [("distributed_arm_reach_distance_vs_single", ratio, "<=", 1.5),
                  ("distributed_arm_reach_distance_m", distance, "<=", 0.01)]
    if args.sync or both:
        lines.append(("flat_allreduce_vs_ddp_update_time", sync(args), "<=", 1.0))
    for line in lines:
        target(*line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
