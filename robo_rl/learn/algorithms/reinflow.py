"""ReinFlow: online RL fine-tuning of a flow-matching policy through its noisy denoising chain (`--algo reinflow`).

ReinFlow (NeurIPS 2025) makes the K-step Euler chain of a flow policy stochastic with a learned noise net,
x_{k+1} ~ N(x_k + v_θ(x_k, t_k, s) / K, σ_φ(s, t_k)²), so the chain x_0 .. x_K is a Markov process with an
exact log-likelihood (`robo_rl.learn.networks.flow.chain_log_prob`), and PPO optimises its ratio:

- the chain is sampled with ReinFlow's guards: noise clipped at ±3σ, and each step's input (and the executed
  action) clamped to the action bound. The chain stores the samples before that clamp, x̃_{k+1} = mean_k + σ_k ε,
  and the clamp is part of the next step's transition (mean_{k+1} = c(x̃_{k+1}) + v(c(x̃_{k+1}), ...) / K), so
  the likelihood stays exact and every step's |z| <= 3: a clamped sample scored against a mean far outside the
  bound would give log-probabilities so steep in the mean that the ratio overflows;
- PPO with a small clip on the chain ratio, a separate observation-only critic V(s) with GAE (time-outs
  bootstrapped from `final_obs`), an entropy-rate bonus (the noise's mean Gaussian entropy per step), an
  optional W2-style BC term pulling the deterministic chain toward the frozen pretrained one, separate
  actor and critic learning rates, critic warm-up iterations that train only the critic, and an optional
  linear decay of σ's upper bound;
- the policy observation normaliser is the pretrained one, frozen: the old log-probabilities stay exactly
  what the update recomputes (a first-epoch ratio that is not 1 silently ruins training: ReinFlow #5).

Action chunks: the chain's sample is a chunk of H actions; the first E (`policy.execute_steps`) run open-loop
for E env steps (`robo_rl.adapters.chunked`), so one PPO transition is one chunk, with the rewards summed over it
and `algo.gamma` discounting per chunk. The likelihood covers the whole chain (all H actions), as in ReinFlow.

The policy starts from a `flow-bc` checkpoint (`algo.pretrained`) and exports like it: the deterministic
K-step chain from x_0 (drawn, or 0).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import torch
from torch import Tensor

from robo_rl.core.config import ConfigError, _f
from robo_rl.learn import distributed
from robo_rl.learn.algorithm_registry import ALGORITHMS, AlgorithmEntry, EnvSpec, InitFrom
from robo_rl.learn.algorithms.bc import FlowPolicyConfig, build_flow_policy
from robo_rl.learn.algorithms.ppo import (
    approx_kl,
    clip_fraction,
    clipped_surrogate_loss,
    explained_variance,
    normalize_advantages,
)
from robo_rl.learn.networks.flow import (
    FlowPolicy,
    chain_log_prob,
    conditioned,
    euler_sample,
    euler_step_stats,
    noisy_chain,
)
from robo_rl.learn.networks.normalizer import EmpiricalNormalization
from robo_rl.learn.rollout_storage import RolloutStorage, bootstrap_time_outs
from robo_rl.learn.runner import OnPolicyRunner

_POLICY_SHAPE_FIELDS = ("horizon", "variant", "hidden_dims", "activation", "time_dim", "obs_normalization")
"""Policy settings the pretrained checkpoint must share (they shape or feed the velocity network)."""


@dataclass(frozen=True, kw_only=True)
class ReinFlowConfig:
    """ReinFlow fine-tuning (defaults from ReinFlow's state-based configs, see shared/REFERENCES.md)."""

    pretrained: str = ""
    """The flow-bc run or checkpoint to fine-tune (its velocity net and observation normaliser)."""
    num_steps_per_env: int = _f(100, ge=1)
    """Policy decisions per world per iteration (each runs `policy.execute_steps` env steps)."""
    num_learning_epochs: int = _f(5, ge=1)
    num_mini_batches: int = _f(8, ge=1)
    clip_param: float = _f(0.01, gt=0.0, le=1.0)
    """PPO clip of the chain ratio (ReinFlow: 0.01 for state inputs)."""
    actor_learning_rate: float = _f(4.5e-5, gt=0.0, le=1.0)
    critic_learning_rate: float = _f(6.5e-4, gt=0.0, le=1.0)
    gamma: float = _f(0.99, gt=0.0, le=1.0)
    lam: float = _f(0.95, ge=0.0, le=1.0)
    value_loss_coef: float = _f(0.5, ge=0.0)
    entropy_coef: float = _f(0.03, ge=0.0)
    """Weight of the entropy-rate bonus (mean Gaussian entropy of the noise per denoising step)."""
    bc_coef: float = _f(0.0, ge=0.0)
    """Weight of the W2-style term: squared distance between the deterministic chains of the policy and of the
    frozen pretrained one from the rollout's x_0 (0: off)."""
    max_grad_norm: float = _f(1.0, gt=0.0)
    critic_warmup_iterations: int = _f(2, ge=0)
    """First iterations that train only the critic (the pretrained actor needs a value baseline first)."""
    sigma_max_final: float = _f(0.0, ge=0.0)
    """σ's upper bound decays linearly to this over `sigma_decay_iterations` (0: no decay)."""
    sigma_decay_iterations: int = _f(100, ge=1)
    normalize_advantage: bool = True


def _bound(x: Tensor, clip: float | None) -> Tensor:
    return x if clip is None else x.clamp(-clip, clip)


def chain_stats(policy: FlowPolicy, obs_n: Tensor, chain: Tensor) -> tuple[Tensor, Tensor]:
    """Means and stds (B, K, D) of every denoising step of stored chains (B, K + 1, D), in one batched pass."""
    b, k1, d = chain.shape
    k = k1 - 1
    # (B K, D) the steps' inputs: x_0 as drawn, then x̃_1 .. x̃_{K-1} clamped to the bound
    x = torch.cat([chain[:, :1], _bound(chain[:, 1:-1], policy.action_clip)], 1).reshape(b * k, d)
    t = (torch.arange(k, device=chain.device, dtype=chain.dtype) / k).repeat(b)  # (B K,)
    o = obs_n.repeat_interleave(k, dim=0)  # (B K, O)
    step = torch.full_like(t, 1.0 / k) if policy.velocity.shortcut else None
    means = x + policy.velocity(x, t, o, step) / k
    stds = policy.noise(t, o)
    return means.reshape(b, k, d), stds.reshape(b, k, d)


@torch.no_grad()
def sample_chain(policy: FlowPolicy, obs_n: Tensor, generator: torch.Generator,
                 clip: float | None) -> tuple[Tensor, Tensor, Tensor]:
    """One stochastic chain per row (`noisy_chain`): (chain (B, K + 1, D), means (B, K, D), stds (B, K, D)).

    x_0 ~ N(0, I), then one N(0, I) draw per step; the action is c(x̃_K) (c: the clamp to the bound).
    """
    b, d, k = obs_n.shape[0], policy.flat_dim, policy.num_steps
    draws = [torch.randn(b, d, generator=generator, device=generator.device).to(obs_n.device) for _ in range(k + 1)]
    step = euler_step_stats(conditioned(policy.velocity, obs_n, 1.0 / k), lambda x, t: policy.noise(t, obs_n), k)
    return noisy_chain(step, draws[0], torch.stack(draws[1:], 1), clip)


def noise_entropy(stds: Tensor) -> Tensor:
    """Mean Gaussian entropy per denoising step, summed over action dims: stds (B, K, D) -> ()."""
    return (0.5 + 0.5 * math.log(2 * math.pi) + torch.log(stds)).sum(-1).mean()


class ReinFlow:
    """PPO over the chain likelihood of a flow policy: `act` -> `process_env_step` (T times) -> `compute_returns`
    -> `update` (see the module docstring).

    Args:
        cfg: the hyper-parameters.
        policy: the flow policy to fine-tune (already holding the pretrained weights).
        base: a frozen copy of the pretrained policy (for `bc_coef`), or None.
        num_envs: N.
        generator: torch RNG for the chains' noise and minibatch shuffling (saved in checkpoints).
    """

    def __init__(self, cfg: ReinFlowConfig, policy: FlowPolicy, base: FlowPolicy | None, num_envs: int,
                 generator: torch.Generator):
        self.cfg, self.policy, self.base, self.generator = cfg, policy, base, generator
        self.actor_optimizer = torch.optim.Adam([*policy.velocity.parameters(), *policy.noise.parameters()],
                                                lr=cfg.actor_learning_rate)
        self.critic_optimizer = torch.optim.Adam(policy.critic.parameters(), lr=cfg.critic_learning_rate)
        device = next(policy.parameters()).device
        chain_dim = (policy.num_steps + 1) * policy.flat_dim  # the storage's "actions" are flattened chains
        self.storage = RolloutStorage(cfg.num_steps_per_env, num_envs, policy.obs_dim, policy.critic_obs_dim,
                                      chain_dim, device)
        self.updates = 0
        """Completed `update` calls (critic warm-up and the σ schedule count them)."""

    # ------------------------------------------------------------------ rollout
    @torch.no_grad()
    def act(self, obs: Tensor, critic_obs: Tensor) -> Tensor:
        """Sample one chain per world; the executed actions are the first of its final sample's chunk: (N, A), or
        (N, E, A) for a policy that executes E > 1 (the env runs them open-loop: `robo_rl.adapters.chunked`)."""
        s, t = self.storage, self.storage.step
        policy = self.policy
        if isinstance(policy.critic_obs_normalizer, EmpiricalNormalization):
            policy.critic_obs_normalizer.update(critic_obs)  # the actor's normaliser stays the pretrained one
        obs_n = policy.obs_normalizer(obs)
        critic_n = policy.critic_obs_normalizer(critic_obs)
        chain, means, stds = sample_chain(policy, obs_n, self.generator, policy.action_clip)
        s.obs[t] = obs_n
        s.critic_obs[t] = critic_n
        s.actions[t] = chain.flatten(1)
        s.log_probs[t] = chain_log_prob(chain, means, stds)
        s.values[t] = policy.critic(critic_n).squeeze(-1)
        chunk = _bound(chain[:, -1], policy.action_clip).reshape(-1, policy.horizon, policy.action_dim)
        return chunk[:, 0] if policy.execute_steps == 1 else chunk[:, : policy.execute_steps]

    @torch.no_grad()
    def process_env_step(self, rewards: Tensor, terminated: Tensor, truncated: Tensor,
                         final_critic_obs: Tensor) -> None:
        """Record the outcome of the last `act`; time-outs bootstrap from V(final observation)."""
        rewards = bootstrap_time_outs(rewards, truncated, lambda ids: self.policy.value(final_critic_obs[ids]),
                                      self.cfg.gamma)
        self.storage.record_outcome(rewards, terminated, truncated)

    @torch.no_grad()
    def compute_returns(self, last_critic_obs: Tensor) -> None:
        s = self.storage
        s.compute_returns(self.policy.value(last_critic_obs), self.cfg.gamma, self.cfg.lam)
        if self.cfg.normalize_advantage:
            s.advantages = normalize_advantages(s.advantages)

    # ------------------------------------------------------------------ learning
    def minibatch_log_prob(self, obs_n: Tensor, flat_chain: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(log-probs (B,), stds (B, K, D), chains (B, K + 1, D)) of stored flat chains under the current policy."""
        policy = self.policy
        chain = flat_chain.reshape(flat_chain.shape[0], policy.num_steps + 1, policy.flat_dim)
        means, stds = chain_stats(policy, obs_n, chain)
        return chain_log_prob(chain, means, stds), stds, chain

    def update(self) -> dict[str, float]:
        """Epochs x minibatches of clipped PPO on the chain ratio (the critic only, during warm-up)."""
        cfg, policy = self.cfg, self.policy
        train_actor = self.updates >= cfg.critic_warmup_iterations
        keys = ("value_loss", "surrogate_loss", "entropy", "bc_loss", "clip_fraction", "approx_kl")
        totals = torch.zeros(len(keys), device=self.storage.values.device)
        n, ratio_first = 0, 1.0
        for mb in self.storage.minibatches(cfg.num_mini_batches, cfg.num_learning_epochs, self.generator):
            log_prob, stds, chain = self.minibatch_log_prob(mb["obs"], mb["actions"])
            value = policy.critic(mb["critic_obs"]).squeeze(-1)
            value_loss = (value - mb["returns"]).square().mean()
            surrogate = clipped_surrogate_loss(log_prob, mb["log_probs"], mb["advantages"], cfg.clip_param)
            entropy = noise_entropy(stds)
            bc = self._bc_loss(mb["obs"], chain[:, 0]) if cfg.bc_coef > 0 else torch.zeros((), device=value.device)
            critic_loss = cfg.value_loss_coef * value_loss
            actor_loss = surrogate - cfg.entropy_coef * entropy + cfg.bc_coef * bc
            self.critic_optimizer.zero_grad(set_to_none=True)
            self.actor_optimizer.zero_grad(set_to_none=True)
            (critic_loss + actor_loss if train_actor else critic_loss).backward()
            distributed.all_reduce_gradients(policy.parameters())
            torch.nn.utils.clip_grad_norm_(policy.critic.parameters(), cfg.max_grad_norm)
            self.critic_optimizer.step()
            if train_actor:
                torch.nn.utils.clip_grad_norm_([*policy.velocity.parameters(), *policy.noise.parameters()],
                                               cfg.max_grad_norm)
                self.actor_optimizer.step()
            with torch.no_grad():
                lp = log_prob.detach()
                if n == 0:  # the first minibatch, before any step: its ratio must be 1 (ReinFlow #5)
                    ratio_first = torch.exp(lp - mb["log_probs"]).mean().item()
                totals += torch.stack((value_loss.detach(), surrogate.detach(), entropy.detach(), bc.detach(),
                                       clip_fraction(lp, mb["log_probs"], cfg.clip_param),
                                       approx_kl(lp, mb["log_probs"])))
            n += 1
        s = self.storage
        s.step = 0
        self.updates += 1
        self._schedule_sigma()
        out = dict(zip(keys, (totals / n).tolist(), strict=True))
        out["ratio_first"] = ratio_first
        out["explained_variance"] = explained_variance(s.values.flatten(), s.returns.flatten()).item()
        out["sigma_max"] = float(policy.noise.max_sigma)
        out["actor_trained"] = float(train_actor)
        return out

    def _bc_loss(self, obs_n: Tensor, x0: Tensor) -> Tensor:
        """Squared distance between the deterministic chains of the policy and the frozen base from the same x_0."""
        k, clip = self.policy.num_steps, self.policy.action_clip
        with torch.no_grad():
            target = euler_sample(conditioned(self.base.velocity, obs_n, 1.0 / k), x0, k, clip=clip)
        own = euler_sample(conditioned(self.policy.velocity, obs_n, 1.0 / k), x0, k, clip=clip)
        return (own - target).square().sum(-1).mean()

    def _schedule_sigma(self) -> None:
        cfg = self.cfg
        if cfg.sigma_max_final <= 0:
            return
        frac = min(1.0, self.updates / cfg.sigma_decay_iterations)
        start = self.policy.config.sigma_max
        value = start + frac * (cfg.sigma_max_final - start)
        self.policy.noise.max_sigma.fill_(max(value, self.policy.noise.sigma_min))

    def inference_policy(self) -> tuple[torch.nn.Module, torch.nn.Module]:
        return self.policy.inference_policy()

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        return {"policy": self.policy.state_dict(), "actor_optimizer": self.actor_optimizer.state_dict(),
                "critic_optimizer": self.critic_optimizer.state_dict(), "generator": self.generator.get_state(),
                "updates": self.updates}

    def load_state_dict(self, state: dict) -> None:
        self.policy.load_state_dict(state["policy"])
        self.actor_optimizer.load_state_dict(state["actor_optimizer"])
        self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        self.generator.set_state(state["generator"])
        self.updates = int(state["updates"])


def build(cfg: ReinFlowConfig, policy: FlowPolicy, spec: EnvSpec, generator: torch.Generator) -> ReinFlow:
    if cfg.num_mini_batches > cfg.num_steps_per_env * spec.num_envs:
        raise ConfigError(f"config error: algo.num_mini_batches = {cfg.num_mini_batches}: more than the "
                          f"{cfg.num_steps_per_env * spec.num_envs} samples of an iteration")
    base = copy.deepcopy(policy).requires_grad_(False).eval() if cfg.bc_coef > 0 else None
    return ReinFlow(cfg, policy, base, spec.num_envs, generator)


ENTRY = ALGORITHMS.register("reinflow", AlgorithmEntry(
    config_cls=ReinFlowConfig, policy_config_cls=FlowPolicyConfig, runner_cls=OnPolicyRunner,
    build_policy=build_flow_policy, build=build,
    init_from=InitFrom(field="pretrained", algorithms=("flow-bc", "reinflow"), keys=("velocity.", "obs_normalizer."),
                       same_policy_fields=_POLICY_SHAPE_FIELDS,
                       missing="reinflow fine-tunes a flow-bc run; pass --set algo.pretrained=<run or checkpoint> "
                               "(train one with --algo flow-bc)")))
"""The registry entry: the policy starts from `algo.pretrained`'s velocity net and observation normaliser."""
