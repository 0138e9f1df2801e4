"""The benchmark scripts run and end with well-formed TARGET lines (their numbers are not asserted)."""

import os
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO

TARGET = re.compile(r"^TARGET \w+ measured=[-\d.]+ goal=(>=|<=|>|<)[\d.]+ (PASS|FAIL)$")


SMOKE_RUNS = [  # (script, arguments, how many TARGET lines it prints)
    ("bench_sim.py", ["--smoke"], 4),  # both tasks: ours vs raw mujoco.rollout, then vs raw mujoco_warp.step
    ("bench_ppo.py", ["--smoke"], 2),  # update time and learning
    ("bench_render.py", ["--smoke", "--variants"], 1),
    ("bench_gym_reference.py", ["--smoke"], 2),  # our PPO, then SB3's from the same config, on Hopper-v5 vs RL Zoo
    ("bench_sac.py", ["--smoke"], 2),  # our SAC vs SB3's: Pendulum, arm-reach
    ("bench_rlpd.py", ["--smoke"], 1),  # RLPD vs SAC on arm-pick-place
    ("bench_sac_locomotion.py", ["--smoke"], 2),  # SAC beside PPO on quadruped-walk-flat: PPO walks; terrain level
    ("bench_demos.py", ["--smoke"], 2),  # 50 Hz recording with two cameras: drops, save blocking
    ("bench_reinflow.py", ["--smoke"], 2),  # flow-bc then ReinFlow on arm-pick-place, K = 4 and K = 1
    ("bench_vla.py", ["--smoke"], 9),  # VLA SFT, Flow-SDE PPO, Flow-Noise PPO, GRPO: gains, held-out gaps; twin; memory
    ("bench_distributed.py", ["--smoke"], 3),  # 2 ranks under torchrun vs one process on arm-reach; flat vs DDP sync
    ("bench_time_to_walk.py", ["--smoke", "--seeds", "0"], 4),  # Go2 time to walk, evaluation, vs rsl-rl-lib, deployed
    ("bench_reward_classifier.py", ["--smoke"], 1),  # held-out accuracy of the reward classifier, arm-pick-place-vision
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
@pytest.mark.parametrize(("script", "args", "expected"), SMOKE_RUNS, ids=[" ".join([s, *a]) for s, a, _ in SMOKE_RUNS])
def test_benchmark_smoke_run_prints_its_targets(script, args, expected):
    """The benchmark's `--smoke` run (tiny sizes) exits 0 and ends with its well-formed TARGET lines (the full runs,
    and their numbers, are for docs/benchmarks.md)."""
    problems = smoke_run_problems(script, args, expected)
    assert not problems, "\n".join(problems)


def test_profile_iteration_splits_an_iteration_into_its_parts():
    """scripts/profile_iteration.py --smoke: every part of the iteration has its row, and they account for it."""
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "profile_iteration.py"), "--smoke"], cwd=REPO,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    total = float(re.search(r"16 worlds: ([0-9.]+) ms per iteration", out.stdout).group(1))
    rows = dict(re.findall(r"^  (\w+) +([0-9.]+) ms", out.stdout, flags=re.M))
    assert list(rows) == ["physics", "actions", "task", "policy", "storage", "returns", "update", "loop"]
    assert float(rows["physics"]) > 0 and float(rows["update"]) > 0
    assert sum(float(v) for v in rows.values()) == pytest.approx(total, rel=0.05, abs=1.0)


def test_a_walking_go2_policy_rehearses_on_the_twin_within_noise_of_its_training_error():
    """bench_time_to_walk's rehearsal (export -> RobotEnv on the Go2 twin: deploy core, safety filter, robot-side base
    velocity estimate) on the shipped walking policy: its planar error there is its training evaluation's within
    0.05 m/s (measured 0.045 vs 0.052). The benchmark runs the same function on the policy it trains."""
    import importlib.util
    import json

    spec = importlib.util.spec_from_file_location("bench_time_to_walk", REPO / "scripts" / "bench_time_to_walk.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    trained = json.loads((REPO / "policies" / "go2_walk.json").read_text())["extra"]["train_eval"]["lin_vel_error"]
    deployed = bench.deploy_error(REPO / "policies" / "go2_walk.onnx", commands=4, seconds=3.0)
    assert abs(deployed - trained) < 0.05, (deployed, trained)
