"""Data-parallel training under torchrun (gloo on loopback, 2 ranks on this CPU): the ranks' updates equal one process
updating on their data put together, only rank 0 writes, a lost rank ends the job with one line, SIGTERM leaves the
last checkpoint whole, and a run resumes with as many or with another number of ranks."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from robo_rl.core.config import ConfigError
from robo_rl.learn import distributed
from robo_rl.learn.algorithm_registry import ALGORITHMS, EnvSpec
from robo_rl.learn.algorithms.ppo import normalize_advantages
from robo_rl.learn.builders import resolve_config
from robo_rl.learn.checkpoint import latest_checkpoint, load_run_checkpoint
from robo_rl.learn.networks.normalizer import EmpiricalNormalization
from robo_rl.learn.runner import rank_config
from tests.learn import distributed_checks as checks

REPO = Path(__file__).resolve().parents[2]
CHECKS = Path(checks.__file__)
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
"""torchrun on this machine: its store binds a free localhost port itself (no race with concurrent jobs)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def loopback_env(**extra: str) -> dict[str, str]:
    """The environment of a rank: gloo on the loopback interface, one torch thread, the checkout importable."""
    return {**os.environ, "PYTHONPATH": str(REPO), "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1", **extra}


def torchrun(*args: str, cwd: Path, timeout: float = 300, **popen: object) -> subprocess.CompletedProcess:
    cmd = [*TORCHRUN, *args]
    return subprocess.run(cmd, cwd=cwd, env=loopback_env(), capture_output=True, text=True, timeout=timeout)


def failed(done: subprocess.CompletedProcess) -> str:
    """What a failed torchrun printed: its ranks' own errors come first, torchrun's summary last."""
    return f"exit {done.returncode}\n{done.stderr[:3000]}\n[...]\n{done.stderr[-1500:]}"


def run_checks(mode: str, tmp_path: Path, *extra: str) -> list[dict]:
    done = torchrun(str(CHECKS), mode, str(tmp_path), *extra, cwd=tmp_path)
    assert done.returncode == 0, failed(done)
    return [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(2)]


def start_rank(rank: int, port: int, cwd: Path, *train_args: str) -> subprocess.Popen:
    """One rank of a 2-rank `robo-rl train --distributed`, started the way torchrun starts it (its variables)."""
    env = loopback_env(RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2",
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    return subprocess.Popen([sys.executable, "-m", "robo_rl.cli", "train", "--distributed", *train_args], cwd=cwd,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def assert_close_states(a: dict, b: dict, atol: float = 1e-5) -> None:
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=atol, rtol=1e-4, msg=key)


# ------------------------------------------------------------------------------------------------ single process
def test_rank_config_splits_worlds_seeds_and_threads():
    cfg = resolve_config({"task": "arm-reach"}, ["sim.num_envs=12", "seed=5"])
    assert rank_config(cfg, distributed.World()) is cfg
    r1 = rank_config(cfg, distributed.World(rank=1, size=3, local_rank=1, local_size=3))
    assert (r1.sim.num_envs, r1.seed) == (4, 5 + distributed.RANK_SEED_STRIDE)
    assert r1.sim.num_threads == max(1, len(os.sched_getaffinity(0)) // 3)
    assert rank_config(cfg, distributed.World(rank=0, size=3, local_size=3)).seed == 5  # rank 0 keeps the seed
    assert distributed.rank_device("cuda", 3) == "cuda:3" and distributed.rank_device("cpu", 3) == "cpu"
    with pytest.raises(ConfigError, match="sim.num_envs = 12 does not split evenly over 5 ranks"):
        rank_config(cfg, distributed.World(rank=0, size=5))


def test_helpers_are_the_identity_in_one_process():
    x = torch.randn(9, 3)
    n, mean, var = distributed.moments(x)
    assert n == 9
    torch.testing.assert_close(mean, x.mean(0))
    torch.testing.assert_close(var, x.var(0, unbiased=False))
    assert distributed.mean(0.25) == 0.25 and distributed.any_rank(True) and not distributed.any_rank(False)
    net = torch.nn.Linear(3, 1)
    net(x).sum().backward()
    grad = net.weight.grad.clone()
    distributed.all_reduce_gradients(net.parameters())
    assert torch.equal(net.weight.grad, grad)


def test_distributed_without_torchrun_is_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in distributed.TORCHRUN_VARIABLES}
    done = subprocess.run([sys.executable, "-m", "robo_rl.cli", "train", "--task", "arm-reach", "--distributed"],
                          cwd=tmp_path, env={**env, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "robo-rl: --distributed runs under torchrun (e.g. `torchrun --nproc_per_node=2 -m robo_rl.cli train ... "
        "--distributed`); RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT not set"]
    assert not any(tmp_path.iterdir())


# ------------------------------------------------------------------------------------------------ under torchrun
def test_collectives_equal_one_process_on_the_concatenated_data(tmp_path):
    ranks = run_checks("collectives", tmp_path)
    single = EmpiricalNormalization(4)
    for step in range(3):
        single.update(torch.cat([r["batches"][step] for r in ranks]))
    for r in ranks:  # the normaliser's statistics are those of the concatenated data, on every rank
        torch.testing.assert_close(r["mean"], single.mean, atol=1e-6, rtol=1e-6)
        torch.testing.assert_close(r["var"], single.var, atol=1e-5, rtol=1e-5)
        assert int(r["count"]) == int(single.count) == sum(len(b) for q in ranks for b in q["batches"])
    adv = torch.cat([r["adv"] for r in ranks])
    torch.testing.assert_close(torch.cat([r["adv_normalized"] for r in ranks]), normalize_advantages(adv),
                               atol=1e-6, rtol=1e-6)
    # without the merge each rank's half would have mean 0 on its own; the whole batch's mean differs on each half
    assert abs(float(ranks[1]["adv_normalized"].mean())) > 0.5
    for a, b in zip(ranks[0]["grad"], ranks[1]["grad"], strict=True):
        assert torch.equal(a, b)  # every rank applies the same gradient
    mean_grads = [(g0 + g1) / 2 for g0, g1 in zip(ranks[0]["local_grad"], ranks[1]["local_grad"], strict=True)]
    for got, want in zip(ranks[0]["grad"], mean_grads, strict=True):
        torch.testing.assert_close(got, want, atol=1e-7, rtol=1e-6)
    assert [r["kl_mean"] for r in ranks] == [1.5, 1.5]
    assert [r["any"] for r in ranks] == [True, True] and [r["none"] for r in ranks] == [False, False]


def test_ppo_iteration_equals_one_process_update_on_the_concatenated_batch(tmp_path):
    ranks = run_checks("ppo", tmp_path)
    assert_close_states(ranks[0]["initial"], ranks[1]["initial"], atol=0)  # rank 0's networks were broadcast
    for key, value in ranks[0]["final"].items():
        assert torch.equal(value, ranks[1]["final"][key]), key  # the ranks stay identical
    # one process: the same networks and normaliser, the ranks' rollouts side by side (T, 8 + 8)
    entry = ALGORITHMS.get("ppo")
    cfg = resolve_config({"task": "arm-reach"}, ["algo.num_steps_per_env=6", "algo.num_learning_epochs=3",
                                                 "algo.num_mini_batches=1"])
    storage = {k: torch.cat([r["storage"][k] for r in ranks], dim=1) for k in ranks[0]["storage"]}
    obs_dim, critic_dim, action_dim = storage["obs"].shape[-1], storage["critic_obs"].shape[-1], \
        storage["actions"].shape[-1]
    spec = EnvSpec(num_envs=16, obs_dim=obs_dim, critic_obs_dim=critic_dim, action_dim=action_dim, action_clip=None)
    policy = entry.build_policy(cfg.policy, spec)
    policy.load_state_dict(ranks[0]["before_update"])
    for r in ranks:  # the normaliser's statistics were merged while collecting
        assert_close_states(r["before_update"], ranks[0]["before_update"], atol=0)
    algo = entry.build(cfg.algo, policy, spec, torch.Generator())
    for key, value in storage.items():
        setattr(algo.storage, key, value.clone())
    algo.compute_returns(torch.cat([r["last_critic_obs"] for r in ranks]))
    algo.update()
    assert_close_states(policy.state_dict(), ranks[0]["final"], atol=2e-5)
    assert algo.learning_rate == pytest.approx(ranks[0]["learning_rate"])
    moved = max(float((ranks[0]["final"][k] - ranks[0]["initial"][k]).abs().max()) for k in ranks[0]["final"])
    assert moved > 1e-3  # the update did something to compare


def test_sac_update_equals_one_process_update_on_the_concatenated_batch(tmp_path):
    ranks = run_checks("sac", tmp_path)
    for key, value in ranks[0]["final"].items():
        assert torch.equal(value, ranks[1]["final"][key]), key
    batch = {k: torch.cat([r["batch"][k] for r in ranks]) for k in ranks[0]["batch"]}
    algo = checks.build_sac(batch, 5, 2)
    algo.policy.load_state_dict(ranks[0]["initial"])
    algo.update()
    assert_close_states(algo.policy.state_dict(), ranks[0]["final"], atol=2e-6)
    changed = [k for k in ranks[0]["final"] if not torch.equal(ranks[0]["final"][k], ranks[0]["initial"][k])]
    assert any(k.startswith("actor.") for k in changed) and any(k.startswith("critic.") for k in changed)
    assert "log_alpha" in changed


def test_every_learner_keeps_the_ranks_networks_equal(tmp_path):
    """PPO with several minibatches, BC, flow-BC and ReinFlow: each rank samples its own minibatches (and worlds), yet
    the ranks' networks are bitwise equal after training, and training moved them."""
    from tests.conftest import run_cli

    demos = tmp_path / "demos"
    done = run_cli("record", "--task", "arm-reach", "--expert", "--episodes", "4", "--num-envs", "4", "--out",
                   str(demos), cwd=tmp_path)
    assert done.returncode == 0, failed(done)
    ranks = run_checks("learners", tmp_path, str(demos))
    assert list(ranks[0]) == ["ppo", "bc", "flow-bc", "reinflow"]
    for algo, result in ranks[0].items():
        for key, value in result["final"].items():
            assert torch.equal(value, ranks[1][algo]["final"][key]), (algo, key)
        assert any(not torch.equal(v, result["initial"][k]) for k, v in result["final"].items()), algo


def test_the_vla_learners_keep_the_ranks_networks_equal(tmp_path):
    """vla-sft on a camera dataset, then vla-rl (Flow-SDE PPO) from it, 2 ranks of 2 worlds each."""
    from robo_rl.demos.sim_record import record_expert

    record_expert("arm-pick-place-vision", 2, tmp_path / "ds", num_envs=2, cameras=("scene",))
    ranks = run_checks("vla", tmp_path, str(tmp_path / "ds"))
    for algo, result in ranks[0].items():
        for key, value in result["final"].items():
            assert torch.equal(value, ranks[1][algo]["final"][key]), (algo, key)
        assert any(not torch.equal(v, result["initial"][k]) for k, v in result["final"].items()), algo


def test_only_rank_0_writes_and_a_resume_with_as_many_ranks_is_exact(tmp_path):
    """Each rank runs in its own folder: rank 1's stays empty. Two iterations in one go equal one, then a resume."""
    args = ("--task", "arm-reach", "--num-envs", "16", "--set", "runner.eval_episodes=0", "--set",
            "runner.save_interval=1", "--set", "algo.num_steps_per_env=4")
    folders = {name: tmp_path / name for name in ("straight0", "straight1", "split0", "split1")}
    for folder in folders.values():
        folder.mkdir()

    def run(prefix: str, *extra: str) -> None:
        port = free_port()
        procs = [start_rank(r, port, folders[f"{prefix}{r}"], *args, *extra) for r in range(2)]
        outs = [p.communicate(timeout=300) for p in procs]
        for p, (_, err) in zip(procs, outs, strict=True):
            assert p.returncode == 0, err[-2000:]
        assert outs[1] == ("", "")  # rank 1 prints nothing

    run("straight", "--max-iterations", "2", "--run-name", "r")
    run("split", "--max-iterations", "1", "--run-name", "r")
    run("split", "--max-iterations", "2", "--resume", "r")
    assert not any(folders["straight1"].iterdir()) and not any(folders["split1"].iterdir())
    files = sorted(p.name for p in (folders["straight0"] / "runs" / "r").iterdir())
    assert [f for f in files if f.startswith("events")] and "model_000002.pt" in files
    straight = load_run_checkpoint(folders["straight0"] / "runs" / "r" / "model_000002.pt")
    split = load_run_checkpoint(folders["split0"] / "runs" / "r" / "model_000002.pt")
    assert straight["world_size"] == 2 and len(straight["rank_states"]) == 1
    for key, value in straight["algo"]["policy"].items():
        assert torch.equal(value, split["algo"]["policy"][key]), key
    assert torch.equal(straight["rank_states"][0]["episode_return"], split["rank_states"][0]["episode_return"])


def test_resume_with_another_number_of_ranks(tmp_path):
    """A 2-rank run continues in one process (its worlds restart, a note says so), and the other way round; worlds
    that do not split over the ranks are refused with one line before anything is written."""
    from tests.conftest import run_cli

    common = ("--set", "runner.eval_episodes=0", "--set", "algo.num_steps_per_env=4")
    done = torchrun("-m", "robo_rl.cli", "train", "--distributed", "--task", "arm-reach", "--num-envs", "8",
                    "--max-iterations", "1", "--run-name", "two", *common, cwd=tmp_path)
    assert done.returncode == 0, failed(done)
    one = run_cli("train", "--resume", "two", "--max-iterations", "2", cwd=tmp_path)
    assert one.returncode == 0, one.stderr[-2000:]
    assert "note: the checkpoint was written by 2 rank(s), this run has 1" in one.stdout
    back = torchrun("-m", "robo_rl.cli", "train", "--distributed", "--resume", "two", "--max-iterations", "3",
                    cwd=tmp_path)
    assert back.returncode == 0, failed(back)
    assert "note: the checkpoint was written by 1 rank(s), this run has 2" in back.stdout
    assert latest_checkpoint(tmp_path / "runs" / "two").name == "model_000003.pt"
    odd = run_cli("train", "--task", "arm-reach", "--num-envs", "9", "--max-iterations", "1", "--run-name", "odd",
                  *common, cwd=tmp_path)
    assert odd.returncode == 0, odd.stderr[-2000:]
    before = sorted(p.name for p in (tmp_path / "runs" / "odd").iterdir())
    refused = torchrun("-m", "robo_rl.cli", "train", "--distributed", "--resume", "odd", "--max-iterations", "2",
                       cwd=tmp_path)
    assert refused.returncode != 0
    lines = [ln for ln in refused.stderr.splitlines() if ln.startswith("robo-rl:")]
    assert lines == ["robo-rl: config error: sim.num_envs = 9 does not split evenly over 2 ranks; use a multiple "
                     "of 2"]
    assert sorted(p.name for p in (tmp_path / "runs" / "odd").iterdir()) == before


@pytest.mark.parametrize("how", ["killed", "stalled"])
def test_a_lost_rank_ends_the_job_with_one_line(tmp_path, how):
    """Rank 1 is killed (SIGKILL) or stalls (SIGSTOP) mid-run: rank 0 stops within --dist-timeout with one line, exit 3,
    and its newest checkpoint is whole."""
    timeout = 15
    port = free_port()
    args = ("--task", "arm-reach", "--num-envs", "16", "--max-iterations", "100000", "--run-name", "lost",
            "--dist-timeout", str(timeout), "--set", "runner.save_interval=5", "--set", "runner.eval_episodes=0")
    procs = [start_rank(r, port, tmp_path, *args) for r in range(2)]
    try:
        run_dir = tmp_path / "runs" / "lost"
        deadline = time.monotonic() + 120
        while latest_checkpoint(run_dir) is None if run_dir.is_dir() else True:
            assert time.monotonic() < deadline and procs[0].poll() is None, procs[0].stderr.read()[-2000:]
            time.sleep(0.2)
        procs[1].send_signal(signal.SIGKILL if how == "killed" else signal.SIGSTOP)
        lost = time.monotonic()
        _, err = procs[0].communicate(timeout=timeout + 30)
        took = time.monotonic() - lost
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.kill()
                p.wait()
    assert procs[0].returncode == 3, err[-2000:]
    assert took < timeout + 10
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("robo-rl: rank 0: another rank died, stalled or became "
                                                   "unreachable ("), err
    load_run_checkpoint(latest_checkpoint(run_dir))  # whole
    assert not [p for p in run_dir.iterdir() if p.name.endswith(".tmp")]


def test_sigterm_to_torchrun_stops_every_rank_with_the_last_checkpoint_whole(tmp_path):
    cmd = [*TORCHRUN, "-m", "robo_rl.cli", "train", "--distributed", "--task", "arm-reach",
           "--num-envs", "16", "--max-iterations", "100000", "--run-name", "term", "--set", "runner.save_interval=3",
           "--set", "runner.eval_episodes=0"]
    launcher = subprocess.Popen(cmd, cwd=tmp_path, env=loopback_env(), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
    run_dir = tmp_path / "runs" / "term"
    try:
        deadline = time.monotonic() + 120
        while (latest_checkpoint(run_dir) if run_dir.is_dir() else None) is None:
            assert time.monotonic() < deadline and launcher.poll() is None, launcher.stderr.read()[-2000:]
            time.sleep(0.2)
        launcher.send_signal(signal.SIGTERM)
        launcher.communicate(timeout=60)
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.wait()
    assert launcher.returncode != 0
    left = subprocess.run(["pgrep", "-s", str(launcher.pid)], capture_output=True, text=True).stdout.split()
    assert left == []  # no rank outlives the launcher
    load_run_checkpoint(latest_checkpoint(run_dir))
    assert not [p for p in run_dir.iterdir() if p.name.endswith(".tmp")]


def test_sac_replay_buffers_of_every_rank_are_saved_and_restored(tmp_path):
    """An off-policy run's checkpoint keeps each rank's replay buffer: a resume with as many ranks restores them (no
    note), one with another number of ranks refills them (a note says so)."""
    from tests.conftest import run_cli

    common = ("--set", "runner.eval_episodes=0", "--set", "algo.learning_starts=4", "--set", "algo.num_steps_per_env=4")
    done = torchrun("-m", "robo_rl.cli", "train", "--distributed", "--task", "arm-reach", "--algo", "sac",
                    "--num-envs", "8", "--max-iterations", "2", "--run-name", "sac", *common, cwd=tmp_path)
    assert done.returncode == 0, failed(done)
    run_dir = tmp_path / "runs" / "sac"
    replay = torch.load(run_dir / "replay_000002.pt", weights_only=False)
    assert len(replay["rank_replays"]) == 2 and all(r["size"] == 8 for r in replay["rank_replays"])
    assert not torch.equal(replay["rank_replays"][0]["obs"], replay["rank_replays"][1]["obs"])  # each its own worlds
    again = torchrun("-m", "robo_rl.cli", "train", "--distributed", "--resume", "sac", "--max-iterations", "3",
                     cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "note:" not in again.stdout
    one = run_cli("train", "--resume", "sac", "--max-iterations", "4", cwd=tmp_path)
    assert one.returncode == 0, one.stderr[-2000:]
    assert "note: the replay buffer file replay_000003.pt holds 2 rank(s)' buffers, this run has 1" in one.stdout


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                    reason="needs 2 CUDA GPUs (the NCCL path); this machine has none or one")
def test_two_gpus_train_and_resume_over_nccl(tmp_path):
    """On a machine with 2 GPUs: 2 ranks on cuda:0 and cuda:1 (MuJoCo Warp, NCCL for the gradients, gloo for the rest)
    train, checkpoint every rank's state and resume exactly (no note)."""
    args = ("-m", "robo_rl.cli", "train", "--distributed", "--task", "arm-reach", "--num-envs", "256",
            "--set", "sim.backend=mujoco_warp", "--set", "sim.device=cuda", "--set", "runner.eval_episodes=0")
    done = torchrun(*args, "--max-iterations", "3", "--run-name", "nccl", cwd=tmp_path, timeout=900)
    assert done.returncode == 0, failed(done)
    state = load_run_checkpoint(tmp_path / "runs" / "nccl" / "model_000003.pt")
    assert state["world_size"] == 2 and len(state["rank_states"]) == 1
    again = torchrun("-m", "robo_rl.cli", "train", "--distributed", "--resume", "nccl", "--max-iterations", "4",
                     cwd=tmp_path, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "note:" not in again.stdout
