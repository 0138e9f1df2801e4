"""The on-policy training loop: rollout, update, log, checkpoint, evaluation video, resume.

NaN guard: after every env step the observations and rewards are checked (one `isfinite` reduction
each), after every update the loss statistics and the policy's parameters and normaliser buffers.
The first non-finite value raises `TrainingDiverged` before anything else is logged or saved, so
the newest checkpoint on disk is the last good one.
"""

from __future__ import annotations

import math
import time
from collections import deque
from pathlib import Path
from typing import Any

import torch
import yaml

from robo_rl.algos.ppo import PPO
from robo_rl.builders import build_env, build_policy
from robo_rl.checkpoint import (
    atomic_write,
    checkpoint_name,
    latest_checkpoint,
    load_run_checkpoint,
    save_checkpoint,
)
from robo_rl.config import TrainConfig
from robo_rl.logger import TrainLogger

CONFIG_FILE = "config.yaml"


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


def _count_bad(x: torch.Tensor) -> str:
    """`"3 of 64 worlds"`: rows of (N, ...) holding a non-finite value."""
    bad = ~torch.isfinite(x.reshape(x.shape[0], -1)).all(-1)  # (N,)
    return f"{int(bad.sum())} of {x.shape[0]} worlds"


def non_finite_step(
    obs: dict[str, torch.Tensor], reward: torch.Tensor | None = None, final_obs: dict[str, torch.Tensor] | None = None
) -> str:
    """"" when observations, reward and pre-reset observations are finite, else what is not (for the message).

    Without observation noise and history the "policy" group is a view of "critic", so checking
    "critic" covers both; otherwise the policy group is checked too.
    """
    parts = {"reward": reward, "observation": obs["critic"]}  # reward (N,), observation (N, O_c)
    if obs["policy"]._base is not obs["critic"]:
        parts["policy observation"] = obs["policy"]
    if final_obs is not None and final_obs["critic"] is not obs["critic"]:  # only after resets
        parts["observation before reset"] = final_obs["critic"]
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


def write_config(run_dir: Path, cfg: TrainConfig) -> None:
    """Write `<run_dir>/config.yaml` atomically (a crash leaves the old file or the new one, never half)."""
    text = yaml.safe_dump(cfg.to_dict(), sort_keys=False)
    atomic_write(Path(run_dir) / CONFIG_FILE, lambda tmp: Path(tmp).write_text(text))


class OnPolicyRunner:
    """Trains `cfg.task` with PPO; everything needed to resume lives in the checkpoints.

    Args:
        cfg: resolved training config.
        run_dir: run directory (config, checkpoints, TensorBoard events, videos).
    """

    def __init__(self, cfg: TrainConfig, run_dir: str | Path):
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        torch.manual_seed(cfg.seed)  # network initialisation
        self.env = build_env(cfg)
        self.policy = build_policy(cfg, self.env)
        self.algo = PPO(cfg.algo, self.policy, self.env.num_envs, torch.Generator().manual_seed(cfg.seed + 1))
        self.iteration = 0
        self.obs = self.env.reset()
        self.episode_return = torch.zeros(self.env.num_envs)
        self.recent_returns: deque[float] = deque(maxlen=200)
        self.train_time = 0.0

    # ------------------------------------------------------------------ checkpoints
    def save(self) -> Path:
        path = self.run_dir / checkpoint_name(self.iteration)
        save_checkpoint(
            path,
            {
                "iteration": self.iteration,
                "train_time": self.train_time,
                "config": self.cfg.to_dict(),
                "config_hash": self.cfg.hash(),
                "algo": self.algo.state_dict(),
                "env": self.env.state_dict(),
                "episode_return": self.episode_return,
            },
        )
        return path

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
        self.env.load_state_dict(state["env"])
        self.episode_return.copy_(state["episode_return"])
        self.iteration = int(state["iteration"])
        self.train_time = float(state["train_time"])
        self.obs = self.env.get_observations()
        return self.iteration

    # ------------------------------------------------------------------ training
    def learn(self, logger: TrainLogger | None = None) -> dict[str, float]:
        """Run until `runner.max_iterations` or `runner.max_time_s`; returns the last logged scalars."""
        cfg, env, algo = self.cfg.runner, self.env, self.algo
        steps = self.cfg.algo.num_steps_per_env
        last: dict[str, float] = {}
        if self.iteration < cfg.max_iterations and (bad := non_finite_step(self.obs)):
            raise self._diverged(bad)
        while self.iteration < cfg.max_iterations:
            t0 = time.perf_counter()
            episode_logs: dict[str, list[float]] = {}
            obs = self.obs
            for _ in range(steps):
                actions = algo.act(obs["policy"], obs["critic"])
                obs, reward, terminated, truncated, info = env.step(actions)
                if bad := non_finite_step(obs, reward, info["final_obs"]):
                    raise self._diverged(bad)
                algo.process_env_step(reward, terminated, truncated, info["final_obs"]["critic"])
                self._track_returns(reward, terminated | truncated)
                for k, v in info["log"].items():
                    episode_logs.setdefault(k, []).append(float(v))
            algo.compute_returns(obs["critic"])
            self.obs = obs
            t1 = time.perf_counter()
            stats = algo.update()
            if bad := non_finite_update(stats, self.policy):
                raise self._diverged(bad)
            t2 = time.perf_counter()
            self.iteration += 1
            self.train_time += t2 - t0

            last = {f"Loss/{k}": v for k, v in stats.items()}
            last.update({k: sum(v) / len(v) for k, v in episode_logs.items()})
            last["Perf/steps_per_s"] = steps * env.num_envs / (t2 - t0)
            last["Perf/collect_s"] = t1 - t0
            last["Perf/update_s"] = t2 - t1
            if self.recent_returns:
                last["Train/mean_return"] = sum(self.recent_returns) / len(self.recent_returns)
            out_of_time = cfg.max_time_s > 0 and self.train_time >= cfg.max_time_s
            final = self.iteration >= cfg.max_iterations or out_of_time
            if logger is not None:
                logger.log(self.iteration, last, self.train_time, final)
            if self.iteration % cfg.save_interval == 0 or final:
                self.save()
            if logger is not None and (
                (cfg.video_interval and self.iteration % cfg.video_interval == 0) or (final and cfg.video_at_end)
            ):
                logger.video(self.iteration, *self.record_video())
            if out_of_time:
                break
        return last

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
        from robo_rl.video import record_episodes, write_mp4

        env = build_env(self.cfg, num_envs=1, seed=self.cfg.seed + 12345)
        try:
            frames = record_episodes(env, self.policy.act_inference, self.cfg.runner.video_episodes)
        finally:
            env.close()
        path = self.run_dir / "videos" / f"eval_{self.iteration:06d}.mp4"
        write_mp4(path, frames, fps=1.0 / env.dt)
        return path, frames, 1.0 / env.dt

    def evaluate(self, episodes: int) -> dict[str, Any]:
        """Mean return and task metrics of the deterministic policy, one episode per world of a fresh env."""
        from robo_rl.evaluate import run_episodes

        env = build_env(self.cfg, num_envs=episodes, seed=self.cfg.seed + 54321)
        try:
            return run_episodes(env, self.policy.act_inference)
        finally:
            env.close()

    def close(self) -> None:
        self.env.close()

