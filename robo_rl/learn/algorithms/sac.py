"""Soft Actor-Critic for N parallel worlds, with the massively-parallel and RLPD refinements.

Tanh-squashed Gaussian actor with a bounded log-std, actions bounded by the task's action clip
(or a tighter `policy.action_bound`); an ensemble of LayerNorm Q critics (scalar or C51), whose
target is the minimum over a random subset of members (REDQ; the plain clipped double Q for two);
automatic temperature toward a target entropy; Polyak-averaged target critics; n-step returns that
bootstrap through time-outs but not terminations; a configurable number of gradient steps per env
step; empirical observation normalisation; a replay buffer preallocated on the training device; and
RLPD's symmetric sampling from demonstrations (`demo_ratio`, `rlpd_variant`). Defaults and their
sources: shared/REFERENCES.md (FastSAC, "Getting SAC to work on a massive parallel simulator", SERL).
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from robo_rl.core.config import ConfigError, _f
from robo_rl.learn import distributed
from robo_rl.learn.algorithm_registry import ALGORITHMS, AlgorithmEntry, EnvSpec
from robo_rl.learn.networks.normalizer import EmpiricalNormalization
from robo_rl.learn.networks.q_ensemble import QEnsemble, categorical_projection, subset_min
from robo_rl.learn.networks.squashed_gaussian import ScaledTanhMean, SquashedGaussianActor
from robo_rl.learn.replay_buffer import (
    DemoBuffer,
    ReplayBuffer,
    dataset_transitions,
    demo_share,
    load_demo_arrays,
    mixed_batch,
)
from robo_rl.learn.runner import OffPolicyRunner


@dataclass(frozen=True, kw_only=True)
class SACConfig:
    """SAC hyper-parameters (sources in shared/REFERENCES.md)."""

    num_steps_per_env: int = _f(8, ge=1)
    """Env steps per iteration (the unit of logging, checkpoints and `runner.max_iterations`)."""
    buffer_size: int = _f(1_000_000, ge=1, le=10**9)
    """Replay capacity in transitions, over all worlds (buffer_size // sim.num_envs steps per world)."""
    batch_size: int = _f(1024, ge=1, le=10**7)
    """Transitions per gradient step (FastSAC 8192; large batches suit many worlds)."""
    updates_per_step: int = _f(2, ge=1, le=1000)
    """Update-to-data ratio: critic gradient steps per env step of all N worlds (FastSAC 8, araffin 32)."""
    policy_delay: int = _f(2, ge=1)
    """Actor and temperature step once every this many critic steps (FastSAC 4, araffin 8, SERL 2-4)."""
    learning_starts: int = _f(10, ge=0)
    """Env steps per world with uniformly random actions before learning starts."""
    gamma: float = _f(0.97, gt=0.0, le=1.0)
    """Discount (FastSAC and SERL 0.97, araffin 0.983)."""
    tau: float = _f(0.005, gt=0.0, le=1.0)
    """Polyak rate of the target critics per critic step (SERL 0.005, FastSAC 0.125 with its large batches)."""
    n_step: int = _f(3, ge=1, le=64)
    """Return horizon; windows stop at episode ends (time-outs bootstrap, terminations do not)."""
    actor_learning_rate: float = _f(3e-4, gt=0.0, le=1.0)
    """Adam learning rate of the actor."""
    critic_learning_rate: float = _f(3e-4, gt=0.0, le=1.0)
    """Adam learning rate of the critics."""
    alpha_learning_rate: float = _f(3e-4, gt=0.0, le=1.0)
    """Adam learning rate of log(temperature)."""
    init_alpha: float = _f(1e-3, gt=0.0)
    """Initial temperature (FastSAC 1e-3, SERL 1e-2); the tasks' rewards are scaled by dt, so small values suit."""
    target_entropy_per_dim: float = _f(-1.0, le=math.log(2.0), note="log 2 is the entropy of U(-1, 1)")
    """Target entropy per action dimension of the squashed action in (-1, 1) (SAC -1, SERL -0.5, FastSAC 0)."""
    target_subset_size: int = _f(2, ge=2)
    """Critic members in the random subset whose minimum is the target (REDQ 2; <= policy.num_critics)."""
    actor_q: str = _f("mean", choices=("mean", "min"))
    """How the actor's loss combines the critics: their mean (REDQ, RLPD) or their minimum (original SAC)."""
    action_smoothness: float = _f(0.0, ge=0.0)
    """Weight of a temporal smoothness term in the actor loss, mean ||tanh mu(s_t) - tanh mu(s_t+1)||^2 over
    consecutive observations (CAPS, Mysore et al. 2021). SAC's deterministic policy otherwise chatters
    between near-saturated actions: on arm-reach, mean |a_t - a_t-1| 0.29 without, 0.002 with 0.1."""
    max_grad_norm: float = _f(0.0, ge=0.0)
    """Clip each network's gradient norm to this (0: no clipping)."""
    weight_decay: float = _f(0.0, ge=0.0)
    """AdamW weight decay of actor and critics (FastSAC 1e-3; 0: plain Adam)."""
    update_threads: int = _f(1, ge=0, le=1024)
    """Torch threads for the gradient steps (0: leave torch's setting). SAC's many small ops gain little from
    a second CPU thread and lose much when the cores are shared: on this 2-core machine under load, one
    update (batch 512, [128, 128]) took 21-26 ms with 1 thread and 230-870 ms with 2."""
    demo_ratio: float = _f(0.0, ge=0.0, le=1.0)
    """Share of every batch drawn from demonstrations (RLPD's symmetric sampling: 0.5; 0: none)."""
    dataset: str = ""
    """Demonstrations for `demo_ratio`: a LeRobot v3.0 dataset recorded by `robo-rl record` (`--dataset PATH`).
    Transitions pair each frame with its recorded action: record them without `--noise`, whose executed
    actions differ from the recorded labels."""
    demo_bc_weight: float = _f(0.0, ge=0.0)
    """Weight w of a behaviour-cloning term on the demonstration rows of each actor batch:
    w * mean|Q| * mean ||tanh mu(s) - a_demo||^2 (actions in (-1, 1)). Scaling by the batch's mean |Q|
    (detached) makes w independent of the reward scale, as in TD3+BC (its alpha 2.5 is w = 0.4).
    It carries the demonstrations into the actor at once instead of only through Q; 0: off (RLPD)."""
    save_replay: bool = True
    """Save the replay buffer beside each checkpoint (`replay_<iteration>.pt`) so a resume continues exactly."""
    save_replay_max_mb: float = _f(4096.0, ge=0.0)
    """Skip saving the replay buffer when its filled part is larger than this; a resume then refills it."""

    def check_sections(self, cfg: Any) -> None:
        """Constraints against `sim` and `policy` (called by `check_train_config`), and between fields."""
        if self.demo_bc_weight > 0 and self.demo_ratio == 0:
            raise ConfigError(f"config error: algo.demo_bc_weight = {self.demo_bc_weight!r}: needs algo.demo_ratio "
                              "> 0 (the term is computed on a batch's demonstration rows)")
        rows = self.buffer_size // cfg.sim.num_envs
        if rows < self.n_step:
            raise ConfigError(
                f"config error: algo.buffer_size = {self.buffer_size}: must hold algo.n_step = {self.n_step} steps "
                f"of each of sim.num_envs = {cfg.sim.num_envs} worlds (>= {self.n_step * cfg.sim.num_envs})"
            )
        critics = getattr(cfg.policy, "num_critics", None)
        if critics is not None and self.target_subset_size > critics:
            raise ConfigError(
                f"config error: algo.target_subset_size = {self.target_subset_size}: must be <= "
                f"policy.num_critics = {critics}"
            )


@dataclass(frozen=True, kw_only=True)
class SACPolicyConfig:
    """SAC networks: squashed Gaussian actor, Q ensemble, observation normalisers."""

    actor_hidden_dims: tuple[int, ...] = _f((256, 256))
    """Hidden widths of the actor."""
    critic_hidden_dims: tuple[int, ...] = _f((256, 256))
    """Hidden widths of every critic."""
    activation: str = _f("relu", choices=("elu", "relu", "tanh", "silu"))
    """Hidden activation of actor and critics."""
    critic_layer_norm: bool = True
    """LayerNorm in the critics (without it massively parallel SAC diverges: araffin, FastSAC, RLPD)."""
    actor_layer_norm: bool = False
    """LayerNorm in the actor's trunk."""
    num_critics: int = _f(2, ge=2, le=64)
    """Critic ensemble size E (2: clipped double Q; RLPD 10 with a random pair for the target)."""
    num_atoms: int = _f(1, ge=1, le=1001)
    """1: scalar Q; K > 1: a distributional C51 critic with K atoms (FastTD3 101-251)."""
    v_min: float = -20.0
    """Lowest atom of the C51 support (FastSAC [-20, 20]; size it to the task's returns)."""
    v_max: float = 20.0
    """Highest atom of the C51 support."""
    log_std_min: float = -5.0
    """Lower bound of the actor's log std (FastSAC -5)."""
    log_std_max: float = 2.0
    """Upper bound of the actor's log std."""
    action_bound: float = _f(0.0, ge=0.0)
    """Actions are bound * tanh(.): 0 uses the task's action clip; a smaller value bounds the policy to the range
    it really needs (araffin: unbounded or too wide ranges make SAC fail)."""
    obs_normalization: bool = True
    """Empirical running mean/std normalisation of actor and critic inputs (baked into the export)."""

    def validate(self) -> None:
        for low, high in (("v_min", "v_max"), ("log_std_min", "log_std_max")):
            if not getattr(self, low) < getattr(self, high):
                raise ConfigError(f"config error: policy.{low} = {getattr(self, low)!r}: must be < "
                                  f"policy.{high} = {getattr(self, high)!r}")


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run torch ops on `n` intra-op threads inside the block (0: unchanged); the previous count is restored."""
    previous = torch.get_num_threads()
    if n == 0 or n == previous:
        yield
        return
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def temperature_loss(log_alpha: Tensor, log_prob: Tensor, target_entropy: float) -> Tensor:
    """-log(alpha) * (log pi + H_target), averaged over the batch (B,) -> ().

    Its gradient raises alpha while the policy's entropy -log pi is below the target and lowers it above.
    """
    return -(log_alpha * (log_prob.detach() + target_entropy)).mean()


def demo_bc_loss(actions: Tensor, demo_actions: Tensor) -> Tensor:
    """Mean squared distance ||a - a_demo||^2 over a batch of actions (B, A) in the actor's (-1, 1) units -> ()."""
    return (actions - demo_actions).square().sum(-1).mean()


def polyak_update(target: nn.Module, source: nn.Module, tau: float) -> None:
    """target <- (1 - tau) * target + tau * source, parameter by parameter."""
    with torch.no_grad():
        for t, s in zip(target.parameters(), source.parameters(), strict=True):
            t.lerp_(s, tau)


def resolve_action_bound(configured: float, clip: float | None) -> float:
    """The actor's bound: `policy.action_bound` if set (<= the task's clip), else the task's action clip."""
    if configured > 0:
        if clip is not None and configured > clip:
            raise ConfigError(f"config error: policy.action_bound = {configured!r}: must be <= the task's "
                              f"action clip {clip!r} (0 uses the clip)")
        return configured
    if clip is None:
        raise ConfigError("config error: policy.action_bound = 0: the task does not clip its actions; "
                          "set a bound > 0 (the range the policy needs)")
    return float(clip)


class SACPolicy(nn.Module):
    """Every tensor SAC trains: actor, critics, target critics, log temperature, normalisers.

    The critics see the "critic" group when it differs in size from the "policy" group (an
    asymmetric critic); otherwise both see the policy observations through one normaliser.

    Args:
        cfg: network sizes and options.
        spec: the env's sizes and action clip.
    """

    def __init__(self, cfg: SACPolicyConfig, spec: EnvSpec):
        super().__init__()
        self.action_bound = resolve_action_bound(cfg.action_bound, spec.action_clip)
        self.asymmetric = spec.critic_obs_dim != spec.obs_dim
        critic_dim = spec.critic_obs_dim if self.asymmetric else spec.obs_dim
        self.actor = SquashedGaussianActor(spec.obs_dim, spec.action_dim, cfg.actor_hidden_dims, cfg.activation,
                                           (cfg.log_std_min, cfg.log_std_max), cfg.actor_layer_norm)
        self.critic = QEnsemble(critic_dim, spec.action_dim, cfg.critic_hidden_dims, cfg.num_critics, cfg.activation,
                                cfg.critic_layer_norm, cfg.num_atoms, (cfg.v_min, cfg.v_max))
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.log_alpha = nn.Parameter(torch.zeros(()))
        norm = cfg.obs_normalization
        self.obs_normalizer: nn.Module = EmpiricalNormalization(spec.obs_dim) if norm else nn.Identity()
        self.critic_obs_normalizer: nn.Module = (
            EmpiricalNormalization(critic_dim) if norm and self.asymmetric else nn.Identity()
        )
        self.to(spec.device)

    def normalize_critic(self, critic_obs: Tensor) -> Tensor:
        """Normalised critic inputs (B, O_c) (the policy normaliser's output for a symmetric critic)."""
        return self.critic_obs_normalizer(critic_obs) if self.asymmetric else self.obs_normalizer(critic_obs)

    def update_normalization(self, obs: Tensor, critic_obs: Tensor) -> None:
        if isinstance(self.obs_normalizer, EmpiricalNormalization):
            self.obs_normalizer.update(obs)
            if self.asymmetric:
                self.critic_obs_normalizer.update(critic_obs)

    def act_inference(self, obs: Tensor) -> Tensor:
        """Deterministic actions bound * tanh(mean) (N, A) for raw observations (N, O)."""
        return self.action_bound * self.actor.deterministic(self.obs_normalizer(obs))

    def inference_policy(self) -> tuple[nn.Module, nn.Module]:
        """(bound * tanh(mean) module, observation normaliser): what export turns into ONNX."""
        return ScaledTanhMean(self.actor, self.action_bound), self.obs_normalizer


class SAC:
    """SAC learner: per env step `act` -> `process_env_step` -> `update` (updates_per_step gradient steps).

    Args:
        cfg: SAC hyper-parameters.
        policy: the networks to train.
        spec: the env's sizes (N, O, O_c, A) and device.
        generator: torch RNG for exploration, sampling and target subsets (saved in checkpoints).
    """

    def __init__(self, cfg: SACConfig, policy: SACPolicy, spec: EnvSpec, generator: torch.Generator):
        self.cfg, self.policy, self.spec, self.generator = cfg, policy, spec, generator
        self.buffer = ReplayBuffer(cfg.buffer_size // spec.num_envs, spec.num_envs, spec.obs_dim, spec.action_dim,
                                   spec.critic_obs_dim if policy.asymmetric else None, spec.device)
        self.demos: DemoBuffer | None = None
        with torch.no_grad():
            policy.log_alpha.fill_(math.log(cfg.init_alpha))
        def optimizer(params: Any, lr: float) -> torch.optim.Optimizer:
            if cfg.weight_decay:
                return torch.optim.AdamW(params, lr=lr, weight_decay=cfg.weight_decay)
            return torch.optim.Adam(params, lr=lr)

        self.actor_optimizer = optimizer(policy.actor.parameters(), cfg.actor_learning_rate)
        self.critic_optimizer = optimizer(policy.critic.parameters(), cfg.critic_learning_rate)
        self.alpha_optimizer = torch.optim.Adam([policy.log_alpha], lr=cfg.alpha_learning_rate)
        self.target_entropy = cfg.target_entropy_per_dim * spec.action_dim
        self.env_steps = 0
        self.num_updates = 0

    # ------------------------------------------------------------------ demonstrations
    def load_demos(self, arrays: Mapping[str, Any]) -> None:
        """Use in-memory demonstration arrays (`replay_buffer.load_demo_arrays`) for `demo_ratio` of each batch."""
        s = self.spec
        self.demos = load_demo_arrays(arrays, obs_dim=s.obs_dim, action_dim=s.action_dim,
                                      action_bound=self.policy.action_bound,
                                      critic_obs_dim=s.critic_obs_dim if self.policy.asymmetric else None,
                                      device=s.device)

    def add_demos(self, arrays: Mapping[str, Any]) -> None:
        """Append demonstration transitions (same arrays as `load_demos`) to the demonstrations, e.g. the transitions
        an operator's takeover made while learning on the robot (HIL-SERL puts them in both buffers)."""
        if self.demos is None:
            self.load_demos(arrays)
            return
        s = self.spec
        self.demos.extend(load_demo_arrays(arrays, obs_dim=s.obs_dim, action_dim=s.action_dim,
                                           action_bound=self.policy.action_bound,
                                           critic_obs_dim=s.critic_obs_dim if self.policy.asymmetric else None,
                                           device=s.device))

    def check_ready_to_train(self) -> None:
        """Load `algo.dataset` when demonstrations are asked for and none were given in memory; ConfigError when
        there are none, ValueError (one line) for a dataset that does not fit the task."""
        cfg = self.cfg
        if cfg.demo_ratio > 0 and self.demos is None and cfg.dataset:
            self.load_demos(dataset_transitions(cfg.dataset, critic=self.policy.asymmetric))
        if cfg.demo_ratio > 0 and self.demos is None:
            raise ConfigError(f"config error: algo.demo_ratio = {cfg.demo_ratio!r}: needs demonstrations "
                              "(--dataset PATH, or OffPolicyRunner(..., demos=arrays))")

    # ------------------------------------------------------------------ rollout
    @torch.no_grad()
    def act(self, obs: Tensor, critic_obs: Tensor) -> Tensor:
        """Actions (N, A) for raw observations (N, O) / (N, O_c); uniform random before `learning_starts`."""
        p = self.policy
        p.update_normalization(obs, critic_obs)
        if self.env_steps < self.cfg.learning_starts:
            unit = torch.rand(obs.shape[0], self.spec.action_dim, generator=self.generator) * 2.0 - 1.0
            unit = unit.to(obs.device)
        else:
            unit, _ = p.actor.sample(p.obs_normalizer(obs), self.generator)
        self.buffer.add_obs(obs, unit, critic_obs if p.asymmetric else None)  # actions stored in (-1, 1)
        return unit * p.action_bound

    @torch.no_grad()
    def process_env_step(self, rewards: Tensor, terminated: Tensor, truncated: Tensor, final_obs: Tensor,
                         final_critic_obs: Tensor) -> None:
        """Record the outcome of the last `act`; `final_*` are the pre-reset observations (N, O) / (N, O_c)."""
        self.buffer.add_outcome(rewards, terminated, truncated, final_obs,
                                final_critic_obs if self.policy.asymmetric else None)
        self.env_steps += 1

    @torch.no_grad()
    def add_transitions(self, steps: Mapping[str, Tensor]) -> None:
        """Store T steps of one world collected by another process (an actor on a robot), in order: `obs`, `action`
        (as executed, env units), `reward`, `terminated`, `truncated`, `next_obs`, `episode_start` (see
        `ReplayBuffer.add_steps`), each (T, ...)."""
        if self.spec.num_envs != 1 or self.policy.asymmetric:
            raise ValueError("add_transitions: needs one world and a critic that sees the policy's observations")
        p, dev = self.policy, self.spec.device
        obs = steps["obs"].to(dev, torch.float32)  # (T, O)
        p.update_normalization(obs, obs)
        unit = (steps["action"].to(dev, torch.float32) / p.action_bound).clamp(-1.0, 1.0)  # the actor's units
        self.buffer.add_steps({"obs": obs[:, None], "actions": unit[:, None], "rewards": steps["reward"][:, None],
                               "terminated": steps["terminated"][:, None], "truncated": steps["truncated"][:, None],
                               "next_obs": steps["next_obs"][:, None]}, episode_start=steps["episode_start"][:, None])
        self.env_steps += obs.shape[0]

    # ------------------------------------------------------------------ learning
    def ready(self) -> bool:
        """True once the buffer holds `learning_starts` steps (also after a resume that lost the buffer)."""
        return self.buffer.size >= max(1, min(self.cfg.learning_starts, self.buffer.rows))

    def update(self) -> dict[str, float]:
        """`updates_per_step` critic steps (actor and temperature every `policy_delay`); {} before learning starts.

        Returns means over the steps: critic_loss, q_mean, and where the actor stepped actor_loss,
        alpha_loss, alpha, entropy (-log pi of the squashed actions), with `action_smoothness` action_change
        and with `demo_bc_weight` demo_bc.
        """
        if not self.ready():
            return {}
        with torch_threads(self.cfg.update_threads):
            return self._update()

    def _update(self) -> dict[str, float]:
        sums: dict[str, Tensor] = {}
        counts: dict[str, int] = {}
        for _ in range(self.cfg.updates_per_step):
            batch = self._sample()
            stats = self._critic_step(batch)
            self.num_updates += 1
            if self.num_updates % self.cfg.policy_delay == 0:
                stats.update(self._actor_step(batch))
            polyak_update(self.policy.critic_target, self.policy.critic, self.cfg.tau)
            for k, v in stats.items():
                sums[k] = sums[k] + v if k in sums else v
                counts[k] = counts.get(k, 0) + 1
        keys = list(sums)
        values = torch.stack([sums[k] for k in keys]).tolist()  # one host sync
        return {k: v / counts[k] for k, v in zip(keys, values, strict=True)}

    def _sample(self) -> dict[str, Tensor]:
        cfg, p = self.cfg, self.policy
        n_demo = demo_share(cfg.batch_size, cfg.demo_ratio) if self.demos is not None else 0
        batch = self.buffer.sample(cfg.batch_size - n_demo, cfg.n_step, cfg.gamma, self.generator)
        if n_demo:
            batch = mixed_batch(batch, self.demos.sample(n_demo, cfg.gamma, self.generator))
        with torch.no_grad():
            batch["obs"] = p.obs_normalizer(batch["obs"])
            batch["next_obs"] = p.obs_normalizer(batch["next_obs"])
            batch["step_next_obs"] = p.obs_normalizer(batch["step_next_obs"])
            batch["critic_obs"] = p.normalize_critic(batch["critic_obs"])
            batch["next_critic_obs"] = p.normalize_critic(batch["next_critic_obs"])
        return batch

    def _critic_step(self, b: dict[str, Tensor]) -> dict[str, Tensor]:
        cfg, p = self.cfg, self.policy
        critic = p.critic
        alpha = p.log_alpha.detach().exp()
        with torch.no_grad():
            next_actions, next_log_prob = p.actor.sample(b["next_obs"], self.generator)  # (B, A), (B,)
            target_out = p.critic_target(b["next_critic_obs"], next_actions)  # (E, B) or (E, B, K)
            soft = b["returns"] - b["discount"] * alpha * next_log_prob  # (B,) entropy bonus of the bootstrap
            q_target = p.critic_target.q_values(target_out)  # (E, B)
            q_next, members = subset_min(q_target, cfg.target_subset_size, self.generator)  # (B,), (M,)
            if critic.distributional:
                lowest = members[q_target.index_select(0, members).argmin(0)]  # (B,) lowest member of the subset
                next_probs = torch.softmax(target_out[lowest, torch.arange(lowest.numel())], -1)  # (B, K)
                target = categorical_projection(next_probs, soft, b["discount"], critic.support)  # (B, K)
            else:
                target = soft + b["discount"] * q_next  # (B,)
        out = critic(b["critic_obs"], b["actions"])
        if critic.distributional:
            loss = -(target * F.log_softmax(out, -1)).sum(-1).mean(-1).sum()  # cross-entropy per member
        else:
            loss = 0.5 * (out - target).square().mean(-1).sum()  # MSE per member, summed
        self._step(self.critic_optimizer, loss, critic)
        return {"critic_loss": loss.detach(), "q_mean": critic.q_values(out.detach()).mean()}

    def _actor_step(self, b: dict[str, Tensor]) -> dict[str, Tensor]:
        cfg, p = self.cfg, self.policy
        actions, log_prob = p.actor.sample(b["obs"], self.generator)  # (B, A), (B,)
        p.critic.requires_grad_(False)  # gradients flow through the critics to the actions only
        try:
            q = p.critic.q_values(p.critic(b["critic_obs"], actions))  # (E, B)
        finally:
            p.critic.requires_grad_(True)
        q_pi = q.mean(0) if cfg.actor_q == "mean" else q.min(0).values  # (B,)
        alpha = p.log_alpha.detach().exp()
        actor_loss = (alpha * log_prob - q_pi).mean()
        stats = {}
        if cfg.action_smoothness > 0:
            change = p.actor.deterministic(b["obs"]) - p.actor.deterministic(b["step_next_obs"])  # (B, A)
            smoothness = change.square().sum(-1).mean()
            actor_loss = actor_loss + cfg.action_smoothness * smoothness
            stats["action_change"] = smoothness.detach()
        n_demo = demo_share(cfg.batch_size, cfg.demo_ratio) if self.demos is not None else 0
        if cfg.demo_bc_weight > 0 and n_demo:
            bc = demo_bc_loss(p.actor.deterministic(b["obs"][-n_demo:]), b["actions"][-n_demo:])  # demo rows last
            actor_loss = actor_loss + cfg.demo_bc_weight * q_pi.detach().abs().mean() * bc
            stats["demo_bc"] = bc.detach()
        self._step(self.actor_optimizer, actor_loss, p.actor)
        alpha_loss = temperature_loss(p.log_alpha, log_prob, self.target_entropy)
        self.alpha_optimizer.zero_grad(set_to_none=True)
        alpha_loss.backward()
        distributed.all_reduce_gradients([p.log_alpha])
        self.alpha_optimizer.step()
        return {"actor_loss": actor_loss.detach(), "alpha_loss": alpha_loss.detach(),
                "alpha": p.log_alpha.detach().exp(), "entropy": -log_prob.detach().mean(), **stats}

    def _step(self, optimizer: torch.optim.Optimizer, loss: Tensor, module: nn.Module) -> None:
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        distributed.all_reduce_gradients(module.parameters())
        if self.cfg.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(module.parameters(), self.cfg.max_grad_norm)
        optimizer.step()

    def inference_policy(self) -> tuple[nn.Module, nn.Module]:
        return self.policy.inference_policy()

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        """Networks, optimisers, RNG and counters; the replay buffer is separate (`replay_state_dict`)."""
        return {
            "policy": self.policy.state_dict(),
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "critic_optimizer": self.critic_optimizer.state_dict(),
            "alpha_optimizer": self.alpha_optimizer.state_dict(),
            "generator": self.generator.get_state(),
            "env_steps": self.env_steps,
            "num_updates": self.num_updates,
        }

    def load_state_dict(self, state: dict) -> None:
        self.policy.load_state_dict(state["policy"])
        self.actor_optimizer.load_state_dict(state["actor_optimizer"])
        self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        self.alpha_optimizer.load_state_dict(state["alpha_optimizer"])
        self.generator.set_state(state["generator"])
        self.env_steps = int(state["env_steps"])
        self.num_updates = int(state["num_updates"])

    def replay_state_dict(self) -> dict[str, Any]:
        return self.buffer.state_dict()

    def load_replay_state_dict(self, state: dict[str, Any]) -> None:
        self.buffer.load_state_dict(state)

    def replay_nbytes(self) -> int:
        return self.buffer.nbytes()


def rlpd_variant(algo: SACConfig, policy: SACPolicyConfig, *, num_critics: int = 10,
                 updates_per_step: int = 20, demo_bc_weight: float = 0.0) -> tuple[SACConfig, SACPolicyConfig]:
    """RLPD's recipe on top of SAC configs: half of every batch from demonstrations, a LayerNorm ensemble
    of `num_critics` whose target is the minimum of a random pair, and a high update-to-data ratio
    (optionally with a behaviour-cloning term on the demonstration rows, `SACConfig.demo_bc_weight`)."""
    algo = dataclasses.replace(algo, demo_ratio=0.5, target_subset_size=2, updates_per_step=updates_per_step,
                               actor_q="mean", demo_bc_weight=demo_bc_weight)
    return algo, dataclasses.replace(policy, num_critics=num_critics, critic_layer_norm=True)


def build_policy(cfg: SACPolicyConfig, spec: EnvSpec) -> SACPolicy:
    return SACPolicy(cfg, spec)


def build(cfg: SACConfig, policy: SACPolicy, spec: EnvSpec, generator: torch.Generator) -> SAC:
    return SAC(cfg, policy, spec, generator)


ENTRY = ALGORITHMS.register("sac", AlgorithmEntry(
    config_cls=SACConfig, policy_config_cls=SACPolicyConfig, runner_cls=OffPolicyRunner, build_policy=build_policy,
    build=build))
"""The registry entry."""
