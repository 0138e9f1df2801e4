"""The learner of learning on a robot: SAC or RLPD trained from the transitions an actor process streams.

`RealRobotLearner` owns the `LearnerService` (gRPC: transitions in, actor weights out) and one training loop on the
main thread. Every pass it marks itself alive (`heartbeat`), moves the received transition batches into SAC's replay
buffer (one world, `SAC.add_transitions`), runs one `SAC.update` per received environment step (its
`updates_per_step` gradient steps; a backlog beyond `max_updates_owed` is forgiven, so a slow learner does not chase
old data), and at most every `publish_interval_s` publishes the actor's newest weights with a version number. RLPD is
SAC with half of every batch from demonstrations (`rlpd_variant`; a LeRobot dataset through `--dataset`, e.g. the
actor's own recording).

Checkpoints, the replay buffer beside each one (`replay_<iteration>.pt`), TensorBoard and the run folder's
config and provenance are those of sim training (`robo_rl.learn.checkpoint`, `logger`, `run_folder`), every file
written atomically, every `save_interval_s` and at the end (Ctrl-C, SIGTERM): a learner killed at any moment resumes
from its newest checkpoint, replay buffer included. An actor that dies costs the learner nothing: it keeps its
buffer, keeps training on it and keeps serving, and a restarted actor's episodes are new ones.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import secrets
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from robo_rl.core.config import MAX_SEED, ConfigError, _f, apply_overrides, build, to_plain
from robo_rl.deploy.actor_weights import ActorWeights
from robo_rl.deploy.learner_wire import CHUNK_BYTES, DEFAULT_ADDRESS, parse_address
from robo_rl.learn.algorithm_registry import ALGORITHMS, EnvSpec
from robo_rl.learn.algorithms.sac import SAC, SACConfig, SACPolicy, SACPolicyConfig, rlpd_variant
from robo_rl.learn.checkpoint import (
    checkpoint_name,
    latest_checkpoint,
    load_checkpoint,
    load_run_checkpoint,
    save_checkpoint,
)
from robo_rl.learn.learner_service import LearnerService
from robo_rl.learn.logger import TrainLogger
from robo_rl.learn.networks.normalizer import EmpiricalNormalization
from robo_rl.learn.networks.squashed_gaussian import trunk_layers
from robo_rl.learn.runner import REPLAY_PREFIX, TrainingDiverged, keep_only_replay, non_finite_update


@dataclass(frozen=True, kw_only=True)
class LearnerConfig:
    """The learner process: where it listens, how often it publishes, saves and logs."""

    address: str = DEFAULT_ADDRESS
    """`host:port` to listen on (127.0.0.1: this machine only; 0.0.0.0: every interface, no encryption)."""
    receive_queue_batches: int = _f(1024, ge=1)
    """Transition batches waiting for the training loop; beyond this the oldest are dropped (and counted)."""
    publish_interval_s: float = _f(0.5, gt=0.0)
    """Publish the actor's weights at most this often (when they changed)."""
    stall_timeout_s: float = _f(5.0, gt=0.0)
    """Refuse parameter requests when the training loop has not run for this long (a hung learner)."""
    save_interval_s: float = _f(60.0, gt=0.0)
    """Write a checkpoint (with the replay buffer) this often, and at the end."""
    log_interval_s: float = _f(10.0, gt=0.0)
    """Write TensorBoard scalars and print a progress line this often."""
    max_updates_owed: int = _f(1000, ge=1)
    """Updates owed for received steps beyond this are forgiven."""
    chunk_bytes: int = _f(CHUNK_BYTES, ge=1024, le=CHUNK_BYTES)
    """Largest chunk of the weights on the wire."""
    max_time_s: float = _f(0.0, ge=0.0)
    """Stop after this many seconds (0: run until stopped)."""

    def validate(self) -> None:
        try:
            parse_address(self.address, any_port=True)
        except ValueError as exc:
            raise ConfigError(f"config error: learner.address: {exc}") from None


@dataclass(frozen=True, kw_only=True)
class RealTrainConfig:
    """A learner's run on a robot: written into its run folder and every checkpoint."""

    algo_name: str = _f("sac", choices=("sac", "rlpd"))
    """sac, or rlpd (SAC with demonstrations: half of every batch from `algo.dataset`)."""
    template: str
    """The exported policy whose contract fixes observations and actions (the actor's `--policy`)."""
    obs_dim: int = _f(ge=1)
    """O, from the template's contract."""
    action_dim: int = _f(ge=1)
    """A, from the template's contract."""
    action_clip: float | None = None
    """The contract's action clip (the actor's bound defaults to it)."""
    seed: int = _f(0, ge=0, le=MAX_SEED)
    """Seeds the networks and the learner's sampling."""
    device: str = "cpu"
    """Torch device of networks and replay buffer (cpu, cuda, cuda:1, ...)."""
    algo: SACConfig = field(default_factory=SACConfig)
    policy: SACPolicyConfig = field(default_factory=SACPolicyConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)

    def validate(self) -> None:
        # SAC's own cross-section checks, for one world
        self.algo.check_sections(SimpleNamespace(sim=SimpleNamespace(num_envs=1), policy=self.policy))
        if self.algo.demo_ratio > 0 and not self.algo.dataset:
            raise ConfigError(f"config error: algo_name = {self.algo_name}: needs demonstrations (--dataset PATH, a "
                              "LeRobot v3.0 dataset such as an actor's recording)")

    def to_dict(self) -> dict[str, Any]:
        return to_plain(self)

    def hash(self) -> str:
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:12]


REAL_ROBOT_SAC = {
    "algo": {"num_steps_per_env": 1, "buffer_size": 200_000, "batch_size": 256, "updates_per_step": 2,
             "policy_delay": 2, "learning_starts": 250, "gamma": 0.97, "tau": 0.02, "n_step": 3,
             "actor_learning_rate": 1e-3, "critic_learning_rate": 1e-3, "alpha_learning_rate": 1e-3,
             "init_alpha": 1e-3, "target_entropy_per_dim": -0.5, "action_smoothness": 0.1},
    "policy": {"actor_hidden_dims": [128, 128], "critic_hidden_dims": [128, 128]},
}
"""SAC for one robot at 50 Hz on a small CPU: the arm-reach SAC preset's learning rates and networks
(sim_configs/arm-reach-sac.yaml), a buffer of ~1 hour, 5 s of random actions before learning starts."""


def resolve_config(algo_name: str, *, template: str, obs_dim: int, action_dim: int, action_clip: float | None,
                   overrides: list[str] = (), dataset: str | None = None, seed: int = 0,
                   address: str = DEFAULT_ADDRESS) -> RealTrainConfig:
    """The learner's config: REAL_ROBOT_SAC, RLPD's recipe for `rlpd` (4 critics, 4 updates per step), then the
    `--set` overrides (KEY=VALUE); ConfigError (one line) for a bad key or value."""
    if algo_name not in ("sac", "rlpd"):
        raise ConfigError(f"--algo {algo_name!r}: allowed values are sac, rlpd")
    algo = build(SACConfig, REAL_ROBOT_SAC["algo"], "algo")
    policy = build(SACPolicyConfig, REAL_ROBOT_SAC["policy"], "policy")
    if algo_name == "rlpd":
        algo, policy = rlpd_variant(algo, policy, num_critics=4, updates_per_step=4)
    raw = {"algo_name": algo_name, "template": template, "obs_dim": obs_dim, "action_dim": action_dim,
           "action_clip": action_clip, "seed": seed, "algo": {**to_plain(algo), "dataset": dataset or ""},
           "policy": to_plain(policy), "learner": {"address": address}}
    return build(RealTrainConfig, apply_overrides(raw, overrides))


def actor_weights(policy: SACPolicy, *, learner_id: str, version: int, random_actions: bool) -> ActorWeights:
    """The actor's half of `policy` as numpy arrays (`robo_rl.deploy.actor_weights`)."""
    norm = policy.obs_normalizer
    stats = None
    if isinstance(norm, EmpiricalNormalization):
        stats = (norm.mean.detach().cpu().numpy().copy(), norm.var.detach().cpu().numpy().copy())
    actor = policy.actor
    head = [(m.weight.detach().cpu().numpy().copy(), m.bias.detach().cpu().numpy().copy())
            for m in (actor.mean, actor.log_std)]
    return ActorWeights(layers=trunk_layers(actor.trunk), mean_head=head[0], log_std_head=head[1],
                        log_std_bounds=(actor.log_std_low, actor.log_std_high),
                        obs_mean=None if stats is None else stats[0], obs_var=None if stats is None else stats[1],
                        obs_eps=float(getattr(norm, "eps", 0.0)), obs_clip=float(getattr(norm, "clip", 0.0)),
                        bound=float(policy.action_bound), learner_id=learner_id, version=version,
                        random_actions=random_actions)


class RealRobotLearner:
    """SAC / RLPD behind a `LearnerService`; see the module docstring.

    Args:
        cfg: the resolved config.
        run_dir: the run folder (created and locked by the caller); checkpoints and TensorBoard go here.
        log: receives progress and event lines.
        clock: monotonic time (s).
    """

    def __init__(self, cfg: RealTrainConfig, run_dir: str | Path, *, log: Callable[[str], None] = print,
                 clock: Callable[[], float] = time.monotonic):
        self.cfg, self.run_dir, self.log, self.clock = cfg, Path(run_dir), log, clock
        device = torch.device(cfg.device)
        self.spec = EnvSpec(num_envs=1, obs_dim=cfg.obs_dim, critic_obs_dim=cfg.obs_dim, action_dim=cfg.action_dim,
                            action_clip=cfg.action_clip, device=device)
        torch.manual_seed(cfg.seed)
        entry = ALGORITHMS.get("sac")
        self.policy: SACPolicy = entry.build_policy(cfg.policy, self.spec)
        self.generator = torch.Generator(device=device).manual_seed(cfg.seed + 1)
        self.algo: SAC = entry.build(cfg.algo, self.policy, self.spec, self.generator)
        try:
            self.algo.check_ready_to_train()  # RLPD: loads the demonstrations of algo.dataset
        except ValueError as exc:
            raise ConfigError(f"--dataset: {exc}") from None
        self.learner_id = secrets.token_hex(6)
        lc = cfg.learner
        self.service = LearnerService(lc.address, learner_id=self.learner_id, obs_dim=cfg.obs_dim,
                                      action_dim=cfg.action_dim, queue_batches=lc.receive_queue_batches,
                                      stall_timeout_s=lc.stall_timeout_s, chunk_bytes=lc.chunk_bytes, clock=clock)
        self.iteration = 0
        """`SAC.update` calls (each `algo.updates_per_step` gradient steps); names the checkpoints."""
        self.version = 0
        """Of the published weights; restored by a resume, so it keeps increasing over restarts."""
        self.train_time = 0.0
        self.owed = 0
        self.interventions = 0  # steps of operator takeovers received (also in the demonstrations)
        self.recent_returns: deque[float] = deque(maxlen=100)
        self._episode_return = 0.0
        self._loss_sums: dict[str, float] = {}
        self._loss_counts: dict[str, int] = {}
        self._published: tuple[int, bool] | None = None  # (iteration, random_actions) of the published weights
        self._logged_iteration = 0

    # ------------------------------------------------------------------ data in, weights out
    def ingest(self, batch: dict[str, np.ndarray]) -> None:
        """Store one received transition batch (`learner_wire.TRANSITION_KEYS`) and owe one update per step."""
        self.algo.add_transitions({k: torch.from_numpy(np.asarray(v)) for k, v in batch.items()
                                   if k not in ("seq", "intervention")})
        taken = np.asarray(batch["intervention"], dtype=bool)
        if taken.any():  # an operator's takeover: also a demonstration (HIL-SERL), sampled by RLPD's demo share
            self.algo.add_demos({k: np.asarray(batch[k])[taken] for k in
                                 ("obs", "action", "reward", "next_obs", "terminated", "truncated")})
            self.interventions += int(taken.sum())
        self.owed = min(self.owed + len(batch["seq"]), self.cfg.learner.max_updates_owed)
        done = batch["terminated"] | batch["truncated"]
        for reward, start, end in zip(batch["reward"], batch["episode_start"], done, strict=True):
            self._episode_return = float(reward) + (0.0 if start else self._episode_return)
            if end:
                self.recent_returns.append(self._episode_return)

    def publish(self) -> None:
        """Publish the actor's weights as a new version, when they changed since the last publication."""
        random_actions = not self.algo.ready()
        if self._published == (self.iteration, random_actions):
            return
        self.version += 1
        self.service.publish(actor_weights(self.policy, learner_id=self.learner_id, version=self.version,
                                           random_actions=random_actions))
        self._published = (self.iteration, random_actions)

    def train_step(self) -> bool:
        """One `SAC.update` when one is owed and the buffer is ready; False when there was nothing to do."""
        if self.owed <= 0 or not self.algo.ready():
            return False
        t0 = time.perf_counter()
        stats = self.algo.update()
        self.train_time += time.perf_counter() - t0
        if bad := non_finite_update(stats, self.policy):
            raise TrainingDiverged(self.iteration + 1, bad, latest_checkpoint(self.run_dir))
        self.owed -= 1
        self.iteration += 1
        for k, v in stats.items():
            self._loss_sums[k] = self._loss_sums.get(k, 0.0) + v
            self._loss_counts[k] = self._loss_counts.get(k, 0) + 1
        return True

    # ------------------------------------------------------------------ checkpoints
    def save(self) -> Path:
        """Write the replay buffer (when it fits `algo.save_replay_max_mb`), then the checkpoint naming it, each
        atomically; older replay files are deleted after."""
        a = self.cfg.algo
        fits = a.save_replay and self.algo.replay_nbytes() <= a.save_replay_max_mb * 2**20
        replay = f"{REPLAY_PREFIX}{self.iteration:06d}.pt" if fits else None
        if replay is not None:
            save_checkpoint(self.run_dir / replay, self.algo.replay_state_dict())
        path = self.run_dir / checkpoint_name(self.iteration)
        save_checkpoint(path, {
            "iteration": self.iteration, "train_time": self.train_time, "config": self.cfg.to_dict(),
            "config_hash": self.cfg.hash(), "algo": self.algo.state_dict(), "env": {},
            "episode_return": torch.zeros(1), "replay": replay,
            "learner": {"version": self.version, "env_steps": self.algo.env_steps},
        })
        keep_only_replay(self.run_dir, replay)
        return path

    def resume(self) -> int:
        """Restore the run folder's newest checkpoint and its replay buffer; its iteration (0 without one)."""
        ckpt = latest_checkpoint(self.run_dir)
        if ckpt is None:
            return 0
        state = load_run_checkpoint(ckpt)
        self.algo.load_state_dict(state["algo"])
        replay = state.get("replay")
        if replay and (self.run_dir / replay).is_file():
            self.algo.load_replay_state_dict(load_checkpoint(self.run_dir / replay))
        else:
            self.log(f"learner: the replay buffer of {ckpt.name} was not saved; it refills from the actor")
        self.iteration = int(state["iteration"])
        self.train_time = float(state["train_time"])
        self.version = int(state.get("learner", {}).get("version", 0))
        self._logged_iteration = self.iteration
        return self.iteration

    # ------------------------------------------------------------------ loop
    def run(self, should_stop: Callable[[], bool] | None = None, logger: TrainLogger | None = None) -> None:
        """Serve and train until `learner.max_time_s` or `should_stop()` (or Ctrl-C / SIGTERM as KeyboardInterrupt);
        always saves a last checkpoint, except after a divergence (the newest on disk is then the last good one).
        Starts the service unless the caller did (`service.start()`: OSError when its address cannot be bound)."""
        lc = self.cfg.learner
        self.publish()
        if self.service.port is None:
            self.service.start()
        host, _ = parse_address(self.service.address, any_port=True)
        self.log(f"learner: listening on {host}:{self.service.port} (learner {self.learner_id}, run {self.run_dir}); "
                 f"replay buffer {self.algo.buffer.size} steps, version {self.version}")
        start = last_log = last_save = last_publish = self.clock()
        diverged = False
        try:
            while not (should_stop is not None and should_stop()):
                self.service.heartbeat()
                for batch in self.service.take():
                    self.ingest(batch)
                if not self.train_step():
                    self.service.wait(0.02)
                now = self.clock()
                if now - last_publish >= lc.publish_interval_s:
                    self.publish()
                    last_publish = now
                if now - last_save >= lc.save_interval_s:
                    self.save()
                    last_save = now
                if now - last_log >= lc.log_interval_s:
                    self._log(logger, now - last_log)
                    last_log = now
                if lc.max_time_s and now - start >= lc.max_time_s:
                    break
        except TrainingDiverged:
            diverged = True
            raise
        finally:
            self.service.stop()
            if not diverged:
                path = self.save()
                self.log(f"learner: saved {path}")

    def scalars(self, seconds: float) -> dict[str, float]:
        """TensorBoard scalars since the last call (losses averaged over it)."""
        out = {f"Loss/{k}": v / self._loss_counts[k] for k, v in self._loss_sums.items()}
        self._loss_sums, self._loss_counts = {}, {}
        s = self.service
        out.update({"Learner/env_steps": self.algo.env_steps, "Learner/interventions": self.interventions,
                    "Learner/received": s.received,
                    "Learner/dropped": s.dropped, "Learner/actor_dropped": sum(s.actor_dropped.values()),
                    "Learner/version": self.version, "Learner/replay_size": self.algo.buffer.size,
                    "Perf/updates_per_s": (self.iteration - self._logged_iteration) / max(seconds, 1e-9)})
        self._logged_iteration = self.iteration
        if self.recent_returns:
            out["Train/mean_return"] = sum(self.recent_returns) / len(self.recent_returns)
        return out

    def _log(self, logger: TrainLogger | None, seconds: float) -> None:
        scalars = self.scalars(seconds)
        if logger is not None:
            logger.log(self.iteration, scalars, self.train_time, final=False)
        ret = scalars.get("Train/mean_return", math.nan)
        self.log(f"learner: {self.service.received} steps received (dropped {self.service.dropped}), "
                 f"{self.algo.buffer.size} in the replay buffer, {self.iteration} updates, version {self.version}, "
                 f"return {ret:.3f}, critic loss {scalars.get('Loss/critic_loss', math.nan):.4f}")


def check_resumable(saved: dict[str, Any], cfg: RealTrainConfig) -> None:
    """ConfigError (one line) when a run's saved config does not fit this start: another template shape or
    algorithm (a resume keeps its learning problem)."""
    for key in ("algo_name", "obs_dim", "action_dim"):
        if saved.get(key) != getattr(cfg, key):
            raise ConfigError(f"cannot resume: the run has {key} = {saved.get(key)!r}, this start "
                              f"{getattr(cfg, key)!r} (a resumed run keeps its learning problem)")


def replace_learner(cfg: RealTrainConfig, **changes: Any) -> RealTrainConfig:
    """`cfg` with learner fields changed (what a resume may change: address, intervals, max_time_s)."""
    return dataclasses.replace(cfg, learner=dataclasses.replace(cfg.learner, **changes))
