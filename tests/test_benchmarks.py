"""The benchmark scripts run and end with well-formed TARGET lines (their numbers are not asserted)."""

import os
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO

TARGET = re.compile(r"^TARGET \w+ measured=[-\d.]+ goal=(>=|<=|>|<)[\d.]+ (PASS|FAIL)$")


SMOKE_RUNS = [  # (script, arguments, how many TARGET lines it prints)
    ("bench_sim.py", ["--smoke", "--tasks", "arm-reach"], 2),
    ("bench_sim.py", ["--smoke", "--backend", "mujoco_warp"], 2),  # ours vs raw mujoco_warp.step, both tasks
    ("bench_ppo.py", ["--smoke"], 2),  # update time and learning
    ("bench_render.py", ["--smoke", "--variants"], 1),
    ("bench_gym_reference.py", ["--smoke"], 1),  # our PPO on Hopper-v5 vs RL Zoo
    ("bench_gym_reference.py", ["--smoke", "--impl", "sb3"], 1),  # SB3's PPO from the same config
    ("bench_sac.py", ["--smoke", "--sb3-max-s", "5"], 2),  # our SAC vs SB3's: Pendulum, arm-reach
    ("bench_rlpd.py", ["--smoke"], 1),  # RLPD vs SAC on arm-pick-place
    ("bench_sac_locomotion.py", ["--smoke"], 0),  # SAC beside PPO on quadruped-walk-flat (no target)
    ("bench_demos.py", ["--smoke"], 2),  # 50 Hz recording with two cameras: drops, save blocking
    ("bench_reinflow.py", ["--smoke"], 2),  # flow-bc then ReinFlow on arm-pick-place, K = 4 and K = 1
]
"""bench_adapter's smoke run is in mjlab's venv (tests/adapters/test_mjlab_venv.py); bench_deploy times real-time
loops and DDS on a quiet machine and was never part of this test."""


def smoke_run_problems(script: str, args: list[str], expected: int) -> list[str]:
    """What is wrong with `scripts/<script> ARGS` (exit status, TARGET lines); empty when it ran as it should."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}  # this checkout's robo_rl, as tests.conftest.run_cli does
    name = " ".join([script, *args])
    try:
        out = subprocess.run(
            [sys.executable, str(REPO / "scripts" / script), *args],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=900,
        )
    except subprocess.TimeoutExpired:
        return [f"{name}: still running after 900 s"]
    if out.returncode != 0:
        return [f"{name}: exit status {out.returncode}: {out.stderr[-2000:]}"]
    targets = [line for line in out.stdout.splitlines() if line.startswith("TARGET")]
    if len(targets) != expected or not all(TARGET.match(t) for t in targets):
        return [f"{name}: expected {expected} well-formed TARGET lines, got {targets}"]
    return []


@pytest.mark.slow
def test_every_benchmark_smoke_run_prints_its_targets():
    """Each benchmark's `--smoke` run (tiny sizes) exits 0 and ends with its well-formed TARGET lines: one test, the
    scripts one after the other (the full runs, and their numbers, are for docs/benchmarks.md)."""
    problems = [p for script, args, expected in SMOKE_RUNS for p in smoke_run_problems(script, args, expected)]
    assert not problems, "\n".join(problems)


def _single_world_envs():
    """scripts/single_world_envs.py, the gymnasium side of bench_sim."""
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import single_world_envs
    finally:
        sys.path.remove(str(REPO / "scripts"))
    return single_world_envs


def _copy_world(env, single, i: int) -> None:
    """Put world i of our TaskEnv into the single-world env: physics, targets, command or target."""
    import mujoco

    d = single.data
    mujoco.mj_setState(single.model, d, env.backend.state[i].numpy(), mujoco.mjtState.mjSTATE_FULLPHYSICS)
    d.ctrl[:] = env.backend.ctrl[i].numpy()
    if hasattr(env, "command"):
        single.command[:] = env.command[i].double().numpy()
        single.command_time = float(env.command_time[i])
    else:
        single.target[:] = env.target[i].double().numpy()
        d.mocap_pos[0] = single.target
    mujoco.mj_forward(single.model, d)
    if hasattr(single, "_base_frame"):
        single._base_frame()


@pytest.mark.parametrize("task", ["quadruped-walk-flat", "arm-reach"])
def test_single_world_env_matches_our_env(task):
    """bench_sim's gymnasium env does our task's work: equal observations, rewards and terminations
    when stepped from the same world with the same actions (so the benchmark compares equal work)."""
    import torch

    from robo_rl.tasks import make_env

    sw = _single_world_envs()
    spec = sw.task_spec(task)
    env = make_env(task, 3, seed=4)
    env.reset(random_start=False)
    i = 1
    single = sw.make_single(spec)
    single.reset(seed=0)
    _copy_world(env, single, i)
    gen = torch.Generator().manual_seed(0)
    rewards = []
    for _ in range(40):
        actions = 0.5 * torch.randn(3, env.action_dim, generator=gen)
        obs, reward, terminated, truncated, _ = env.step(actions)
        s_obs, s_reward, s_term, s_trunc, _ = single.step(actions[i].double().numpy())
        assert not terminated[i] and not truncated[i]  # a run that stays inside one episode
        assert (s_term, s_trunc) == (False, False)
        torch.testing.assert_close(torch.from_numpy(s_obs), obs["critic"][i], atol=2e-3, rtol=1e-3)
        rewards.append((s_reward, float(reward[i])))
    s_rewards, our_rewards = torch.tensor(rewards).T
    torch.testing.assert_close(s_rewards, our_rewards, atol=1e-4, rtol=1e-3)
    assert s_rewards.std() > 1e-4  # the rewards vary, so equality is a real check
    env.close()


@pytest.mark.parametrize("task", ["quadruped-walk-flat", "arm-reach"])
def test_single_world_env_resets_like_our_env(task):
    """Starts drawn by the single-world env's reset follow the task's reset distribution (per-column
    mean and spread of the first observation over 256 resets)."""
    import numpy as np

    from robo_rl.tasks import make_env

    sw = _single_world_envs()
    single = sw.make_single(sw.task_spec(task))
    env = make_env(task, 256, seed=0)
    env.reset(random_start=False)
    ours = env.get_observations()["critic"].numpy()  # (256, O_c)
    starts = np.stack([single.reset(seed=k)[0] for k in range(256)])  # (256, O_c)
    spread = ours.std(0)  # (O_c,)
    np.testing.assert_allclose(starts.std(0), spread, rtol=0.25, atol=1e-6)
    np.testing.assert_array_less(np.abs(starts.mean(0) - ours.mean(0)), 0.3 * spread + 1e-6)
    env.close()
