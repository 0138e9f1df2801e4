"""Benchmark: physics steps/s of our batched env vs raw `mujoco.rollout`.

For each task, in one run and on the same model, N and decimation:
  ours       TaskEnv.step (actions -> ctrl, threaded physics, observations, rewards, auto-reset)
  raw        mujoco.rollout on a persistent thread pool, chaining the final state (no task logic);
             each of its chunks starts from our env's current worlds, so both do the same physics
  paused     raw again, busy-waiting after each call for as long as ours spent outside physics per
             step: what a pause of that length alone costs on this machine (no target)
Physics steps/s = worlds x policy steps x decimation / seconds. All three loops stay alive and take
turns in short timed chunks (one chunk each per round, after a few untimed steps that warm it up
again), so every comparison is made within the same spell of a shared machine. Rates are medians
over rounds; each ratio is the median of the per-round ratios. A single chunk can be off by 10-30 %
on this shared machine, so the default runs 40 rounds (1-2 min per task).

    python scripts/bench_sim.py                 # both tasks, N=1024
    python scripts/bench_sim.py --smoke         # a smoke test: tiny sizes, both backends (Warp's on its CPU device)

With `--backend mujoco_warp [--device cuda:0]` it compares our TaskEnv on the MuJoCo Warp backend
with raw `mujoco_warp.step` on the same model, N, buffers, initial state and ctrl (a CUDA graph of
the decimated steps on a GPU, plain calls on Warp's CPU device), interleaved the same way. On a GPU
it also runs PPO on quadruped-walk-flat at `--ppo-envs` worlds and reports end-to-end env steps/s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

# isort: off
from robo_rl.sim import set_training_process_defaults

set_training_process_defaults()  # before torch is imported, as the CLI does

# isort: on
import mujoco  # noqa: E402
import mujoco.rollout  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from robo_rl.tasks.task_registry import make_env  # noqa: E402

CORES = os.cpu_count() or 1


class OursLoop:
    """Our TaskEnv: actions -> ctrl, threaded physics, observations, rewards, auto-reset."""

    def __init__(self, task: str, n: int, actions: torch.Tensor):
        self.env = make_env(task, n)
        self.env.reset()
        self.actions = list(actions)  # (N, A) each: fetching one is free, as for raw's list of ctrls
        self.physics_steps = n * self.env.cfg.decimation  # per policy step
        self.i = 0
        self.physics_s = 0.0  # seconds inside backend.step
        self.pause_s = 0.0  # seconds per step outside physics in the last chunk
        step = self.env.backend.step

        def timed_step(n_substeps: int) -> None:
            t = time.perf_counter()
            step(n_substeps)
            self.physics_s += time.perf_counter() - t

        self.env.backend.step = timed_step

    def run(self, k: int) -> float:
        """Seconds for k policy steps."""
        self.physics_s = 0.0
        t = time.perf_counter()
        for _ in range(k):
            self.env.step(self.actions[self.i % len(self.actions)])
            self.i += 1
        seconds = time.perf_counter() - t
        self.pause_s = (seconds - self.physics_s) / k
        return seconds

    def close(self) -> None:
        self.env.close()


class RawLoop:
    """Raw mujoco.rollout on a persistent pool, same model, N, initial state, ctrl and decimation.

    With `pause_s` > 0 it busy-waits that long after every call, as our env does its task work:
    the ceiling of any env that spends that long between physics calls on this machine.
    """

    def __init__(self, task: str, n: int, actions: torch.Tensor):
        env = make_env(task, 1)  # only to get the same model, initial state, ctrl mapping and decimation
        b, dec = env.backend, env.cfg.decimation
        self.model, self.dec = b.model, dec
        nthread = os.cpu_count() or 1
        self.pool = mujoco.rollout.Rollout(nthread=nthread)
        self.datas = [mujoco.MjData(self.model) for _ in range(nthread)]
        self.state = np.repeat(b._init_state[None], n, 0)  # (N, S)
        self.ctrls = [
            np.repeat((env.default_joint_pos + env.cfg.action_scale * a).double().numpy()[:, None, :], dec, 1)
            for a in actions
        ]  # each (N, decimation, U): the actuators are the joints, in order
        self.out_state = np.empty((n, dec, b.nstate))
        self.out_sens = np.empty((n, dec, self.model.nsensordata))
        self.models = [self.model] * n
        self.physics_steps = n * dec
        self.i = 0
        self.pause_s = 0.0
        env.close()

    def run(self, k: int) -> float:
        t = time.perf_counter()
        for _ in range(k):
            self.pool.rollout(
                self.models, self.datas, self.state, self.ctrls[self.i % len(self.ctrls)],
                nstep=self.dec, state=self.out_state, sensordata=self.out_sens, skip_checks=True,
            )
            self.state[:] = self.out_state[:, -1]
            self.i += 1
            if self.pause_s:
                end = time.perf_counter() + self.pause_s
                while time.perf_counter() < end:
                    pass
        return time.perf_counter() - t

    def close(self) -> None:
        self.pool.close()


def measure(task: str, n: int, rounds: int, steps: int) -> dict[str, list[float]]:
    """Physics steps/s of every loop, per round; all loops take turns within each round.

    Short interleaved chunks put every side of a comparison in the same spell of a shared machine.
    """
    probe = make_env(task, 1)
    a_dim = probe.action_dim
    probe.close()
    gen = torch.Generator().manual_seed(0)
    actions = 0.3 * torch.randn(16, n, a_dim, generator=gen)  # (16, N, A) cycled
    loops = {"ours": OursLoop(task, n, actions), "raw": RawLoop(task, n, actions), "paused": RawLoop(task, n, actions)}
    rates: dict[str, list[float]] = {name: [] for name in loops}
    rates["pause_ms"] = []
    ours = loops["ours"]
    for _ in range(rounds):
        for name, loop in loops.items():
            if name in ("raw", "paused"):  # step our worlds as they are (fresh or settled): the same physics
                loop.state[:] = ours.env.backend.state.numpy()
            if name == "paused":
                loop.pause_s = ours.pause_s
                rates["pause_ms"].append(ours.pause_s * 1e3)
            loop.run(max(1, steps // 5))  # untimed: the loop before it has cooled this one's caches
            rates[name].append(loop.physics_steps * steps / loop.run(steps))
    for loop in loops.values():
        loop.close()
    return rates


class WarpOursLoop:
    """Our TaskEnv on the MuJoCo Warp backend."""

    def __init__(self, task: str, n: int, actions: torch.Tensor, device: str):
        self.env = make_env(task, n, backend="mujoco_warp", device=device)
        self.env.reset()
        self.actions = [a.to(self.env.device) for a in actions]
        self.physics_steps = n * self.env.cfg.decimation
        self.i = 0

    def run(self, k: int) -> float:
        t = time.perf_counter()
        for _ in range(k):
            self.env.step(self.actions[self.i % len(self.actions)])
            self.i += 1
        _synchronize(self.env.device)
        return time.perf_counter() - t

    def close(self) -> None:
        self.env.close()


class WarpRawLoop:
    """Raw `mujoco_warp.step`, decimation calls per policy step, on its own Model and Data of the same size."""

    def __init__(self, task: str, n: int, actions: torch.Tensor, device: str):
        import mujoco_warp as mjw

        from robo_rl.sim.mujoco_warp import wp

        env = make_env(task, n, backend="mujoco_warp", device=device)  # the model, buffers, state and ctrl mapping
        b, self.dec, self.mjw, self.wp = env.backend, env.cfg.decimation, mjw, wp
        self.device = b.device
        data = mujoco.MjData(b.model)
        mujoco.mj_setState(b.model, data, b._init_state, mujoco.mjtState.mjSTATE_FULLPHYSICS)
        with wp.ScopedDevice(str(b.device)):
            self.m = mjw.put_model(b.model)
            self.d = mjw.put_data(b.model, data, nworld=n, nconmax=b._d.naconmax // n, njmax=b._d.njmax)
        self.ctrl = wp.to_torch(self.d.ctrl)
        self.ctrls = [(env.default_joint_pos.to(b.device) + env.cfg.action_scale * a.to(b.device)) for a in actions]
        self.physics_steps = n * self.dec
        self.graph = None
        if b.device.type == "cuda":
            with wp.ScopedDevice(str(b.device)), wp.ScopedCapture() as capture:
                self._steps()
            self.graph = capture.graph
        self.i = 0
        env.close()

    def _steps(self) -> None:
        for _ in range(self.dec):
            self.mjw.step(self.m, self.d)

    def run(self, k: int) -> float:
        t = time.perf_counter()
        for _ in range(k):
            self.ctrl.copy_(self.ctrls[self.i % len(self.ctrls)])  # the actuators are the joints, in order
            if self.graph is not None:
                self.wp.capture_launch(self.graph)
            else:
                self._steps()
            self.i += 1
        _synchronize(self.device)
        return time.perf_counter() - t

    def close(self) -> None:
        pass


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_warp(task: str, n: int, rounds: int, steps: int, device: str) -> dict[str, list[float]]:
    """Physics steps/s of ours and raw on MuJoCo Warp, per round, taking turns as `measure` does."""
    probe = make_env(task, 1)
    a_dim = probe.action_dim
    probe.close()
    actions = 0.3 * torch.randn(16, n, a_dim, generator=torch.Generator().manual_seed(0))  # (16, N, A)
    loops = {"ours": WarpOursLoop(task, n, actions, device), "raw": WarpRawLoop(task, n, actions, device)}
    rates: dict[str, list[float]] = {name: [] for name in loops}
    for _ in range(rounds):
        for name, loop in loops.items():
            loop.run(max(1, steps // 5))  # untimed warm-up of this loop
            rates[name].append(loop.physics_steps * steps / loop.run(steps))
    for loop in loops.values():
        loop.close()
    return rates


def ppo_env_steps_per_s(task: str, n: int, device: str, iterations: int) -> float:
    """End-to-end PPO (rollout + update) env steps/s on the Warp backend, after one untimed iteration."""
    import tempfile

    from robo_rl.learn.builders import resolve_config
    from robo_rl.learn.runner import make_runner

    cfg = resolve_config({"task": task}, [f"sim.num_envs={n}", "sim.backend=mujoco_warp", f"sim.device={device}"])
    with tempfile.TemporaryDirectory() as tmp:
        runner = make_runner(cfg, tmp)
        runner._iteration()  # compiles kernels, captures the CUDA graph
        _synchronize(torch.device(device))
        t = time.perf_counter()
        for _ in range(iterations):
            runner._iteration()
        _synchronize(torch.device(device))
        seconds = time.perf_counter() - t
        runner.close()
    return iterations * cfg.algo.num_steps_per_env * n / seconds


def main_warp(args: argparse.Namespace) -> None:
    print(f"backend mujoco_warp on {args.device}, N={args.num_envs}, cores {CORES}")
    print(f"medians over {args.rounds} rounds; in each round both loops run one chunk in turn")
    targets = []
    for task in args.tasks:
        rates = measure_warp(task, args.num_envs, args.rounds, args.steps, args.device)
        ratio = median_ratio(rates["ours"], [rates["raw"]])
        q1, _, q3 = statistics.quantiles([o / r for o, r in zip(rates["ours"], rates["raw"], strict=True)], n=4)
        print(f"\n{task}: physics steps/s (median)            ours / raw (median of per-round ratios)")
        print(f"  ours (TaskEnv on mujoco_warp)      {statistics.median(rates['ours']):>12,.0f}")
        print(f"  raw mujoco_warp.step               {statistics.median(rates['raw']):>12,.0f}   {ratio:.2f}"
              f"   (per-round ratios: middle half {q1:.2f}-{q3:.2f})")
        short = "quadruped" if task.startswith("quadruped") else "arm"
        targets.append((f"warp_env_vs_raw_step_{short}", ratio, ">=", 0.85))
    if torch.device(args.device).type == "cuda":
        rate = ppo_env_steps_per_s("quadruped-walk-flat", args.ppo_envs, args.device, args.ppo_iterations)
        print(f"\nPPO quadruped-walk-flat, {args.ppo_envs} worlds on {torch.cuda.get_device_name(args.device)}: "
              f"{rate:,.0f} env steps/s end to end")
        targets.append(("warp_ppo_quadruped_env_steps_per_s", rate, ">=", 150_000.0))
    else:
        print("\nPPO env steps/s at 4096 worlds: measured on a CUDA device only (--device cuda:0)")
    print()
    for name, value, op, goal in targets:
        print(f"TARGET {name} measured={value:.3f} goal={op}{goal:g} {'PASS' if value >= goal else 'FAIL'}")


def median_ratio(ours: list[float], others: list[list[float]]) -> float:
    """Median over rounds of ours / the fastest of `others` in the same round."""
    return statistics.median(o / max(r) for o, *r in zip(ours, *others, strict=True))


SMOKE_SIZES = {
    "mujoco_cpu": {"num_envs": 16, "steps": 2, "rounds": 2},
    "mujoco_warp": {"num_envs": 8, "steps": 1, "rounds": 2, "ppo_envs": 512, "ppo_iterations": 2},
}
"""`--smoke`: the smallest sizes per backend that run every loop (2 rounds: the spread needs two ratios)."""


def main_cpu(args: argparse.Namespace) -> None:
    """Ours vs raw `mujoco.rollout` (and raw pausing as long as ours) on each task; prints the TARGET lines."""
    print(f"cores {CORES}, torch threads {torch.get_num_threads()}, N={args.num_envs}")
    print(f"medians over {args.rounds} rounds; in each round every loop runs one chunk in turn")
    targets = []
    for task in args.tasks:
        rates = measure(task, args.num_envs, args.rounds, args.steps)
        med = {name: statistics.median(r) for name, r in rates.items()}
        vs_raw = median_ratio(rates["ours"], [rates["raw"]])
        print(f"\n{task}: physics steps/s (median)            ours / this (median of per-round ratios)")
        print(f"  ours (TaskEnv, {args.num_envs} worlds)     {med['ours']:>12,.0f}")
        q1, _, q3 = statistics.quantiles([o / r for o, r in zip(rates["ours"], rates["raw"], strict=True)], n=4)
        print(f"  raw mujoco.rollout                 {med['raw']:>12,.0f}   {vs_raw:.2f}"
              f"   (per-round ratios: middle half {q1:.2f}-{q3:.2f})")
        vs_paused = median_ratio(rates["ours"], [rates["paused"]])
        ceiling = median_ratio(rates["paused"], [rates["raw"]])
        print(f"  raw, pausing {med['pause_ms']:.2f} ms per call      {med['paused']:>12,.0f}   {vs_paused:.2f}"
              f"   (ours' time outside physics; this / raw = {ceiling:.2f})")
        short = "quadruped" if task.startswith("quadruped") else "arm"
        targets.append((f"env_vs_raw_rollout_{short}", vs_raw, ">=", 0.85))
    print()
    for name, value, op, goal in targets:
        ok = value >= goal if op == ">=" else value <= goal
        print(f"TARGET {name} measured={value:.3f} goal={op}{goal} {'PASS' if ok else 'FAIL'}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", nargs="+", default=["quadruped-walk-flat", "arm-reach"])
    p.add_argument("--num-envs", type=int, default=1024)
    p.add_argument("--steps", type=int, default=20, help="policy steps per timed chunk of the batched runs")
    p.add_argument("--rounds", type=int, default=40, help="rounds; each loop runs one timed chunk per round")
    p.add_argument("--smoke", action="store_true",
                   help="tiny sizes (SMOKE_SIZES), for a smoke test; without --backend both backends in turn")
    p.add_argument("--backend", choices=("mujoco_cpu", "mujoco_warp"), default=None, help="default: mujoco_cpu")
    p.add_argument("--device", default="cpu", help="mujoco_warp: cpu (Warp's CPU device) or cuda:N")
    p.add_argument("--ppo-envs", type=int, default=4096, help="mujoco_warp on a GPU: worlds of the PPO run")
    p.add_argument("--ppo-iterations", type=int, default=10, help="mujoco_warp on a GPU: timed PPO iterations")
    args = p.parse_args()
    backends = [args.backend] if args.backend else ["mujoco_cpu", "mujoco_warp"] if args.smoke else ["mujoco_cpu"]
    for backend in backends:
        sized = argparse.Namespace(**{**vars(args), **SMOKE_SIZES[backend]}) if args.smoke else args
        (main_warp if backend == "mujoco_warp" else main_cpu)(sized)


if __name__ == "__main__":
    main()
