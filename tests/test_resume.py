"""Killing a run with SIGKILL and resuming gives the same parameters as an uninterrupted run."""

import os
import signal
import subprocess
import sys
import time

import torch

from robo_rl.checkpoint import load_checkpoint
from tests.conftest import REPO

COMMON = [
    "train", "--task", "arm-reach", "--num-envs", "64", "--seed", "5",
    "--set", "algo.num_steps_per_env=16", "--set", "runner.save_interval=2",
    "--set", "policy.actor_hidden_dims=[32, 32]", "--set", "policy.critic_hidden_dims=[32, 32]",
]


def test_sigkill_then_resume_matches_uninterrupted_run(cli, tmp_path):
    log_dir = ["--set", f"runner.log_dir={tmp_path}"]
    full = cli(*COMMON, *log_dir, "--run-name", "full", "--max-iterations", "6")
    assert full.returncode == 0, full.stderr

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "robo_rl.cli", *COMMON, *log_dir, "--run-name", "killed", "--max-iterations", "1000"],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 300
    while not (tmp_path / "killed" / "model_000002.pt").exists():
        assert proc.poll() is None and time.time() < deadline, "run ended before its first checkpoint"
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL

    resumed = cli("train", "--resume", str(tmp_path / "killed"), "--max-iterations", "6")
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming" in resumed.stdout

    a = load_checkpoint(tmp_path / "full" / "model_000006.pt")
    b = load_checkpoint(tmp_path / "killed" / "model_000006.pt")
    assert a["iteration"] == b["iteration"] == 6
    for name, tensor in a["algo"]["policy"].items():
        assert torch.equal(tensor, b["algo"]["policy"][name]), name
    assert torch.equal(a["env"]["physics_state"], b["env"]["physics_state"])
    assert [p.name for p in (tmp_path / "killed").glob("model_*.pt")]  # only complete checkpoints carry the name
