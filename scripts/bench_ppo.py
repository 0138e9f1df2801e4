"""Benchmark the PPO *update* (epochs x minibatches gradient phase) of robo_rl against rsl-rl-lib.

Both learners get the same network sizes, the same hyper-parameters and the same rollout data
(observations, rewards, terminations, time-outs); each samples its actions through its own `act`
path so stored log-probs, values and distribution parameters are self-consistent, and each
computes returns with its own `compute_returns`. Only `update()` is timed. Before every timed
update both storages are re-filled with a fresh, equivalent rollout. The two implementations are
interleaved (alternating which goes first) and the median over repeats is reported.

    PYTHONPATH=. python scripts/bench_ppo.py            # quadruped sizes (1024 envs x 24 steps)
    PYTHONPATH=. python scripts/bench_ppo.py --quick    # small, fast run
    PYTHONPATH=. python scripts/bench_ppo.py --profile  # also print torch.profiler tables

The last line is always
    TARGET ppo_update_time_vs_rsl_rl measured=<ours/rsl> goal=<=1.0 PASS|FAIL
and the exit status is 0 either way.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from robo_rl.algos.ppo import PPO  # noqa: E402
from robo_rl.config import PolicyConfig, PPOConfig  # noqa: E402
from robo_rl.networks.actor_critic import ActorCritic  # noqa: E402

# ----------------------------------------------------------------------------------------------
# Arguments
# ----------------------------------------------------------------------------------------------


def _dims(text: str) -> tuple[int, ...]:
    return tuple(int(v) for v in text.replace("[", "").replace("]", "").split(",") if v.strip())


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--num-envs", type=int, default=None, help="N (default 1024; 256 with --quick)")
    p.add_argument("--steps", type=int, default=None, help="rollout length T (default 24; 16 with --quick)")
    p.add_argument("--obs-dim", type=int, default=45)
    p.add_argument("--critic-obs-dim", type=int, default=48)
    p.add_argument("--action-dim", type=int, default=12)
    p.add_argument("--actor-hidden", type=_dims, default=(256, 128, 64), help="e.g. 256,128,64")
    p.add_argument("--critic-hidden", type=_dims, default=(256, 128, 64), help="e.g. 256,128,64")
    p.add_argument("--activation", default="elu", choices=("elu", "relu", "tanh", "silu"))
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--minibatches", type=int, default=4)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--schedule", default="adaptive", choices=("adaptive", "fixed"))
    p.add_argument("--no-obs-norm", action="store_true", help="disable observation normalisation for both")
    p.add_argument("--repeats", type=int, default=None, help="timed updates per implementation (default 15; 5 quick)")
    p.add_argument("--warmup", type=int, default=None, help="untimed updates per implementation (default 2; 1 quick)")
    p.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="small batch, few repeats")
    p.add_argument("--profile", action="store_true", help="print a torch.profiler table of one update of each")
    args = p.parse_args(argv)
    quick = args.quick
    args.num_envs = args.num_envs or (256 if quick else 1024)
    args.steps = args.steps or (16 if quick else 24)
    args.repeats = args.repeats or (5 if quick else 15)
    args.warmup = args.warmup if args.warmup is not None else (1 if quick else 2)
    return args


# ----------------------------------------------------------------------------------------------
# Shared rollout data
# ----------------------------------------------------------------------------------------------


class Rollout:
    """One synthetic rollout: T+1 observations, T rewards / terminations / time-outs / final obs."""

    def __init__(self, args: argparse.Namespace, gen: torch.Generator):
        T, N = args.steps, args.num_envs
        O, Oc = args.obs_dim, args.critic_obs_dim

        def observations(dim: int) -> torch.Tensor:  # non-trivial mean / scale so normalisation matters
            mu = 2.0 * torch.randn(dim, generator=gen)
            sigma = torch.rand(dim, generator=gen) * 3.0 + 0.1
            return mu + sigma * torch.randn(T + 1, N, dim, generator=gen)

        self.obs = observations(O)  # (T+1, N, O)
        self.critic_obs = observations(Oc)  # (T+1, N, O_c)
        self.rewards = torch.randn(T, N, generator=gen)
        # a few episode ends: ~1% terminations and ~0.5% time-outs per step, never both
        u = torch.rand(T, N, generator=gen)
        self.terminated = u < 0.01
        self.truncated = (u >= 0.01) & (u < 0.015)
        self.final_critic_obs = self.critic_obs[1:] + 0.1 * torch.randn(T, N, Oc, generator=gen)


# ----------------------------------------------------------------------------------------------
# The two learners
# ----------------------------------------------------------------------------------------------


class Ours:
    name = "robo_rl"

    def __init__(self, args: argparse.Namespace):
        pol_cfg = PolicyConfig(
            actor_hidden_dims=tuple(args.actor_hidden),
            critic_hidden_dims=tuple(args.critic_hidden),
            activation=args.activation,
            init_noise_std=1.0,
            obs_normalization=not args.no_obs_norm,
        )
        ppo_cfg = PPOConfig(
            num_steps_per_env=args.steps,
            num_learning_epochs=args.epochs,
            num_mini_batches=args.minibatches,
            learning_rate=args.lr,
            schedule=args.schedule,
            desired_kl=0.01,
            clip_param=0.2,
            gamma=0.99,
            lam=0.95,
            value_loss_coef=1.0,
            entropy_coef=0.01,
            max_grad_norm=1.0,
            use_clipped_value_loss=True,
            normalize_advantage=True,
        )
        self.policy = ActorCritic(args.obs_dim, args.critic_obs_dim, args.action_dim, pol_cfg)
        self.algo = PPO(ppo_cfg, self.policy, args.num_envs, torch.Generator().manual_seed(args.seed))

    def fill(self, r: Rollout) -> None:
        algo = self.algo
        for t in range(r.rewards.shape[0]):
            algo.act(r.obs[t], r.critic_obs[t])
            algo.process_env_step(r.rewards[t], r.terminated[t], r.truncated[t], r.final_critic_obs[t])
        algo.compute_returns(r.critic_obs[-1])

    def update(self) -> dict[str, float]:
        return self.algo.update()


class RslRl:
    name = "rsl_rl"

    def __init__(self, args: argparse.Namespace, copy_weights_from: ActorCritic | None = None):
        from rsl_rl.algorithms import PPO as RslPPO
        from rsl_rl.models import MLPModel
        from rsl_rl.storage import RolloutStorage
        from tensordict import TensorDict

        self.TensorDict = TensorDict
        N, T = args.num_envs, args.steps
        obs = self._td(torch.zeros(N, args.obs_dim), torch.zeros(N, args.critic_obs_dim))
        obs_groups = {"actor": ["policy"], "critic": ["critic"]}
        norm = not args.no_obs_norm
        actor = MLPModel(
            obs, obs_groups, "actor", args.action_dim,
            hidden_dims=list(args.actor_hidden), activation=args.activation, obs_normalization=norm,
            distribution_cfg={"class_name": "GaussianDistribution", "init_std": 1.0, "std_type": "scalar"},
        )  # fmt: skip
        critic = MLPModel(
            obs, obs_groups, "critic", 1,
            hidden_dims=list(args.critic_hidden), activation=args.activation, obs_normalization=norm,
        )  # fmt: skip
        if copy_weights_from is not None:  # identical starting networks (same layer layout)
            with torch.no_grad():
                for dst, src in ((actor.mlp, copy_weights_from.actor), (critic.mlp, copy_weights_from.critic)):
                    for d, s in zip(dst.parameters(), src.parameters(), strict=True):
                        d.copy_(s)
        storage = RolloutStorage("rl", N, T, obs, [args.action_dim], "cpu")
        self.algo = RslPPO(
            actor, critic, storage,
            num_learning_epochs=args.epochs, num_mini_batches=args.minibatches, clip_param=0.2,
            gamma=0.99, lam=0.95, value_loss_coef=1.0, entropy_coef=0.01, learning_rate=args.lr,
            max_grad_norm=1.0, optimizer="adam", use_clipped_value_loss=True, schedule=args.schedule,
            desired_kl=0.01, normalize_advantage_per_mini_batch=False, device="cpu",
        )  # fmt: skip
        self.algo.train_mode()

    def _td(self, obs: torch.Tensor, critic_obs: torch.Tensor):
        return self.TensorDict({"policy": obs, "critic": critic_obs}, batch_size=[obs.shape[0]])

    def fill(self, r: Rollout) -> None:
        algo = self.algo
        with torch.inference_mode():  # as OnPolicyRunner.learn does
            obs = self._td(r.obs[0], r.critic_obs[0])
            for t in range(r.rewards.shape[0]):
                algo.act(obs)
                obs = self._td(r.obs[t + 1], r.critic_obs[t + 1])
                dones = r.terminated[t] | r.truncated[t]
                algo.process_env_step(obs, r.rewards[t], dones, {"time_outs": r.truncated[t]})
            algo.compute_returns(obs)

    def update(self) -> dict[str, float]:
        return self.algo.update()


# ----------------------------------------------------------------------------------------------
# Timing
# ----------------------------------------------------------------------------------------------


def timed_update(impl, rollout: Rollout) -> tuple[float, dict[str, float]]:
    impl.fill(rollout)
    t0 = time.perf_counter()
    stats = impl.update()
    return time.perf_counter() - t0, stats


def profile(impls, rollout: Rollout, rows: int = 25) -> None:
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as tprofile

    for impl in impls:
        impl.fill(rollout)
        with tprofile(activities=[ProfilerActivity.CPU]) as prof:
            impl.update()
        print(f"\n=== torch.profiler: one {impl.name} update (self CPU time) ===")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)  # rsl-rl samples actions and permutations from the global RNG

    ours = Ours(args)
    rsl = RslRl(args, copy_weights_from=ours.policy)
    impls = [ours, rsl]

    batch = args.num_envs * args.steps
    mb = batch // args.minibatches
    print(
        f"PPO update benchmark: torch {torch.__version__}, threads={torch.get_num_threads()}, "
        f"N={args.num_envs} T={args.steps} batch={batch} minibatch={mb} "
        f"epochs={args.epochs} x minibatches={args.minibatches}"
    )
    print(
        f"obs={args.obs_dim} critic_obs={args.critic_obs_dim} actions={args.action_dim} "
        f"actor={list(args.actor_hidden)} critic={list(args.critic_hidden)} {args.activation} "
        f"obs_norm={not args.no_obs_norm} schedule={args.schedule}"
    )

    gen = torch.Generator().manual_seed(args.seed + 1)
    for _ in range(args.warmup):
        rollout = Rollout(args, gen)
        for impl in impls:
            timed_update(impl, rollout)

    times: dict[str, list[float]] = {impl.name: [] for impl in impls}
    last_stats: dict[str, dict[str, float]] = {}
    for i in range(args.repeats):
        rollout = Rollout(args, gen)  # fresh batch, identical for both
        order = impls if i % 2 == 0 else impls[::-1]  # interleave, alternate who goes first
        for impl in order:
            dt, stats = timed_update(impl, rollout)
            times[impl.name].append(dt)
            last_stats[impl.name] = stats

    samples = batch * args.epochs
    med = {k: statistics.median(v) for k, v in times.items()}
    print()
    print(f"{'':28s}{'robo_rl':>14s}{'rsl_rl':>14s}")
    print(f"{'median ms / update':28s}{1e3 * med['robo_rl']:14.2f}{1e3 * med['rsl_rl']:14.2f}")
    print(f"{'min ms / update':28s}{1e3 * min(times['robo_rl']):14.2f}{1e3 * min(times['rsl_rl']):14.2f}")
    print(f"{'max ms / update':28s}{1e3 * max(times['robo_rl']):14.2f}{1e3 * max(times['rsl_rl']):14.2f}")
    print(f"{'ms / minibatch step':28s}" + "".join(
        f"{1e3 * med[k] / (args.epochs * args.minibatches):14.3f}" for k in ("robo_rl", "rsl_rl")
    ))  # fmt: skip
    print(f"{'samples/s (epochs*batch/t)':28s}{samples / med['robo_rl']:14.0f}{samples / med['rsl_rl']:14.0f}")
    paired = [o / r for o, r in zip(times["robo_rl"], times["rsl_rl"], strict=True)]
    print(
        f"repeats={args.repeats} (median), warmup={args.warmup}; ratio ours/rsl: "
        f"of medians {med['robo_rl'] / med['rsl_rl']:.3f}, median of paired {statistics.median(paired):.3f}, "
        f"of minima {min(times['robo_rl']) / min(times['rsl_rl']):.3f}"
    )
    so, sr = last_stats["robo_rl"], last_stats["rsl_rl"]
    print(
        "sanity (last update): "
        f"value_loss {so['value_loss']:.4f} / {sr['value']:.4f}, "
        f"surrogate {so['surrogate_loss']:.4f} / {sr['surrogate']:.4f}, "
        f"entropy {so['entropy']:.4f} / {sr['entropy']:.4f}"
    )

    if args.profile:
        profile(impls, Rollout(args, gen))

    ratio = med["robo_rl"] / med["rsl_rl"]
    verdict = "PASS" if ratio <= 1.0 else "FAIL"
    print(f"TARGET ppo_update_time_vs_rsl_rl measured={ratio:.3f} goal=<=1.0 {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
