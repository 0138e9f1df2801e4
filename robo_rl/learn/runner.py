"""The training loops: on-policy (rollout, update) and off-policy (step, update, replay), sharing the rest.

`Runner` owns what both loops share: building env and algorithm through the registry, the
iteration loop's logging, checkpoints, evaluation videos and evaluation, resume, and the NaN guard.
`OnPolicyRunner` (PPO), `OffPolicyRunner` (SAC) and `OfflineRunner` (BC) only fill in one iteration; each
algorithm's registry entry names the one that drives it (`runner_cls`), and `make_runner` builds that one.

Under `torchrun` (`robo_rl.learn.distributed`) every rank runs its own runner over its share of the worlds
(`rank_config`); networks start and stay equal (rank 0's are broadcast, gradients averaged by the algorithms), stop
decisions are taken together, and rank 0 alone writes checkpoints: each one holds every rank's env, RNG and return
state (`rank_states`), so a resume with as many ranks continues exactly and one with another number of ranks restarts
the episodes (a note says so).

NaN guard: after every env step the observations and rewards are checked (one `isfinite` reduction
each), after every iteration's updates the loss statistics and the policy's parameters and
normaliser buffers. The first non-finite value raises `TrainingDiverged` before anything else is
logged or saved, so the newest checkpoint on disk is the last good one.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from robo_rl.demos.mp4_writer import write_mp4
from robo_rl.learn import distributed
from robo_rl.learn.algorithm_registry import ALGORITHMS
from robo_rl.learn.builders import build_algorithm, build_env, build_policy
from robo_rl.learn.checkpoint import (
    checkpoint_name,
    latest_checkpoint,
    load_checkpoint,
    load_run_checkpoint,
    save_checkpoint,
)
from robo_rl.learn.evaluation import inference_actor, run_episodes
from robo_rl.learn.logger import TrainLogger
from robo_rl.learn.policy_video import record_episodes
from robo_rl.learn.train_config import TrainConfig


class TrainingDiverged(RuntimeError):
    """A non-finite observation, reward, loss or parameter; training stopped before saving it.

    Args:
        iteration: the iteration (1-based) that produced the value.
        source: what was non-finite, e.g. "reward in 3 of 64 worlds".
        last_checkpoint: newest checkpoint on disk (the last good one), or None.
    """

    def __init__(self, iteration: int, source: str, last_checkpoint: Path | None):
        kept = f"last good checkpoint: {last_checkpoint}" if last_checkpoint else "no checkpoint was written"
        super().__init__(f"training stopped at iteration {iteration}: non-finite {source}; {kept}")
        self.iteration = iteration
        self.source = source
        self.last_checkpoint = last_checkpoint


def critic_group(obs: dict[str, torch.Tensor]) -> torch.Tensor:
    """The critic's observations (N, O_c): the "critic" group, or "policy" for an env without one."""
    return obs["critic"] if "critic" in obs else obs["policy"]


def _count_bad(x: torch.Tensor) -> str:
    """`"3 of 64 worlds"`: rows of (N, ...) holding a non-finite value."""
    bad = ~torch.isfinite(x.reshape(x.shape[0], -1)).all(-1)  # (N,)
    return f"{int(bad.sum())} of {x.shape[0]} worlds"


def non_finite_step(
    obs: dict[str, torch.Tensor], reward: torch.Tensor | None = None, final_obs: dict[str, torch.Tensor] | None = None
) -> str:
    """"" when observations, reward and pre-reset observations are finite, else what is not (for the message).

    Without observation noise and history the "policy" group is a view of "critic" (TaskEnv), so
    checking "critic" covers both; otherwise, or for an env without a critic group, the policy group
    is checked too.
    """
    critic = critic_group(obs)
    parts = {"reward": reward, "observation": critic}  # reward (N,), observation (N, O_c)
    if obs["policy"] is not critic and obs["policy"]._base is not critic:
        parts["policy observation"] = obs["policy"]
    if final_obs is not None and critic_group(final_obs) is not critic:  # only after resets
        parts["observation before reset"] = critic_group(final_obs)
    for name, x in parts.items():
        if x is not None and not torch.isfinite(x).all():
            return f"{name} in {_count_bad(x)}"
    return ""


def non_finite_update(stats: dict[str, float], module: torch.nn.Module) -> str:
    """"" when every loss statistic and every float tensor of `module` (parameters, buffers) is finite."""
    for key, value in stats.items():
        if not math.isfinite(value):
            return f"{key} ({value})"
    for name, tensor in module.state_dict().items():
        if tensor.is_floating_point() and not torch.isfinite(tensor).all():
            return f"parameter {name}"
    return ""


def rank_config(cfg: TrainConfig, world: distributed.World) -> TrainConfig:
    """The config one rank builds from: its share of the worlds, its own seed stream, its GPU (`cuda:<local_rank>`
    when the run is on CUDA), its share of the machine's cores for physics (when `sim.num_threads` is 0); `cfg`
    itself in a single process.

    Raises:
        ConfigError: the worlds do not split evenly over the ranks (one line).
    """
    if world.size == 1:
        return cfg
    sim = dataclasses.replace(cfg.sim, num_envs=distributed.worlds_per_rank(cfg.sim.num_envs, world.size),
                              device=distributed.rank_device(cfg.sim.device, world.local_rank),
                              num_threads=cfg.sim.num_threads or distributed.threads_per_rank(world.local_size))
    device = cfg.device if cfg.device == "auto" else distributed.rank_device(cfg.device, world.local_rank)
    return dataclasses.replace(cfg, sim=sim, device=device, seed=distributed.rank_seed(cfg.seed, world.rank))


def _to_cpu(tree: Any) -> Any:
    """Tensors of a nested dict/list moved to the CPU (what crosses between ranks and into checkpoints)."""
    if isinstance(tree, torch.Tensor):
        return tree.cpu()
    if isinstance(tree, dict):
        return {k: _to_cpu(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(_to_cpu(v) for v in tree)
    return tree


class Runner:
    """Trains `cfg.task` with the registered algorithm `cfg.algo_name`; everything needed to resume lives in
    the run folder. Subclasses implement `_iteration` (one iteration's collection and updates).

    Args:
        cfg: resolved training config (`sim.num_envs` counts the worlds of all ranks under torchrun).
        run_dir: run directory (config, checkpoints, TensorBoard events, videos); written by rank 0 only.
    """

    def __init__(self, cfg: TrainConfig, run_dir: str | Path):
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.world = distributed.world()
        self.rank_cfg = rank = rank_config(cfg, self.world)
        torch.manual_seed(cfg.seed)  # network initialisation (the same on every rank; rank 0's is broadcast too)
        self.env = build_env(rank)
        self.policy = build_policy(rank, self.env)
        self.generator = torch.Generator(device=self.env.device).manual_seed(rank.seed + 1)  # on the learner's device
        self.algo = build_algorithm(rank, self.env, self.policy, self.generator, **self._algorithm_inputs(rank))
        distributed.broadcast_module(self.policy)
        self.iteration = 0
        self.obs = self.env.reset()
        self.episode_return = torch.zeros(self.env.num_envs, device=self.env.device)
        self.recent_returns: deque[float] = deque(maxlen=200)
        self.train_time = 0.0
        self.resume_notes: list[str] = []
        """What a resume could not restore (printed by the CLI)."""

    def _algorithm_inputs(self, rank_cfg: TrainConfig) -> dict[str, Any]:
        """More keyword arguments for the registered algorithm's `build`, made before it (none by default)."""
        return {}

    # ------------------------------------------------------------------ checkpoints
    def save(self) -> Path | None:
        """Write the checkpoint of this iteration (rank 0; every rank must call it: it gathers their states).
        Returns its path, None on the other ranks."""
        rank_states = distributed.gather_objects(self._rank_state()) if self.world.size > 1 else None
        extras = self._save_extras()
        if not self.world.is_main:
            return None
        path = self.run_dir / checkpoint_name(self.iteration)
        payload = {
            "iteration": self.iteration,
            "train_time": self.train_time,
            "config": self.cfg.to_dict(),
            "config_hash": self.cfg.hash(),
            "algo": self.algo.state_dict(),
            "env": self.env.state_dict(),
            "episode_return": self.episode_return,
        }
        if rank_states is not None:
            payload["world_size"] = self.world.size
            payload["rank_states"] = rank_states[1:]  # rank 0's are the entries above
        payload.update(extras)
        save_checkpoint(path, payload)
        self._after_save(payload)
        return path

    def _rank_state(self) -> dict[str, Any]:
        """What differs between ranks (on the CPU): env state, episode returns, the learner's RNG."""
        return _to_cpu({"env": self.env.state_dict(), "episode_return": self.episode_return,
                        "generator": self.generator.get_state()})

    def _save_extras(self) -> dict[str, Any]:
        """More checkpoint entries, written (with any side files) before the checkpoint itself; called on every
        rank (it may gather), only rank 0's result is written."""
        return {}

    def _after_save(self, payload: dict[str, Any]) -> None:
        """Called once the checkpoint holding `payload` is on disk."""

    def resume(self, state: dict[str, Any] | None = None) -> int:
        """Restore a checkpoint (default: the run directory's latest); returns its iteration (0 if none).

        Args:
            state: an already loaded checkpoint (`load_run_checkpoint`), to avoid reading it twice.
        """
        if state is None:
            ckpt = latest_checkpoint(self.run_dir)
            if ckpt is None:
                return 0
            state = load_run_checkpoint(ckpt)
        self.algo.load_state_dict(state["algo"])
        saved_size = int(state.get("world_size", 1))
        if saved_size == self.world.size:
            own = state if self.world.rank == 0 else state["rank_states"][self.world.rank - 1]
            self.env.load_state_dict(own["env"])
            self.episode_return.copy_(own["episode_return"])
            self.generator.set_state(own.get("generator", state["algo"]["generator"]))
        else:  # the worlds were split otherwise: each rank's worlds start new episodes from its own seed stream
            self.generator.manual_seed(self.rank_cfg.seed + 1 + int(state["iteration"]))
            if self.world.is_main:
                self.resume_notes.append(
                    f"the checkpoint was written by {saved_size} rank(s), this run has {self.world.size}: every "
                    "world starts a new episode; networks, optimisers and normalisers are restored")
        self.iteration = int(state["iteration"])
        self.train_time = float(state["train_time"])
        self._resume_extras(state)
        self.obs = self.env.get_observations()
        return self.iteration

    def _resume_extras(self, state: dict[str, Any]) -> None:
        """Restore what `_save_extras` added."""

    # ------------------------------------------------------------------ training
    def learn(self, logger: TrainLogger | None = None,
              stop: Callable[[Runner], bool] | None = None) -> dict[str, float]:
        """Run until `runner.max_iterations` or `runner.max_time_s`; returns the last logged scalars.

        Args:
            logger: receives every iteration's scalars, the checkpoints' videos and the final summary.
            stop: called after each iteration (outside `train_time`, e.g. to evaluate the policy); training
                ends early, after saving a checkpoint, when it returns True.
        """
        cfg = self.cfg.runner
        samples = self._samples_per_iteration() * self.world.size
        last: dict[str, float] = {}
        if self.iteration < cfg.max_iterations and (bad := non_finite_step(self.obs)):
            raise self._diverged(bad)
        while self.iteration < cfg.max_iterations:
            t0 = time.perf_counter()
            stats, episode_logs, collect_s = self._iteration()
            if bad := non_finite_update(stats, self.policy):
                raise self._diverged(bad)
            t2 = time.perf_counter()
            self.iteration += 1
            self.train_time += t2 - t0

            last = {f"Loss/{k}": v for k, v in stats.items()}
            last.update({k: sum(v) / len(v) for k, v in episode_logs.items()})
            last["Perf/steps_per_s"] = samples / (t2 - t0)
            last["Perf/collect_s"] = collect_s
            last["Perf/update_s"] = t2 - t0 - collect_s
            if self.recent_returns:
                last["Train/mean_return"] = sum(self.recent_returns) / len(self.recent_returns)
            out_of_time = distributed.any_rank(cfg.max_time_s > 0 and self.train_time >= cfg.max_time_s)
            stopped = distributed.any_rank(stop is not None and stop(self))
            final = self.iteration >= cfg.max_iterations or out_of_time or stopped
            if logger is not None:
                logger.log(self.iteration, last, self.train_time, final)
            if self.iteration % cfg.save_interval == 0 or final:
                self.save()
            if logger is not None and (
                (cfg.video_interval and self.iteration % cfg.video_interval == 0) or (final and cfg.video_at_end)
            ):
                logger.video(self.iteration, *self.record_video())
            if out_of_time or stopped:
                break
        return last

    def _iteration(self) -> tuple[dict[str, float], dict[str, list[float]], float]:
        """One iteration: (loss statistics, per-step episode logs by key, seconds spent collecting)."""
        raise NotImplementedError

    def _samples_per_iteration(self) -> int:
        """What `Perf/steps_per_s` counts: env steps of all worlds (offline: demonstration samples); a chunk
        executed open-loop counts its E steps."""
        return self.cfg.algo.num_steps_per_env * self.env.num_envs * getattr(self.env, "steps_per_action", 1)

    def _env_step(self, actions: torch.Tensor, episode_logs: dict[str, list[float]]) -> tuple:
        """Step the env, run the NaN guard, track returns and episode logs; returns what `env.step` returns."""
        obs, reward, terminated, truncated, info = self.env.step(actions)
        if bad := non_finite_step(obs, reward, info["final_obs"]):
            raise self._diverged(bad)
        self._track_returns(reward, terminated | truncated)
        for k, v in info["log"].items():
            episode_logs.setdefault(k, []).append(float(v))
        return obs, reward, terminated, truncated, info

    def _diverged(self, source: str) -> TrainingDiverged:
        return TrainingDiverged(self.iteration + 1, source, latest_checkpoint(self.run_dir))

    def _track_returns(self, reward: torch.Tensor, done: torch.Tensor) -> None:
        self.episode_return += reward
        ended = done.nonzero().squeeze(-1)
        if ended.numel():
            self.recent_returns.extend(self.episode_return[ended].tolist())
            self.episode_return[ended] = 0.0

    def record_video(self) -> tuple[Path, list, float]:
        """Evaluation episodes of the deterministic policy in a separate single-world env.

        Returns:
            (path of the MP4 written, its frames (H, W, 3) uint8, frames per second).
        """
        env = build_env(self.rank_cfg, num_envs=1, seed=self.cfg.seed + 12345)
        try:
            frames = record_episodes(env, inference_actor(self.policy), self.cfg.runner.video_episodes)
        finally:
            env.close()
        path = self.run_dir / "videos" / f"eval_{self.iteration:06d}.mp4"
        write_mp4(path, frames, fps=1.0 / env.dt)
        return path, frames, 1.0 / env.dt

    def evaluate(self, episodes: int) -> dict[str, Any]:
        """Mean return and task metrics of the deterministic policy, one episode per world of a fresh env."""
        env = build_env(self.rank_cfg, num_envs=episodes, seed=self.cfg.seed + 54321)
        try:
            return run_episodes(env, inference_actor(self.policy))
        finally:
            env.close()

    def close(self) -> None:
        self.env.close()


class OnPolicyRunner(Runner):
    """Rollouts of `algo.num_steps_per_env` steps, then one update (PPO).

    An algorithm whose `whole_episodes` is true (GRPO) gets rollouts of whole episodes: every iteration starts with a
    reset of all worlds at the start of their episodes, and each step's ended episodes (`info["episode"]`) go to its
    `record_episode_ends` before `process_env_step`.
    """

    def _iteration(self) -> tuple[dict[str, float], dict[str, list[float]], float]:
        algo = self.algo
        t0 = time.perf_counter()
        episode_logs: dict[str, list[float]] = {}
        obs = self.obs
        groups = getattr(algo, "reads_observation_groups", False)  # a VLA learner: images and instructions too
        whole = getattr(algo, "whole_episodes", False)
        if whole:
            obs = self.env.reset(random_start=False)
            self.episode_return.zero_()
        for _ in range(self.cfg.algo.num_steps_per_env):
            actions = algo.act(obs, obs) if groups else algo.act(obs["policy"], critic_group(obs))
            obs, reward, terminated, truncated, info = self._env_step(actions, episode_logs)
            final = info["final_obs"]
            if whole:
                algo.record_episode_ends(info["episode"])
            algo.process_env_step(reward, terminated, truncated, final if groups else critic_group(final))
        algo.compute_returns(obs if groups else critic_group(obs))
        self.obs = obs
        collect_s = time.perf_counter() - t0
        return algo.update(), episode_logs, collect_s


REPLAY_PREFIX = "replay_"
"""Replay buffer files beside the checkpoints: `replay_<iteration>.pt`, only the newest checkpoint's kept."""


def keep_only_replay(run_dir: Path, name: str | None) -> None:
    """Delete every replay buffer file of a run but `name` (the one the newest checkpoint names; None: all)."""
    for path in Path(run_dir).glob(f"{REPLAY_PREFIX}*.pt"):
        if path.name != name:
            path.unlink(missing_ok=True)


class OffPolicyRunner(Runner):
    """`algo.num_steps_per_env` env steps per iteration, each followed by the algorithm's gradient steps (SAC).

    The replay buffer is saved beside each checkpoint as `replay_<iteration>.pt` (written before the
    checkpoint that names it; older ones are deleted after it), unless `algo.save_replay` is off or
    the buffer exceeds `algo.save_replay_max_mb`. A resume without one refills the buffer from empty.

    Args:
        cfg: resolved training config.
        run_dir: run directory.
        demos: in-memory demonstration arrays for `algo.demo_ratio` (`replay_buffer.load_demo_arrays`).
    """

    def __init__(self, cfg: TrainConfig, run_dir: str | Path, demos: dict[str, Any] | None = None):
        super().__init__(cfg, run_dir)
        if demos is not None:
            self.algo.load_demos(demos)
        self.algo.check_ready_to_train()

    def _iteration(self) -> tuple[dict[str, float], dict[str, list[float]], float]:
        algo = self.algo
        episode_logs: dict[str, list[float]] = {}
        sums: dict[str, float] = {}
        counts: dict[str, int] = {}
        collect_s = 0.0
        obs = self.obs
        for _ in range(self.cfg.algo.num_steps_per_env):
            t0 = time.perf_counter()
            actions = algo.act(obs["policy"], critic_group(obs))
            obs, reward, terminated, truncated, info = self._env_step(actions, episode_logs)
            final = info["final_obs"]
            algo.process_env_step(reward, terminated, truncated, final["policy"], critic_group(final))
            collect_s += time.perf_counter() - t0
            for k, v in algo.update().items():
                sums[k] = sums.get(k, 0.0) + v
                counts[k] = counts.get(k, 0) + 1
        self.obs = obs
        return {k: v / counts[k] for k, v in sums.items()}, episode_logs, collect_s

    def _save_extras(self) -> dict[str, Any]:
        cfg = self.cfg.algo
        fits = cfg.save_replay and self.algo.replay_nbytes() <= cfg.save_replay_max_mb * 2**20
        if distributed.any_rank(not fits):
            return {"replay": None}
        name = f"{REPLAY_PREFIX}{self.iteration:06d}.pt"
        if self.world.size == 1:
            save_checkpoint(self.run_dir / name, self.algo.replay_state_dict())
        else:  # one file with every rank's buffer, in rank order
            replays = distributed.gather_objects(_to_cpu(self.algo.replay_state_dict()))
            if self.world.is_main:
                save_checkpoint(self.run_dir / name, {"rank_replays": replays})
        return {"replay": name}

    def _after_save(self, payload: dict[str, Any]) -> None:
        keep_only_replay(self.run_dir, payload["replay"])

    def _resume_extras(self, state: dict[str, Any]) -> None:
        name = state.get("replay")
        why = "was not saved (algo.save_replay, algo.save_replay_max_mb)" if not name else f"file {name} is missing"
        replays = None  # rank 0: the buffer of every rank, when the file holds one per rank of this run
        if self.world.is_main and name and (self.run_dir / name).is_file():
            saved = load_checkpoint(self.run_dir / name)
            replays = saved.get("rank_replays", [saved])
            if len(replays) != self.world.size:
                why = f"file {name} holds {len(replays)} rank(s)' buffers, this run has {self.world.size}"
                replays = None
        if distributed.broadcast_object(replays is not None):
            self.algo.load_replay_state_dict(distributed.scatter_object(replays))
            return
        if self.world.is_main:
            self.resume_notes.append(
                f"the replay buffer {why}: it refills from empty and learning waits "
                f"{self.cfg.algo.learning_starts} env steps; networks, optimisers and RNG states are restored"
            )


class OfflineRunner(Runner):
    """Gradient steps on a fixed dataset (behaviour cloning); the env is only for evaluation and video."""

    def _iteration(self) -> tuple[dict[str, float], dict[str, list[float]], float]:
        return self.algo.update(), {}, 0.0

    def _samples_per_iteration(self) -> int:
        return self.cfg.algo.num_steps_per_env * self.cfg.algo.batch_size


def make_runner(cfg: TrainConfig, run_dir: str | Path, **kwargs: Any) -> Runner:
    """The runner class the registered algorithm's entry names (`runner_cls`): `OnPolicyRunner`, `OffPolicyRunner`
    (which takes `demos=`), `OfflineRunner` or a subclass of one."""
    return ALGORITHMS.get(cfg.algo_name).runner_cls(cfg, run_dir, **kwargs)
