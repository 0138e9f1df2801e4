"""Our PPO on gymnasium's Hopper-v5, beside stable-baselines3 RL Zoo's published PPO result at 1 M steps.

Trains with the preset sim_configs/gym-hopper.yaml (SB3's and cleanrl's MuJoCo PPO settings) through
our `OnPolicyRunner` and the gymnasium adapter (`gym:Hopper-v5`), for `--steps` env steps (rounded up
to whole iterations), then evaluates the deterministic policy on `--eval-episodes` fresh episodes
(the mean action, observation normaliser frozen, raw env rewards) and compares its mean return with
RL Zoo's 2410 (PPO, Hopper, 1 M steps; shared/REFERENCES.md). It prints the wall-clock time and ends with

    TARGET ppo_hopper_vs_rl_zoo measured=<our return / 2410> goal=>=0.9 PASS|FAIL

and exits 0 either way. `--impl sb3` trains stable-baselines3's own PPO instead, from the same resolved
config (VecNormalize for the observation and reward normalisation, RL Zoo's way), and evaluates it the
same way: it shows what SB3 itself reaches with the config on this gymnasium and MuJoCo (its TARGET line is named
`sb3_ppo_hopper_vs_rl_zoo`). Needs stable-baselines3 (the dev extra). `--smoke` without `--impl` runs both, one
after the other, each for 1 iteration of 64 env steps and 1 evaluation episode.

    PYTHONPATH=. python scripts/bench_gym_reference.py                 # 1 M steps (~16 min on 2 cores)
    PYTHONPATH=. python scripts/bench_gym_reference.py --steps 200000 --seed 1
    PYTHONPATH=. python scripts/bench_gym_reference.py --smoke         # both implementations: a smoke run
    PYTHONPATH=. python scripts/bench_gym_reference.py --impl sb3      # SB3's PPO, same settings and budget
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from robo_rl.sim import set_training_process_defaults  # noqa: E402

set_training_process_defaults()  # before torch is imported, as the CLI does

from robo_rl.core.config import load_yaml  # noqa: E402
from robo_rl.learn.logger import TrainLogger  # noqa: E402
from robo_rl.learn.runner import OnPolicyRunner  # noqa: E402
from robo_rl.learn.train_config import TrainConfig, resolve_train_config  # noqa: E402
from robo_rl.tasks.task_registry import task_config_class  # noqa: E402

RL_ZOO_PPO_HOPPER_1M = 2410.0
"""SB3 RL Zoo's PPO on Hopper at 1 M steps (shared/REFERENCES.md)."""
GOAL = 0.9
"""Our evaluation return must reach this fraction of RL Zoo's."""
SMOKE_OVERRIDES = ("runner.max_iterations=1", "algo.num_steps_per_env=16", "algo.num_learning_epochs=2")
"""`--smoke`: one iteration of 4 worlds x 16 steps (32 minibatches of 2), 2 epochs (a reshuffle between them)."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=1_000_000, help="env steps to train (rounded up to whole iterations)")
    p.add_argument("--config", default=str(REPO / "sim_configs" / "gym-hopper.yaml"), help="YAML preset")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eval-episodes", type=int, default=10, help="deterministic evaluation episodes")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="config override, e.g. algo.learning_rate=3e-4 (repeatable)")
    p.add_argument("--run-dir", default=None, help="keep the run (checkpoints, TensorBoard) here; default: a temp dir")
    p.add_argument("--smoke", action="store_true", help="1 small iteration and 1 evaluation episode (a smoke run)")
    p.add_argument("--impl", choices=("robo_rl", "sb3"), default=None,
                   help="whose PPO to train: ours (default), or stable-baselines3's from the same config "
                        "(default with --smoke: both)")
    args = p.parse_args(argv)
    args.impls = [args.impl] if args.impl else ["robo_rl", "sb3"] if args.smoke else ["robo_rl"]
    if args.smoke:
        args.eval_episodes = 1
    return args


def bench_config(args: argparse.Namespace, run_dir: Path) -> TrainConfig:
    """The preset with `--set` overrides, the seed and enough iterations for `--steps` env steps."""
    raw = load_yaml(args.config)
    base = resolve_train_config(raw, [*args.overrides, f"seed={args.seed}"], env_config_cls=task_config_class)
    per_iteration = base.algo.num_steps_per_env * base.sim.num_envs
    iterations = max(1, math.ceil(args.steps / per_iteration))
    runner = [f"runner.max_iterations={iterations}", "runner.eval_episodes=0", f"runner.save_interval={iterations}",
              f"runner.log_dir={run_dir.parent}", f"runner.run_name={run_dir.name}"]
    smoke = SMOKE_OVERRIDES if args.smoke else ()
    return resolve_train_config(raw, [*args.overrides, f"seed={args.seed}", *runner, *smoke],
                                env_config_cls=task_config_class)


def run(args: argparse.Namespace, run_dir: Path) -> tuple[dict, float, int]:
    """Train and evaluate; returns (evaluation, training wall time in s, env steps trained)."""
    cfg = bench_config(args, run_dir)
    a, p = cfg.algo, cfg.policy
    steps = cfg.runner.max_iterations * a.num_steps_per_env * cfg.sim.num_envs
    print(f"PPO on {cfg.task}: {cfg.sim.num_envs} env(s) x {a.num_steps_per_env} steps x "
          f"{cfg.runner.max_iterations} iterations = {steps:,} env steps, seed {cfg.seed}; "
          f"{a.num_learning_epochs} epochs x {a.num_mini_batches} minibatches, lr {a.learning_rate:g} ({a.schedule}), "
          f"gamma {a.gamma}, lambda {a.lam}, reward normalisation {a.normalize_reward}; "
          f"reshuffle minibatches {a.reshuffle_minibatches}, advantages normalised per "
          f"{'minibatch' if a.advantage_norm_per_minibatch else 'batch'}, {a.grad_clip} gradient clip, "
          f"Adam eps {a.adam_eps:g}, observation normaliser eps {p.obs_norm_eps:g} clip {p.obs_norm_clip:g}; "
          f"actor {list(p.actor_hidden_dims)} critic {list(p.critic_hidden_dims)} {p.activation}, "
          f"init std {p.init_noise_std:.4f} ({p.noise_std_type})", flush=True)
    runner = OnPolicyRunner(cfg, run_dir)
    logger = TrainLogger(run_dir, cfg.runner.max_iterations, print_progress=True)
    try:
        t0 = time.perf_counter()
        runner.learn(logger)
        wall = time.perf_counter() - t0
        evaluation = runner.evaluate(args.eval_episodes)
    finally:
        logger.close()
        runner.close()
    return evaluation, wall, steps


def sb3_ppo_kwargs(cfg: TrainConfig) -> dict:
    """stable-baselines3 PPO keyword arguments equivalent to our config (SB3 always learns log σ)."""
    from torch import nn

    a, p = cfg.algo, cfg.policy
    return {
        "n_steps": a.num_steps_per_env,
        "batch_size": a.num_steps_per_env * cfg.sim.num_envs // a.num_mini_batches,
        "n_epochs": a.num_learning_epochs,
        "learning_rate": a.learning_rate,
        "gamma": a.gamma,
        "gae_lambda": a.lam,
        "clip_range": a.clip_param,
        "clip_range_vf": a.clip_param if a.use_clipped_value_loss else None,
        "normalize_advantage": a.normalize_advantage,
        "ent_coef": a.entropy_coef,
        "vf_coef": a.value_loss_coef,
        "max_grad_norm": a.max_grad_norm,
        "seed": cfg.seed,
        "device": "cpu",
        "policy_kwargs": {
            "log_std_init": math.log(p.init_noise_std),
            "ortho_init": False,  # PyTorch's default initialisation, as our ActorCritic
            "activation_fn": {"elu": nn.ELU, "relu": nn.ReLU, "tanh": nn.Tanh, "silu": nn.SiLU}[p.activation],
            "net_arch": {"pi": list(p.actor_hidden_dims), "vf": list(p.critic_hidden_dims)},
        },
    }


def run_sb3(args: argparse.Namespace, run_dir: Path) -> tuple[dict, float, int]:
    """SB3's PPO on the same gymnasium env and config; returns what `run` returns."""
    try:
        import gymnasium
        from stable_baselines3 import PPO
        from stable_baselines3.common.monitor import Monitor
        from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize
    except ImportError as exc:
        raise SystemExit(f"--impl sb3 needs stable-baselines3 (pip install -e '.[dev]'): {exc}") from None
    cfg = bench_config(args, run_dir)
    steps = cfg.runner.max_iterations * cfg.algo.num_steps_per_env * cfg.sim.num_envs
    env_id = cfg.env.id

    def vec_env(n: int, seed: int) -> VecNormalize:
        env = DummyVecEnv([lambda: Monitor(gymnasium.make(env_id))] * n)  # Monitor: raw episode returns
        env.seed(seed)
        return VecNormalize(env, norm_obs=cfg.policy.obs_normalization, norm_reward=cfg.algo.normalize_reward,
                            clip_obs=cfg.policy.obs_norm_clip or 10.0, gamma=cfg.algo.gamma)

    env = vec_env(cfg.sim.num_envs, cfg.seed)
    kwargs = sb3_ppo_kwargs(cfg)
    print(f"SB3 PPO on {env_id}: {steps:,} env steps, seed {cfg.seed}; {kwargs}", flush=True)
    model = PPO("MlpPolicy", env, **kwargs)
    t0 = time.perf_counter()
    model.learn(steps)
    wall = time.perf_counter() - t0
    eval_env = vec_env(1, cfg.seed + 54321)  # one world, episodes in turn; statistics frozen from training
    eval_env.obs_rms, eval_env.training, eval_env.norm_reward = env.obs_rms, False, False
    returns, lengths = [], []
    obs = eval_env.reset()
    while len(returns) < args.eval_episodes:
        action, _ = model.predict(obs, deterministic=True)
        obs, _, done, infos = eval_env.step(action)
        if done[0]:
            returns.append(float(infos[0]["episode"]["r"]))
            lengths.append(float(infos[0]["episode"]["l"]))
    env.close()
    eval_env.close()
    n = len(returns)
    return {"mean_return": sum(returns) / n, "episodes": n, "metrics": {"length": sum(lengths) / n}}, wall, steps


def train_and_evaluate(args: argparse.Namespace, impl: str) -> tuple[dict, float, int]:
    """`run` (ours) or `run_sb3`, in `--run-dir` (with both implementations: a folder for each) or a temporary one."""
    with tempfile.TemporaryDirectory(prefix="bench_gym_") as tmp:
        run_dir = Path(args.run_dir) if args.run_dir else Path(tmp) / "hopper"
        if len(args.impls) > 1:
            run_dir = run_dir / impl
        return (run_sb3 if impl == "sb3" else run)(args, run_dir)


def report(impl: str, evaluation: dict, wall: float, steps: int) -> None:
    """The side-by-side table with RL Zoo's result and the TARGET line of one implementation."""
    ours = evaluation["mean_return"]
    ratio = ours / RL_ZOO_PPO_HOPPER_1M
    label = "SB3 PPO" if impl == "sb3" else "robo_rl PPO"
    print()
    print(f"{'':34s}{label:>14s}{'RL Zoo PPO':>14s}")
    print(f"{'Hopper-v5 evaluation return':34s}{ours:14.1f}{RL_ZOO_PPO_HOPPER_1M:14.1f}")
    print(f"{'env steps':34s}{steps:14,d}{1_000_000:14,d}")
    print(f"evaluation: {evaluation['episodes']} deterministic episodes, mean length "
          f"{evaluation['metrics'].get('length', float('nan')):.0f} steps; "
          f"training wall-clock {wall:.0f} s ({wall / 60:.1f} min, {steps / wall:,.0f} env steps/s)")
    verdict = "PASS" if ratio >= GOAL else "FAIL"
    name = "sb3_ppo_hopper_vs_rl_zoo" if impl == "sb3" else "ppo_hopper_vs_rl_zoo"
    print(f"TARGET {name} measured={ratio:.3f} goal=>={GOAL} {verdict}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    for impl in args.impls:
        report(impl, *train_and_evaluate(args, impl))
    return 0


if __name__ == "__main__":
    sys.exit(main())
