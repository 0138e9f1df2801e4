"""Benchmark: physics steps/s of our batched env vs raw `mujoco.rollout` and vs gymnasium.

For each task, in one run and on the same model, N and decimation:
  ours       TaskEnv.step (actions -> ctrl, threaded physics, observations, rewards, auto-reset)
  raw        mujoco.rollout on a persistent thread pool, chaining the final state (no task logic)
  gymnasium  a single-world gymnasium.Env over MjData/mj_step with numpy observations and reward,
             run alone, in SyncVectorEnv and in AsyncVectorEnv; the fastest of the three counts.
Physics steps/s = worlds x policy steps x decimation / seconds. Each rate is the median over short timed
chunks; ours and raw alternate chunk by chunk and their ratio is the median of the per-pair ratios.

    python scripts/bench_sim.py                 # both tasks, N=1024
    python scripts/bench_sim.py --quick         # smaller, for a smoke test
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

# isort: off
import robo_rl  # noqa: F401  (first: its OpenMP setting must precede the torch import, as in the CLI)

# isort: on
import gymnasium as gym
import mujoco
import mujoco.rollout
import numpy as np
import torch

from robo_rl.tasks import make_env
from robo_rl.tasks.base import resolve_asset


class SingleWorldEnv(gym.Env):
    """The single-world gymnasium equivalent: one MjData, mj_step per physics step, numpy obs/reward."""

    def __init__(self, model_path: str, keyframe: str, decimation: int, episode_steps: int, physics_dt: float):
        self.model = mujoco.MjModel.from_xml_path(model_path)
        self.model.opt.timestep = physics_dt
        self.data = mujoco.MjData(self.model)
        self.key = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_KEY, keyframe)
        self.decimation = decimation
        self.episode_steps = episode_steps
        m = self.model
        obs_dim = m.nq + m.nv + m.nsensordata + m.nu
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float64)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (m.nu,), np.float32)
        self.t = 0
        self.last_action = np.zeros(m.nu)
        self.default_ctrl = None

    def _obs(self) -> np.ndarray:
        d = self.data
        return np.concatenate([d.qpos, d.qvel, d.sensordata, self.last_action])

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        mujoco.mj_resetDataKeyframe(self.model, self.data, self.key)
        if self.default_ctrl is None:
            self.default_ctrl = self.data.ctrl.copy()
        self.t = 0
        self.last_action[:] = 0
        return self._obs(), {}

    def step(self, action):
        d = self.data
        d.ctrl[:] = self.default_ctrl + 0.25 * action
        for _ in range(self.decimation):
            mujoco.mj_step(self.model, d)
        reward = -float(np.square(action - self.last_action).sum()) - float(np.square(d.qvel).sum()) * 1e-3
        self.last_action[:] = action
        self.t += 1
        return self._obs(), reward, False, self.t >= self.episode_steps, {}


class OursLoop:
    """Our TaskEnv: actions -> ctrl, threaded physics, observations, rewards, auto-reset."""

    def __init__(self, task: str, n: int, actions: torch.Tensor):
        self.env = make_env(task, n)
        self.env.reset()
        self.actions = actions
        self.physics_steps = n * self.env.cfg.decimation  # per policy step
        self.i = 0

    def run(self, k: int) -> float:
        """Seconds for k policy steps."""
        t = time.perf_counter()
        for _ in range(k):
            self.env.step(self.actions[self.i % len(self.actions)])
            self.i += 1
        return time.perf_counter() - t

    def close(self) -> None:
        self.env.close()


class RawLoop:
    """Raw mujoco.rollout on a persistent pool, same model, N, initial state, ctrl and decimation."""

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
        return time.perf_counter() - t

    def close(self) -> None:
        self.pool.close()


def paired_rates(task: str, n: int, rounds: int, steps: int, actions: torch.Tensor) -> tuple[float, float, float]:
    """Median physics steps/s of ours and raw, and the median of their per-round ratios.

    The two alternate in short chunks, so a slow spell of the shared machine hits both sides of
    a pair; the median over pairs drops the pairs it hit unevenly.
    """
    ours, raw = OursLoop(task, n, actions), RawLoop(task, n, actions)
    ours.run(5)
    raw.run(5)
    ours_rates, raw_rates = [], []
    for _ in range(rounds):
        ours_rates.append(ours.physics_steps * steps / ours.run(steps))
        raw_rates.append(raw.physics_steps * steps / raw.run(steps))
    ours.close()
    raw.close()
    ratios = [o / r for o, r in zip(ours_rates, raw_rates, strict=True)]
    return statistics.median(ours_rates), statistics.median(raw_rates), statistics.median(ratios)


def bench_gym(task: str, rounds: int, steps: int, actions: np.ndarray) -> dict[str, float]:
    """Median physics steps/s over `rounds` chunks of `steps` policy steps, for each gymnasium variant."""
    env = make_env(task, 1)
    cfg = env.cfg
    args = (str(resolve_asset(cfg.model)), env.keyframe, cfg.decimation, env.max_episode_length, cfg.physics_dt)
    env.close()
    cores = os.cpu_count() or 1
    out = {}

    single = SingleWorldEnv(*args)
    single.reset(seed=0)
    rates, i = [], 0
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(steps):
            _, _, term, trunc, _ = single.step(actions[i % len(actions), 0])
            i += 1
            if term or trunc:
                single.reset()
        rates.append(steps * cfg.decimation / (time.perf_counter() - t))
    out["single"] = statistics.median(rates)

    for name, cls, num in (("sync", gym.vector.SyncVectorEnv, 8), ("async", gym.vector.AsyncVectorEnv, cores)):
        venv = cls([lambda: SingleWorldEnv(*args) for _ in range(num)])
        venv.reset(seed=0)
        k = max(1, steps // num)
        for i in range(3):
            venv.step(actions[i % len(actions), :num])
        rates = []
        for _ in range(rounds):
            t = time.perf_counter()
            for i in range(k):
                venv.step(actions[i % len(actions), :num])
            rates.append(num * k * cfg.decimation / (time.perf_counter() - t))
        out[name] = statistics.median(rates)
        venv.close()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", nargs="+", default=["quadruped-walk-flat", "arm-reach"])
    p.add_argument("--num-envs", type=int, default=1024)
    p.add_argument("--steps", type=int, default=20, help="policy steps per timed chunk of the batched runs")
    p.add_argument("--rounds", type=int, default=15, help="chunks timed per run (ours and raw alternate)")
    p.add_argument("--gym-steps", type=int, default=1000, help="policy steps per timed chunk of the gymnasium runs")
    p.add_argument("--quick", action="store_true", help="N=256, fewer chunks, for a smoke test")
    args = p.parse_args()
    if args.quick:
        args.num_envs, args.steps, args.gym_steps, args.rounds = 256, 10, 200, 3

    print(f"cores {os.cpu_count()}, torch threads {torch.get_num_threads()}, N={args.num_envs}")
    print(f"medians over {args.rounds} chunks; ours and raw alternate chunk by chunk")
    targets = []
    for task in args.tasks:
        probe = make_env(task, 1)
        a_dim = probe.action_dim
        probe.close()
        gen = torch.Generator().manual_seed(0)
        actions = 0.3 * torch.randn(16, args.num_envs, a_dim, generator=gen)  # (16, N, A) cycled
        ours, raw, ours_vs_raw = paired_rates(task, args.num_envs, args.rounds, args.steps, actions)
        gym_rates = bench_gym(task, args.rounds, args.gym_steps, actions[:, :8].numpy())
        best_gym_name = max(gym_rates, key=gym_rates.get)
        best_gym = gym_rates[best_gym_name]
        print(f"\n{task}: physics steps/s")
        print(f"  ours (TaskEnv, {args.num_envs} worlds)     {ours:>12,.0f}")
        print(f"  raw mujoco.rollout                 {raw:>12,.0f}   ours/raw = {ours_vs_raw:.2f} (median of pairs)")
        for name, rate in gym_rates.items():
            print(f"  gymnasium {name:<6}                   {rate:>12,.0f}   ours/this = {ours / rate:.2f}")
        short = "quadruped" if task.startswith("quadruped") else "arm"
        targets.append((f"env_vs_raw_rollout_{short}", ours_vs_raw, ">=", 0.85))
        targets.append((f"env_vs_gymnasium_{short}", ours / best_gym, ">=", 2.0))
    print()
    for name, value, op, goal in targets:
        ok = value >= goal if op == ">=" else value <= goal
        print(f"TARGET {name} measured={value:.2f} goal={op}{goal} {'PASS' if ok else 'FAIL'}")


if __name__ == "__main__":
    main()
