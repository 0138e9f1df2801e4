"""The on-policy training loop: rollout, update, log, checkpoint, evaluation video, resume."""

from __future__ import annotations

import time
from collections import deque
from pathlib import Path
from typing import Any

import torch
import yaml

from robo_rl.algos.ppo import PPO
from robo_rl.builders import build_env, build_policy
from robo_rl.checkpoint import checkpoint_name, latest_checkpoint, load_checkpoint, save_checkpoint
from robo_rl.config import TrainConfig
from robo_rl.logger import TrainLogger

CONFIG_FILE = "config.yaml"


def write_config(run_dir: Path, cfg: TrainConfig) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / CONFIG_FILE).write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))


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

    def resume(self) -> int:
        """Restore the latest checkpoint of the run directory; returns its iteration (0 if none)."""
        ckpt = latest_checkpoint(self.run_dir)
        if ckpt is None:
            return 0
        state = load_checkpoint(ckpt)
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
        while self.iteration < cfg.max_iterations:
            t0 = time.perf_counter()
            episode_logs: dict[str, list[float]] = {}
            obs = self.obs
            for _ in range(steps):
                actions = algo.act(obs["policy"], obs["critic"])
                obs, reward, terminated, truncated, info = env.step(actions)
                algo.process_env_step(reward, terminated, truncated, info["final_obs"]["critic"])
                self._track_returns(reward, terminated | truncated)
                for k, v in info["log"].items():
                    episode_logs.setdefault(k, []).append(float(v))
            algo.compute_returns(obs["critic"])
            self.obs = obs
            t1 = time.perf_counter()
            stats = algo.update()
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

