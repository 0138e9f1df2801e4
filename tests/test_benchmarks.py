"""The benchmark scripts run and end with well-formed TARGET lines (their numbers are not asserted)."""

import os
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO

TARGET = re.compile(r"^TARGET \w+ measured=[-\d.]+ goal=(>=|<=|>|<)[\d.]+ (PASS|FAIL)$")


@pytest.mark.slow
@pytest.mark.parametrize(
    "script, args, expected",
    [
        ("bench_sim.py", ["--quick", "--tasks", "arm-reach"], 1),  # ours vs raw mujoco.rollout
        ("bench_sim.py", ["--quick", "--backend", "mujoco_warp"], 2),  # ours vs raw mujoco_warp.step, both tasks
        ("bench_ppo.py", ["--quick"], 2),  # update time and learning
        ("bench_render.py", ["--quick", "--variants"], 1),
        ("bench_gym_reference.py", ["--quick"], 1),  # our PPO on Hopper-v5 vs RL Zoo
        ("bench_gym_reference.py", ["--quick", "--impl", "sb3"], 1),  # SB3's PPO from the same config
        ("bench_sac.py", ["--quick", "--sb3-max-s", "5"], 2),  # our SAC vs SB3's: Pendulum, arm-reach
        ("bench_rlpd.py", ["--quick"], 1),  # RLPD vs SAC on arm-pick-place
        ("bench_sac_locomotion.py", ["--quick"], 0),  # SAC beside PPO on quadruped-walk-flat (no target)
        ("bench_demos.py", ["--quick"], 2),  # 50 Hz recording with two cameras: drops, save blocking
        ("bench_reinflow.py", ["--quick"], 2),  # flow-bc then ReinFlow on arm-pick-place, K = 4 and K = 1
    ],
)
def test_benchmark_prints_targets(script, args, expected):
    env = {**os.environ, "PYTHONPATH": str(REPO)}  # this checkout's robo_rl, as tests.conftest.run_cli does
    out = subprocess.run(
        [sys.executable, str(REPO / "scripts" / script), *args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=900,
    )
    assert out.returncode == 0, out.stderr
    targets = [line for line in out.stdout.splitlines() if line.startswith("TARGET")]
    assert len(targets) == expected and all(TARGET.match(t) for t in targets), targets
