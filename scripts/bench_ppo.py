"""Benchmark robo_rl's PPO against rsl-rl-lib's: the update's time, and learning on a real task.

Update time (`--update`): both learners get the same network sizes, the same hyper-parameters and
the same rollout data (observations, rewards, terminations, time-outs); each samples its actions
through its own `act` path so stored log-probs, values and distribution parameters are
self-consistent, and each computes returns with its own `compute_returns`. Only `update()` is timed.
Before every timed update both storages are re-filled with a fresh, equivalent rollout. The two
implementations are interleaved (alternating which goes first) and the median over repeats is reported.

Learning (`--learning`): both train on our own task env (default `arm-reach` with its preset
sim_configs/arm-reach.yaml, what `robo-rl train --task arm-reach` runs) with the same
hyper-parameters, one seed after the other (never in parallel). Ours runs through our
`OnPolicyRunner`; rsl-rl-lib through its own `OnPolicyRunner` on a thin VecEnv wrapper of the same
env. Per run: the first iteration whose moving mean (`--window` iterations) of the logged
training metric `Metrics/ee_distance_final` is below `--threshold`, the final distance (mean of
the last `--final-window` iterations), wall time of the training loop, and a deterministic
evaluation (the quick-start's 64 episodes, same seeds as `robo-rl train`).

    PYTHONPATH=. python scripts/bench_ppo.py --update            # quadruped sizes (1024 envs x 24 steps)
    PYTHONPATH=. python scripts/bench_ppo.py --update --profile  # also print torch.profiler tables
    PYTHONPATH=. python scripts/bench_ppo.py --learning          # arm-reach preset, seeds 0 and 1
    PYTHONPATH=. python scripts/bench_ppo.py --learning --ours-std-types scalar,log  # both of ours
    PYTHONPATH=. python scripts/bench_ppo.py --learning --set policy.noise_std_type=log
    PYTHONPATH=. python scripts/bench_ppo.py --smoke             # both parts, small and fast

Without `--update` / `--learning` both parts run. They print, in this order,
    TARGET ppo_update_time_vs_rsl_rl measured=<ours/rsl> goal=<=1.0 PASS|FAIL
    TARGET ppo_iterations_to_1cm_vs_rsl_rl measured=<ours/rsl> goal=<=1.0 PASS|FAIL
and the exit status is 0 either way.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from robo_rl.learn.algorithms.ppo import PPO, PPOConfig  # noqa: E402
from robo_rl.learn.networks.actor_critic import ActorCritic, PolicyConfig  # noqa: E402

# ----------------------------------------------------------------------------------------------
# Arguments
# ----------------------------------------------------------------------------------------------


def _dims(text: str) -> tuple[int, ...]:
    return tuple(int(v) for v in text.replace("[", "").replace("]", "").split(",") if v.strip())


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--num-envs", type=int, default=None, help="N (default 1024; 32 with --smoke)")
    p.add_argument("--steps", type=int, default=None, help="rollout length T (default 24; 8 with --smoke)")
    p.add_argument("--obs-dim", type=int, default=45)
    p.add_argument("--critic-obs-dim", type=int, default=48)
    p.add_argument("--action-dim", type=int, default=12)
    p.add_argument("--actor-hidden", type=_dims, default=(256, 128, 64), help="e.g. 256,128,64")
    p.add_argument("--critic-hidden", type=_dims, default=(256, 128, 64), help="e.g. 256,128,64")
    p.add_argument("--activation", default="elu", choices=("elu", "relu", "tanh", "silu"))
    p.add_argument("--epochs", type=int, default=None, help="learning epochs per update (default 5; 2 with --smoke)")
    p.add_argument("--minibatches", type=int, default=None, help="minibatches per epoch (default 4; 2 with --smoke)")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--schedule", default="adaptive", choices=("adaptive", "fixed"))
    p.add_argument("--no-obs-norm", action="store_true", help="disable observation normalisation for both")
    p.add_argument("--repeats", type=int, default=None, help="timed updates per implementation (default 15; 2 smoke)")
    p.add_argument("--warmup", type=int, default=None, help="untimed updates per implementation (default 2; 1 smoke)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch intra-op threads (0: torch's default, the default; 1 with --smoke: no OpenMP spin-waits "
                        "for a second core another process holds)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--smoke", action="store_true", help="small batch, few repeats; a few learning iterations")
    p.add_argument("--profile", action="store_true", help="print a torch.profiler table of one update of each")
    p.add_argument("--update", action="store_true", help="run the update-time part (default: both parts)")
    p.add_argument("--learning", action="store_true", help="run the learning part (default: both parts)")
    g = p.add_argument_group("learning")
    g.add_argument("--task", default="arm-reach")
    g.add_argument("--config", default=None, help="YAML preset (default sim_configs/<task>.yaml)")
    g.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="config override for both learners (policy.noise_std_type only for ours); repeatable")
    g.add_argument("--seeds", default=None, help="comma-separated training seeds, run one after the other "
                   "(default 0,1; 0 with --smoke)")
    g.add_argument("--ours-std-types", default="", help="e.g. scalar,log: train ours once per std type (the first "
                   "one is used in the TARGET); default: the resolved config's")
    g.add_argument("--rsl-std-type", default="scalar", choices=("scalar", "log"), help="rsl-rl-lib's std_type")
    g.add_argument("--threshold", type=float, default=0.01, help="distance (m) for the iterations-to metric")
    g.add_argument("--window", type=int, default=5, help="moving-mean window (iterations) for the threshold")
    g.add_argument("--final-window", type=int, default=10, help="iterations averaged for the final distance")
    g.add_argument("--eval-episodes", type=int, default=None, help="deterministic evaluation episodes (64; 2 smoke)")
    args = p.parse_args(argv)
    if not args.update and not args.learning:
        args.update = args.learning = True
    smoke = args.smoke
    args.eval_episodes = args.eval_episodes if args.eval_episodes is not None else (2 if smoke else 64)
    args.seeds = args.seeds or ("0" if smoke else "0,1")
    args.num_envs = args.num_envs or (32 if smoke else 1024)
    args.steps = args.steps or (8 if smoke else 24)
    args.repeats = args.repeats or (2 if smoke else 15)
    args.epochs = args.epochs or (2 if smoke else 5)
    args.minibatches = args.minibatches or (2 if smoke else 4)
    args.warmup = args.warmup if args.warmup is not None else (1 if smoke else 2)
    args.threads = args.threads if args.threads is not None else (1 if smoke else 0)
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


# ----------------------------------------------------------------------------------------------
# Learning on a task
# ----------------------------------------------------------------------------------------------

METRIC = "Metrics/ee_distance_final"
EVAL_SEED_OFFSET = 54321  # OnPolicyRunner.evaluate's, so the evaluation equals the quick-start's


def learning_config(args: argparse.Namespace, seed: int, overrides: tuple[str, ...] = ()):
    """The resolved TrainConfig both learners train with: preset -> `--set` -> `overrides` -> seed."""
    from robo_rl.core.config import load_yaml
    from robo_rl.learn.train_config import resolve_train_config
    from robo_rl.tasks.task_registry import task_config_class

    preset = Path(args.config) if args.config else REPO / "sim_configs" / f"{args.task}.yaml"
    raw = load_yaml(preset) if args.config or preset.is_file() else {}
    raw["task"] = args.task
    smoke = [  # the smallest run that learns, logs ended episodes, evaluates and compares
        "sim.num_envs=8", "algo.num_steps_per_env=8", "algo.num_learning_epochs=2", "algo.num_mini_batches=2",
        "runner.max_iterations=2", "env.episode_length_s=0.5",
    ] if args.smoke else []
    return resolve_train_config(
        raw, [*smoke, *args.overrides, *overrides, f"seed={seed}"], env_config_cls=task_config_class
    )


def iterations_to(values: list[float | None], threshold: float, window: int) -> int | None:
    """First iteration (1-based) whose mean over the last `window` logged values is below `threshold`.

    `values` holds one entry per iteration, None where no episode ended in it; None when never reached.
    """
    logged: list[float] = []
    for it, v in enumerate(values, start=1):
        if v is None:
            continue
        logged.append(v)
        if len(logged) >= window and sum(logged[-window:]) / window < threshold:
            return it
    return None


def final_mean(values: list[float | None], window: int) -> float:
    logged = [v for v in values if v is not None][-window:]
    return sum(logged) / len(logged) if logged else float("nan")


class _MetricRecorder:
    """TrainLogger stand-in for our runner: keeps the metric of every iteration."""

    def __init__(self):
        self.values: list[float | None] = []

    def log(self, iteration: int, scalars: dict[str, float], elapsed: float, final: bool) -> None:
        self.values.append(scalars.get(METRIC))

    def video(self, iteration: int, path: Path) -> None:
        pass


def train_ours(cfg, eval_episodes: int) -> dict:
    """Train with our OnPolicyRunner; the metric per iteration, wall time of `learn`, evaluation."""
    import dataclasses
    import tempfile

    from robo_rl.learn.runner import OnPolicyRunner

    cfg = dataclasses.replace(cfg, runner=dataclasses.replace(cfg.runner, save_interval=cfg.runner.max_iterations))
    rec = _MetricRecorder()
    with tempfile.TemporaryDirectory() as run_dir:
        runner = OnPolicyRunner(cfg, run_dir)
        try:
            t0 = time.perf_counter()
            runner.learn(rec)
            wall = time.perf_counter() - t0
            metrics = runner.evaluate(eval_episodes)["metrics"] if eval_episodes else {}
        finally:
            runner.close()
    return {"values": rec.values, "wall": wall, "eval": metrics}


def rsl_train_config(cfg, std_type: str) -> dict:
    """rsl-rl-lib's OnPolicyRunner config with our resolved hyper-parameters and network sizes."""
    a, pc = cfg.algo, cfg.policy
    mlp = {"class_name": "MLPModel", "activation": pc.activation, "obs_normalization": pc.obs_normalization}
    return {
        "num_steps_per_env": a.num_steps_per_env,
        "save_interval": cfg.runner.max_iterations,
        "obs_groups": {"actor": ["policy"], "critic": ["critic"]},
        "algorithm": {
            "class_name": "PPO", "num_learning_epochs": a.num_learning_epochs, "num_mini_batches": a.num_mini_batches,
            "clip_param": a.clip_param, "gamma": a.gamma, "lam": a.lam, "value_loss_coef": a.value_loss_coef,
            "entropy_coef": a.entropy_coef, "learning_rate": a.learning_rate, "max_grad_norm": a.max_grad_norm,
            "optimizer": "adam", "use_clipped_value_loss": a.use_clipped_value_loss, "schedule": a.schedule,
            "desired_kl": a.desired_kl, "normalize_advantage_per_mini_batch": False,
        },  # fmt: skip
        "actor": {
            **mlp, "hidden_dims": list(pc.actor_hidden_dims),
            "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": pc.init_noise_std,
                                 "std_type": std_type},
        },  # fmt: skip
        "critic": {**mlp, "hidden_dims": list(pc.critic_hidden_dims)},
    }


def train_rsl(cfg, std_type: str, eval_episodes: int) -> dict:
    """Train with rsl-rl-lib's OnPolicyRunner on the same env, seeds and hyper-parameters."""
    import contextlib
    import io

    from rsl_rl.runners import OnPolicyRunner as RslRunner
    from tensordict import TensorDict

    from robo_rl.adapters.to_rsl_rl import RslRlVecEnv
    from robo_rl.learn.builders import build_env
    from robo_rl.learn.evaluation import run_episodes

    torch.manual_seed(cfg.seed)  # network initialisation; rsl-rl also samples from the global RNG
    env = build_env(cfg)
    env.reset()  # random episode clocks, as our runner starts (so init_at_random_ep_len stays off)
    venv = RslRlVecEnv(env)
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # it prints both models
            runner = RslRunner(venv, rsl_train_config(cfg, std_type), log_dir=None, device="cpu")
        t0 = time.perf_counter()
        runner.learn(cfg.runner.max_iterations, init_at_random_ep_len=False)
        wall = time.perf_counter() - t0
    finally:
        env.close()
    steps = cfg.algo.num_steps_per_env
    values = []
    for i in range(0, len(venv.step_logs), steps):  # one iteration = T steps, averaged like our runner
        logged = [log[METRIC] for log in venv.step_logs[i : i + steps] if METRIC in log]
        values.append(sum(logged) / len(logged) if logged else None)
    metrics = {}
    if eval_episodes:
        policy = runner.get_inference_policy()
        eval_env = build_env(cfg, num_envs=eval_episodes, seed=cfg.seed + EVAL_SEED_OFFSET)
        def act(obs: dict[str, torch.Tensor]) -> torch.Tensor:
            return policy(TensorDict({"policy": obs["policy"]}, batch_size=[obs["policy"].shape[0]]))

        try:
            metrics = run_episodes(eval_env, act)["metrics"]
        finally:
            eval_env.close()
    return {"values": values, "wall": wall, "eval": metrics}


def bench_learning(args: argparse.Namespace) -> str:
    """The learning comparison; prints one row per run and returns its TARGET line."""
    seeds = [int(v) for v in args.seeds.split(",") if v.strip()]
    base = learning_config(args, seeds[0])
    ours_types = [v.strip() for v in args.ours_std_types.split(",") if v.strip()] or [base.policy.noise_std_type]
    variants = [("robo_rl", t) for t in ours_types] + [("rsl_rl", args.rsl_std_type)]
    n_iter = base.runner.max_iterations
    print(
        f"PPO learning benchmark: task {base.task}, {base.sim.num_envs} worlds x {base.algo.num_steps_per_env} steps, "
        f"{n_iter} iterations, seeds {seeds}, torch threads {torch.get_num_threads()}"
    )
    print(
        f"actor {list(base.policy.actor_hidden_dims)} critic {list(base.policy.critic_hidden_dims)} "
        f"{base.policy.activation}, lr {base.algo.learning_rate} ({base.algo.schedule}), "
        f"{base.algo.num_learning_epochs} epochs x {base.algo.num_mini_batches} minibatches, "
        f"entropy {base.algo.entropy_coef}, init std {base.policy.init_noise_std}; "
        f"iterations to < {args.threshold * 1e3:g} mm: mean of the last {args.window} iterations' {METRIC}; "
        f"final: mean of the last {args.final_window}"
    )
    header = f"{'impl':10s}{'std':>8s}{'seed':>6s}{'iters<thr':>11s}{'final mm':>10s}{'eval mm':>9s}"
    header += f"{'eval succ':>10s}{'wall s':>9s}{'s/iter':>8s}"
    print(header, flush=True)
    rows = []
    for k, seed in enumerate(seeds):  # one run after the other; alternate who goes first
        for impl, std_type in variants if k % 2 == 0 else variants[::-1]:
            if impl == "robo_rl":
                cfg = learning_config(args, seed, (f"policy.noise_std_type={std_type}",))
                res = train_ours(cfg, args.eval_episodes)
            else:
                res = train_rsl(learning_config(args, seed), std_type, args.eval_episodes)
            it = iterations_to(res["values"], args.threshold, args.window)
            row = {"impl": impl, "std": std_type, "seed": seed, "iters": it, "final": final_mean(res["values"],
                   args.final_window), "wall": res["wall"], "eval": res["eval"]}  # fmt: skip
            rows.append(row)
            ev = res["eval"]
            print(
                f"{impl:10s}{std_type:>8s}{seed:6d}{(str(it) if it else f'>{n_iter}'):>11s}{1e3 * row['final']:10.2f}"
                f"{1e3 * ev.get('ee_distance_final', float('nan')):9.2f}{ev.get('success', float('nan')):10.3f}"
                f"{row['wall']:9.1f}{row['wall'] / n_iter:8.3f}",
                flush=True,
            )

    def mean_iters(impl: str, std_type: str) -> float:  # a run that never gets there counts as n_iter + 1
        its = [r["iters"] or n_iter + 1 for r in rows if (r["impl"], r["std"]) == (impl, std_type)]
        return sum(its) / len(its)

    print("means over seeds:")
    for impl, std_type in variants:
        sel = [r for r in rows if (r["impl"], r["std"]) == (impl, std_type)]
        final = sum(r["final"] for r in sel) / len(sel)
        wall = sum(r["wall"] for r in sel) / len(sel)
        print(f"  {impl:10s}{std_type:>8s}  iters<thr {mean_iters(impl, std_type):7.1f}  final {1e3 * final:6.2f} mm"
              f"  wall {wall:7.1f} s")  # fmt: skip
    ratio = mean_iters(*variants[0]) / mean_iters(*variants[-1])
    verdict = "PASS" if ratio <= 1.0 else "FAIL"
    return f"TARGET ppo_iterations_to_1cm_vs_rsl_rl measured={ratio:.3f} goal=<=1.0 {verdict}"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    targets = []
    if args.update:
        targets.append(bench_update(args))
    if args.learning:
        targets.append(bench_learning(args))
    print()
    for line in targets:
        print(line)
    return 0


def bench_update(args: argparse.Namespace) -> str:
    """The update-time comparison; returns its TARGET line."""
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
    return f"TARGET ppo_update_time_vs_rsl_rl measured={ratio:.3f} goal=<=1.0 {verdict}"


if __name__ == "__main__":
    sys.exit(main())
