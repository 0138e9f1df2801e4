"""Killing a run with SIGKILL and resuming gives the same parameters as an uninterrupted run."""

import os
import subprocess
import sys
import time

import torch

from robo_rl.learn.checkpoint import load_checkpoint
from tests.conftest import REPO, sigkill_then_resume

COMMON = [
    "train", "--task", "arm-reach", "--num-envs", "64", "--seed", "5",
    "--set", "algo.num_steps_per_env=16", "--set", "runner.save_interval=2",
    "--set", "policy.actor_hidden_dims=[32, 32]", "--set", "policy.critic_hidden_dims=[32, 32]",
]


def test_sigkill_then_resume_matches_uninterrupted_run(cli, tmp_path):
    resumed = sigkill_then_resume(cli, tmp_path, COMMON)
    assert "resuming" in resumed.stdout

    a = load_checkpoint(tmp_path / "full" / "model_000006.pt")
    b = load_checkpoint(tmp_path / "killed" / "model_000006.pt")
    assert a["iteration"] == b["iteration"] == 6
    for name, tensor in a["algo"]["policy"].items():
        assert torch.equal(tensor, b["algo"]["policy"][name]), name
    assert torch.equal(a["env"]["physics_state"], b["env"]["physics_state"])
    assert [p.name for p in (tmp_path / "killed").glob("model_*.pt")]  # only complete checkpoints carry the name


TINY = ["--num-envs", "4", "--set", "algo.num_steps_per_env=4", "--set", "runner.eval_episodes=0",
        "--set", "runner.progress_bar=false", "--set", "policy.actor_hidden_dims=[8]",
        "--set", "policy.critic_hidden_dims=[8]"]


def test_resume_with_other_num_envs_is_refused_before_writing(cli, tmp_path):
    first = cli("train", "--task", "arm-reach", *TINY, "--max-iterations", "1", "--run-name", "r",
                "--set", f"runner.log_dir={tmp_path}")
    assert first.returncode == 0, first.stderr
    run = tmp_path / "r"
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    result = cli("train", "--resume", str(run), "--num-envs", "8", "--max-iterations", "2")
    assert result.returncode == 2 and "cannot change sim.num_envs (4 -> 8)" in result.stderr, result.stderr
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before  # config.yaml byte-identical, nothing added


def test_second_resume_of_a_live_run_is_refused(cli, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    run = tmp_path / "live"
    proc = subprocess.Popen(
        [sys.executable, "-m", "robo_rl.cli", "train", "--task", "arm-reach", *TINY, "--run-name", "live",
         "--set", f"runner.log_dir={tmp_path}", "--max-iterations", "1000000", "--set", "runner.save_interval=1000"],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.time() + 120
        while not ((run / "config.yaml").exists() and (run / ".lock").exists()
                   and (run / ".lock").read_text().strip() == str(proc.pid)):
            assert proc.poll() is None and time.time() < deadline, "training did not start"
            time.sleep(0.05)
        config = (run / "config.yaml").read_bytes()
        second = cli("train", "--resume", str(run), "--max-iterations", "2000000")
        assert second.returncode == 2, second.stderr
        assert f"is in use by another process (pid {proc.pid})" in second.stderr
        assert "Traceback" not in second.stderr and second.stderr.count("\n") == 1
        assert (run / "config.yaml").read_bytes() == config
        assert proc.poll() is None  # the live run goes on
    finally:
        proc.kill()
        proc.wait()
    # the kernel dropped the lock with the process: the run resumes (here without further iterations)
    after = cli("train", "--resume", str(run), "--max-iterations", "1")
    assert after.returncode == 0, after.stderr
