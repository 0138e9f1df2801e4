"""Run by tests/learn/test_distributed.py under `torchrun --nproc_per_node=2` (gloo on loopback): each rank does one
thing of a data-parallel run and saves what it saw and what came out to OUT/rank<r>.pt, for the test to compare
with one process working on the ranks' data put together.

Usage: python distributed_checks.py MODE OUT [DATASET]   (MODE: collectives, ppo, sac, learners, vla)
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import distributed as dist

from robo_rl.learn import distributed
from robo_rl.learn.algorithm_registry import ALGORITHMS, EnvSpec
from robo_rl.learn.algorithms.ppo import normalize_advantages
from robo_rl.learn.networks.normalizer import EmpiricalNormalization
from robo_rl.learn.networks.squashed_gaussian import squashed_gaussian_log_prob


def rank_data(rank: int, rows: int, cols: int, salt: int = 0) -> torch.Tensor:
    """Rank r's data (rows, cols): different sizes, means and scales per rank."""
    g = torch.Generator().manual_seed(1000 * rank + salt)
    return torch.randn(rows, cols, generator=g) * (1.0 + rank) + 3.0 * rank


def collectives(rank: int, out: Path) -> None:
    batches = [rank_data(rank, 5 + 3 * rank + step, 4, salt=step) for step in range(3)]  # (B_r, 4) per update
    norm = EmpiricalNormalization(4)
    for x in batches:
        norm.update(x)
    adv = rank_data(rank, 7 + rank, 1, salt=9)[:, 0]  # (B_r,)
    # gradients: the same module on every rank, a loss on the rank's own (equal-sized) batch
    torch.manual_seed(0)
    net = torch.nn.Linear(4, 2)
    x = rank_data(rank, 6, 4, salt=11)
    net(x).square().mean().backward()
    local_grad = [p.grad.clone() for p in net.parameters()]
    distributed.all_reduce_gradients(net.parameters())
    torch.save({"batches": batches, "mean": norm.mean, "var": norm.var, "count": norm.count,
                "adv": adv, "adv_normalized": normalize_advantages(adv), "x": x, "local_grad": local_grad,
                "grad": [p.grad for p in net.parameters()], "kl_mean": distributed.mean(float(rank + 1)),
                "any": distributed.any_rank(rank == 1), "none": distributed.any_rank(False)}, out)


def ppo(rank: int, out: Path) -> None:
    """One iteration of the PPO runner on arm-reach (8 worlds per rank); the storage and the policy as the update
    got them (captured before GAE, so the test redoes advantage normalisation on the whole batch too)."""
    from robo_rl.learn.builders import resolve_config
    from robo_rl.learn.runner import make_runner

    cfg = resolve_config({"task": "arm-reach"}, [
        "sim.num_envs=16", "runner.max_iterations=1", "runner.eval_episodes=0", "algo.num_steps_per_env=6",
        "algo.num_learning_epochs=3", "algo.num_mini_batches=1", f"runner.log_dir={out.parent / 'runs'}",
        "runner.run_name=ppo"])
    runner = make_runner(cfg, out.parent / "runs" / "ppo")
    algo = runner.algo
    captured = {"initial": {k: v.clone() for k, v in runner.policy.state_dict().items()}}
    compute_returns = algo.compute_returns

    def capture(last_critic_obs: torch.Tensor) -> None:
        s = algo.storage
        captured["storage"] = {k: v.clone() for k, v in vars(s).items() if isinstance(v, torch.Tensor)}
        captured["last_critic_obs"] = last_critic_obs.clone()
        captured["before_update"] = {k: v.clone() for k, v in runner.policy.state_dict().items()}
        compute_returns(last_critic_obs)

    algo.compute_returns = capture
    (out.parent / "runs").mkdir(exist_ok=True)
    runner.learn(None)
    captured["final"] = runner.policy.state_dict()
    captured["learning_rate"] = algo.learning_rate
    torch.save(captured, out)


def noise_from_obs(obs: torch.Tensor, action_dim: int) -> torch.Tensor:
    """Exploration noise (B, A) that depends only on each row's observation, so one process drawing for all rows and
    each rank drawing for its own draw the same."""
    return torch.sin(obs.sum(-1, keepdim=True) * 7.0 + torch.arange(action_dim, dtype=obs.dtype))


def sac_batch(rank: int, rows: int, obs_dim: int, action_dim: int) -> dict[str, torch.Tensor]:
    obs, next_obs = rank_data(rank, rows, obs_dim, 1), rank_data(rank, rows, obs_dim, 2)
    return {"obs": obs, "critic_obs": obs, "actions": torch.tanh(rank_data(rank, rows, action_dim, 3)),
            "returns": rank_data(rank, rows, 1, 4)[:, 0], "discount": torch.full((rows,), 0.99),
            "next_obs": next_obs, "next_critic_obs": next_obs, "step_next_obs": next_obs}


def build_sac(batch: dict[str, torch.Tensor], obs_dim: int, action_dim: int):
    """A SAC learner with one critic, actor and temperature step per update, whose buffer hands out `batch` and whose
    exploration noise is `noise_from_obs`."""
    entry = ALGORITHMS.get("sac")
    spec = EnvSpec(num_envs=4, obs_dim=obs_dim, critic_obs_dim=obs_dim, action_dim=action_dim, action_clip=1.0)
    torch.manual_seed(0)
    policy = entry.build_policy(entry.policy_config_cls(), spec)
    algo = entry.build(entry.config_cls(updates_per_step=1, policy_delay=1, learning_starts=1,
                                        batch_size=batch["obs"].shape[0]), policy, spec, torch.Generator())
    algo.buffer.sample = lambda *args: {k: v.clone() for k, v in batch.items()}
    algo.ready = lambda: True
    actor = policy.actor

    def sample(obs: torch.Tensor, generator: torch.Generator | None = None):
        mean, log_std = actor.distribution(obs)
        u = mean + torch.exp(log_std) * noise_from_obs(obs, action_dim)
        return torch.tanh(u), squashed_gaussian_log_prob(u, mean, log_std)

    actor.sample = sample
    return algo


def sac(rank: int, out: Path) -> None:
    batch = sac_batch(rank, 32, 5, 2)
    algo = build_sac(batch, 5, 2)
    initial = {k: v.clone() for k, v in algo.policy.state_dict().items()}
    algo.update()
    torch.save({"batch": batch, "initial": initial, "final": algo.policy.state_dict()}, out)


def train_each(rank: int, out: Path, task: str, plans: dict[str, list[str]]) -> None:
    """Two iterations of each planned learner on `task`, one after the other (a later plan may start from an earlier
    run, written by rank 0); each rank's networks before and after."""
    from robo_rl.learn.builders import resolve_config
    from robo_rl.learn.runner import make_runner

    runs = out.parent / "runs"
    runs.mkdir(exist_ok=True)
    result = {}
    for algo, extra in plans.items():
        cfg = resolve_config({"task": task, "algo_name": algo},
                             [f"runner.log_dir={runs}", "runner.eval_episodes=0", *extra, "runner.max_iterations=2",
                              f"runner.run_name={algo}"])
        runner = make_runner(cfg, runs / algo)
        if rank == 0:
            (runs / algo).mkdir()
        initial = {k: v.clone() for k, v in runner.policy.state_dict().items()}
        runner.learn(None)
        result[algo] = {"initial": initial, "final": runner.policy.state_dict()}
        runner.close()
        dist.barrier()  # the next plan may read this run's checkpoint, written by rank 0
    torch.save(result, out)


def learners(rank: int, out: Path) -> None:
    """PPO with several minibatches, BC and flow-BC from the dataset, then ReinFlow from that flow-BC run, on
    arm-reach: each rank samples its own minibatches, so only averaged gradients keep the ranks' networks equal."""
    dataset = f"algo.dataset={sys.argv[3]}"
    runs = out.parent / "runs"
    train_each(rank, out, "arm-reach", {
        "ppo": ["sim.num_envs=8", "algo.num_steps_per_env=8", "algo.num_mini_batches=4"],
        "bc": ["sim.num_envs=8", dataset, "algo.num_steps_per_env=5"],
        "flow-bc": ["sim.num_envs=8", dataset, "algo.num_steps_per_env=5", "policy.hidden_dims=[32,32]"],
        "reinflow": ["sim.num_envs=8", f"algo.pretrained={runs / 'flow-bc'}", "algo.num_steps_per_env=8",
                     "algo.critic_warmup_iterations=1", "policy.hidden_dims=[32,32]"]})


def vla(rank: int, out: Path) -> None:
    """A small VLA on arm-pick-place-vision: SFT from the camera dataset, then Flow-SDE PPO from it."""
    small = ["policy.width=32", "policy.heads=2", "policy.prefix_layers=1", "policy.expert_layers=1",
             "policy.horizon=4", "policy.execute_steps=2", "algo.num_steps_per_env=3", "env.episode_length_s=1.0",
             "sim.num_envs=4"]
    train_each(rank, out, "arm-pick-place-vision", {
        "vla-sft": [*small, f"algo.dataset={sys.argv[3]}", "algo.batch_size=8"],
        "vla-rl": [*small, f"algo.pretrained={out.parent / 'runs' / 'vla-sft'}", "algo.num_mini_batches=2",
                   "algo.critic_warmup_iterations=1"]})


if __name__ == "__main__":
    mode, folder = sys.argv[1], Path(sys.argv[2])
    dist.init_process_group("gloo")
    try:
        check = {"collectives": collectives, "ppo": ppo, "sac": sac, "learners": learners, "vla": vla}[mode]
        check(dist.get_rank(), folder / f"rank{dist.get_rank()}.pt")
    finally:
        dist.destroy_process_group()
