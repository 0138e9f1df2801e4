"""Proximal Policy Optimisation, at parity with RSL-RL's PPO (see shared/REFERENCES.md).

Clipped surrogate, clipped value loss, GAE with exact time-out bootstrapping from
`info["final_obs"]`, KL-adaptive learning rate, entropy bonus, gradient-norm clipping of actor
and critic separately, empirical observation normalisation and an asymmetric critic.
Options bring it to SB3's PPO semantics where they differ (all off by default): a new minibatch
partition every epoch, advantages normalised per minibatch, one gradient-norm clip over all
parameters, Adam's epsilon (and, in `PolicyConfig`, the normaliser's eps and clipping). The action
std is learned as σ or as log σ (`PolicyConfig.noise_std_type`). Besides the losses, `update`
reports the usual PPO diagnostics: clip fraction, approximate KL and explained variance.
Optionally (`PPOConfig.normalize_reward`, off by default) rewards are scaled by a running std of
the discounted return, as SB3's VecNormalize does for MuJoCo benchmarks.

Less work per sample than RSL-RL: observations are normalised once when collected (not again in
every epoch), the Gaussian is evaluated in closed form without `torch.distributions`, and the
policy's std is state-independent so the old std is one (A,) vector per iteration.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from robo_rl.core.config import _f
from robo_rl.learn import distributed
from robo_rl.learn.algorithm_registry import ALGORITHMS, AlgorithmEntry, EnvSpec
from robo_rl.learn.networks.actor_critic import (
    ActorCritic,
    PolicyConfig,
    gaussian_entropy,
    gaussian_kl,
    gaussian_log_prob,
)
from robo_rl.learn.networks.normalizer import EmpiricalNormalization
from robo_rl.learn.precision import PRECISIONS, autocast, resolve_precision
from robo_rl.learn.rollout_storage import RolloutStorage, bootstrap_time_outs
from robo_rl.learn.runner import OnPolicyRunner

LR_MIN, LR_MAX = 1e-5, 1e-2
REWARD_CLIP = 10.0
"""Scaled rewards are clipped to +-this (`PPOConfig.normalize_reward`; SB3 VecNormalize's clip_reward)."""
RETURN_STD_EPS = 1e-8
"""Added to the running return std before dividing by it."""


@dataclass(frozen=True, kw_only=True)
class PPOConfig:
    """PPO hyper-parameters (defaults as in RSL-RL, see shared/REFERENCES.md)."""

    num_steps_per_env: int = _f(24, ge=1)
    """Rollout length T per iteration; the batch is T * num_envs samples."""
    num_learning_epochs: int = _f(5, ge=1)
    """Passes over the batch per iteration."""
    num_mini_batches: int = _f(4, ge=1)
    """Minibatches per epoch."""
    learning_rate: float = _f(1e-3, gt=0.0, le=1.0)
    """Adam learning rate (initial value when the schedule is adaptive)."""
    schedule: str = _f("adaptive", choices=("adaptive", "fixed"))
    """`adaptive`: scale the learning rate by 1.5 to keep the KL near `desired_kl`."""
    desired_kl: float = _f(0.01, gt=0.0)
    """Target KL divergence per minibatch for the adaptive schedule."""
    clip_param: float = _f(0.2, gt=0.0, le=1.0)
    """Surrogate and value clip range."""
    gamma: float = _f(0.99, gt=0.0, le=1.0)
    """Discount factor."""
    lam: float = _f(0.95, ge=0.0, le=1.0)
    """GAE lambda."""
    value_loss_coef: float = _f(1.0, ge=0.0)
    """Weight of the value loss."""
    entropy_coef: float = _f(0.01, ge=0.0)
    """Weight of the entropy bonus."""
    max_grad_norm: float = _f(1.0, gt=0.0)
    """Gradient-norm clip (see `grad_clip`)."""
    grad_clip: str = _f("separate", choices=("separate", "joint"))
    """`separate`: clip the actor's gradients (with its std) and the critic's each to `max_grad_norm`, as
    RSL-RL does; `joint`: clip the norm of all parameters' gradients together, as SB3 and cleanrl do (a
    large value gradient then also shrinks the policy step)."""
    adam_eps: float = _f(1e-8, gt=0.0, le=1.0)
    """Adam's epsilon (PyTorch default 1e-8, as RSL-RL; SB3's PPO uses 1e-5, which damps the steps of
    parameters whose gradients are below ~1e-5)."""
    reshuffle_minibatches: bool = False
    """Draw a new minibatch partition of the batch in every epoch, as SB3 and cleanrl do; off: one
    partition for all epochs, as RSL-RL does."""
    use_clipped_value_loss: bool = True
    """Clip the value update like the policy update."""
    normalize_advantage: bool = True
    """Normalise advantages to zero mean and unit std (where: `advantage_norm_per_minibatch`)."""
    advantage_norm_per_minibatch: bool = False
    """Normalise advantages within each minibatch, as SB3 and cleanrl do; off: once over the whole
    batch per iteration, as RSL-RL does by default."""
    normalize_reward: bool = False
    """Divide the rewards PPO learns from by a running std of each world's discounted return (reset at
    episode ends) and clip them to +-10, as SB3's VecNormalize(norm_reward=True) does; it keeps value
    targets O(1) for tasks whose returns reach hundreds (gymnasium's MuJoCo envs). Env rewards, logged
    returns and evaluations stay unscaled."""
    precision: str = _f("float32", choices=PRECISIONS)
    """`bfloat16`: the actor's and critic's layers run under `torch.autocast` in bfloat16, in the rollout and
    the update alike (parameters, optimiser, Gaussian, losses and stored values stay float32): about a third less
    update time on a CPU with AMX (Xeon Sapphire Rapids and later) or on a recent GPU, slower where bfloat16 is
    emulated. `auto`: bfloat16 where it is native (`robo_rl.learn.precision`), float32 elsewhere. The exported
    policy computes in float32."""


def adapt_learning_rate(lr: float, kl: float, desired_kl: float, lo: float = LR_MIN, hi: float = LR_MAX) -> float:
    """RSL-RL's rule: divide by 1.5 when KL > 2 * desired, multiply by 1.5 when KL < desired / 2; within [lo, hi]."""
    if kl > 2.0 * desired_kl:
        return max(lo, lr / 1.5)
    if 0.0 < kl < 0.5 * desired_kl:
        return min(hi, lr * 1.5)
    return lr


def scale_rewards(
    rewards: Tensor, discounted_return: Tensor, dones: Tensor, normalizer: EmpiricalNormalization, gamma: float
) -> Tensor:
    """Rewards (N,) divided by the running std of the discounted return, clipped to +-REWARD_CLIP.

    Updates in place the per-world discounted return (N,) (zeroed where `dones`, after use) and the
    normalizer's running statistics of it.
    """
    discounted_return.mul_(gamma).add_(rewards)
    normalizer.update(discounted_return[:, None])  # (N, 1)
    scaled = rewards / (normalizer.var.sqrt() + RETURN_STD_EPS)  # (N,)
    discounted_return.masked_fill_(dones, 0.0)
    return scaled.clamp(-REWARD_CLIP, REWARD_CLIP)


def normalize_advantages(advantages: Tensor) -> Tensor:
    """Zero mean, unit (sample) std over all ranks' advantages: (...) -> (...); a single sample is left as it is
    (its std is undefined)."""
    n, mean, var = distributed.moments(advantages.reshape(-1, 1))
    if n < 2:
        return advantages
    std = (var * (n / (n - 1))).sqrt()  # (1,) Bessel-corrected, as Tensor.std
    return (advantages - mean) / (std + 1e-8)


def clipped_surrogate_loss(log_prob: Tensor, old_log_prob: Tensor, advantages: Tensor, clip: float) -> Tensor:
    """-min(r A, clip(r, 1-c, 1+c) A), averaged; r = exp(log_prob - old_log_prob). Inputs (B,)."""
    ratio = torch.exp(log_prob - old_log_prob)
    surrogate = ratio * advantages
    clipped = ratio.clamp(1.0 - clip, 1.0 + clip) * advantages
    return -torch.min(surrogate, clipped).mean()


def dual_clip_surrogate_loss(log_prob: Tensor, old_log_prob: Tensor, advantages: Tensor, clip: float,
                              dual_clip: float) -> Tensor:
    """The clipped surrogate with dual clip (Ye et al., 2020; πRL uses c = 3): for a negative advantage the
    objective is also bounded below by c A, so a huge ratio on a bad action cannot dominate; inputs (B,)."""
    ratio = torch.exp(log_prob - old_log_prob)
    clipped = torch.min(ratio * advantages, ratio.clamp(1.0 - clip, 1.0 + clip) * advantages)
    objective = torch.where(advantages < 0, torch.max(clipped, dual_clip * advantages), clipped)
    return -objective.mean()


def huber_value_loss(value: Tensor, old_value: Tensor, returns: Tensor, clip: float | None, delta: float) -> Tensor:
    """`clipped_value_loss` with the Huber loss (quadratic within `delta`, linear beyond) in place of the square;
    inputs (B,)."""
    def huber(x: Tensor) -> Tensor:
        return torch.nn.functional.huber_loss(x, returns, reduction="none", delta=delta)
    loss = huber(value)
    if clip is not None:
        loss = torch.max(loss, huber(old_value + (value - old_value).clamp(-clip, clip)))
    return loss.mean()


def clipped_value_loss(value: Tensor, old_value: Tensor, returns: Tensor, clip: float | None) -> Tensor:
    """max((V - R)^2, (V_old + clip(V - V_old, -c, c) - R)^2), averaged; plain MSE when clip is None."""
    loss = (value - returns).square()
    if clip is not None:
        clipped = old_value + (value - old_value).clamp(-clip, clip)
        loss = torch.max(loss, (clipped - returns).square())
    return loss.mean()


def clip_fraction(log_prob: Tensor, old_log_prob: Tensor, clip: float) -> Tensor:
    """Share of samples whose ratio r = exp(log_prob - old_log_prob) lies outside [1-c, 1+c]: (B,) -> ()."""
    ratio = torch.exp(log_prob - old_log_prob)
    return ((ratio - 1.0).abs() > clip).to(log_prob.dtype).mean()


def approx_kl(log_prob: Tensor, old_log_prob: Tensor) -> Tensor:
    """KL(old || new) estimated from the samples: mean of (r - 1) - log r, r the ratio (B,) -> ().

    Schulman's low-variance, never-negative "k3" estimator (as cleanrl logs it); unlike the closed-form
    Gaussian KL the adaptive schedule uses, it needs only the log-probabilities.
    """
    log_ratio = log_prob - old_log_prob
    return (torch.expm1(log_ratio) - log_ratio).mean()


def explained_variance(values: Tensor, returns: Tensor) -> Tensor:
    """1 - Var(returns - values) / Var(returns) over a batch (B,) -> (): 1 is a perfect critic, 0 is no
    better than a constant, negative is worse; 0 when the returns do not vary (nothing to explain; a NaN
    here would trip the runner's NaN guard on a batch that is perfectly healthy)."""
    var_returns = returns.var()
    return torch.where(var_returns > 0, 1.0 - (returns - values).var() / var_returns.clamp(min=1e-30), 0.0)


class PPO:
    """PPO learner: `act` -> `process_env_step` (T times) -> `compute_returns` -> `update`.

    Args:
        cfg: PPO hyper-parameters.
        policy: the actor-critic to train.
        num_envs: N.
        generator: torch RNG for action noise and minibatch shuffling (saved in checkpoints).
    """

    def __init__(self, cfg: PPOConfig, policy: ActorCritic, num_envs: int, generator: torch.Generator):
        self.cfg = cfg
        self.policy = policy
        self.generator = generator
        self.learning_rate = cfg.learning_rate
        self.optimizer = torch.optim.Adam(policy.parameters(), lr=cfg.learning_rate, eps=cfg.adam_eps)
        # By default actor (with the std) and critic are clipped separately, as RSL-RL does: with one
        # global norm the value loss's larger gradients shrink every policy step (cfg.grad_clip "joint").
        self._actor_params = [p for n, p in policy.named_parameters() if not n.startswith("critic.")]
        self._critic_params = list(policy.critic.parameters())
        self._all_params = list(policy.parameters())
        if cfg.grad_clip == "joint":
            self._clip_groups = [list(policy.parameters())]
        else:
            self._clip_groups = [self._actor_params, self._critic_params]
        obs_dim = policy.actor[0].in_features
        critic_dim = policy.critic[0].in_features
        action_dim = policy.action_dim
        device = next(policy.parameters()).device
        self.storage = RolloutStorage(cfg.num_steps_per_env, num_envs, obs_dim, critic_dim, action_dim, device)
        self.old_std = policy.action_std().detach().clone()  # (A,) std used for the current rollout
        # cfg.normalize_reward: running std of each world's discounted return (N,)
        self.return_normalizer = EmpiricalNormalization(1, eps=0.0) if cfg.normalize_reward else None
        self.discounted_return = torch.zeros(num_envs, device=device)
        self.precision = resolve_precision(cfg.precision, device)  # "float32" or "bfloat16"
        self._device = device

    def _actor(self, obs_n: Tensor) -> Tensor:
        """Action means (N, A) float32 of normalised observations (N, O)."""
        with autocast(self.precision, self._device):
            return self.policy.actor(obs_n).float()

    def _critic(self, critic_n: Tensor) -> Tensor:
        """Values (N,) float32 of normalised critic observations (N, O_c)."""
        with autocast(self.precision, self._device):
            return self.policy.critic(critic_n).squeeze(-1).float()

    def _value(self, critic_obs: Tensor) -> Tensor:
        """Values (N,) float32 of raw critic observations (N, O_c): `ActorCritic.value` in this precision."""
        with autocast(self.precision, self._device):
            return self.policy.value(critic_obs).float()

    # ------------------------------------------------------------------ rollout
    @torch.no_grad()
    def act(self, obs: Tensor, critic_obs: Tensor) -> Tensor:
        """Sample actions (N, A) for raw observations (N, O) / (N, O_c) and record the step."""
        s, t = self.storage, self.storage.step
        self.policy.update_normalization(obs, critic_obs)
        obs_n = self.policy.obs_normalizer(obs)
        critic_n = self.policy.critic_obs_normalizer(critic_obs)
        mean = self._actor(obs_n)
        std, log_std = self.policy.action_std(), self.policy.action_log_std()
        actions = mean + std * torch.randn(mean.shape, generator=self.generator, device=mean.device)
        if t == 0:
            self.old_std = std.detach().clone()
        s.obs[t] = obs_n
        s.critic_obs[t] = critic_n
        s.actions[t] = actions
        s.means[t] = mean
        s.log_probs[t] = gaussian_log_prob(actions, mean, log_std)
        s.values[t] = self._critic(critic_n)
        return actions

    @torch.no_grad()
    def process_env_step(
        self, rewards: Tensor, terminated: Tensor, truncated: Tensor, final_critic_obs: Tensor
    ) -> None:
        """Record the outcome of the last `act`; time-outs bootstrap from V(final observation)."""
        if self.return_normalizer is not None:
            rewards = scale_rewards(
                rewards, self.discounted_return, terminated | truncated, self.return_normalizer, self.cfg.gamma
            )
        rewards = bootstrap_time_outs(rewards, truncated, lambda ids: self._value(final_critic_obs[ids]),
                                      self.cfg.gamma)
        self.storage.record_outcome(rewards, terminated, truncated)

    @torch.no_grad()
    def compute_returns(self, last_critic_obs: Tensor) -> None:
        s = self.storage
        s.compute_returns(self._value(last_critic_obs), self.cfg.gamma, self.cfg.lam)
        if self.cfg.normalize_advantage and not self.cfg.advantage_norm_per_minibatch:  # as in RSL-RL
            s.advantages = normalize_advantages(s.advantages)

    # ------------------------------------------------------------------ learning
    def update(self) -> dict[str, float]:
        """Epochs x minibatches of clipped PPO.

        Returns the means over minibatches of the losses, the entropy, the closed-form KL (`kl`, 0 with
        a fixed schedule), `clip_fraction` and `approx_kl`; the batch's `explained_variance` of the
        rollout values against the returns; the learning rate and the mean action std.
        """
        cfg, policy = self.cfg, self.policy
        # Per-minibatch values are summed as tensors and read once at the end: no host sync per step
        # beyond the adaptive schedule's KL (the learning-rate decision is made on the host).
        keys = ("value_loss", "surrogate_loss", "entropy", "clip_fraction", "approx_kl")
        totals = torch.zeros(len(keys), device=self.storage.values.device)
        kl_total = 0.0
        n_updates = 0
        per_minibatch = cfg.normalize_advantage and cfg.advantage_norm_per_minibatch
        minibatches = self.storage.minibatches(
            cfg.num_mini_batches, cfg.num_learning_epochs, self.generator, reshuffle=cfg.reshuffle_minibatches
        )
        for mb in minibatches:
            advantages = normalize_advantages(mb["advantages"]) if per_minibatch else mb["advantages"]  # (B,)
            mean = self._actor(mb["obs"])  # (B, A)
            std, log_std = policy.action_std(), policy.action_log_std()  # (A,), (A,)
            value = self._critic(mb["critic_obs"])  # (B,)
            log_prob = gaussian_log_prob(mb["actions"], mean, log_std)  # (B,)
            entropy = gaussian_entropy(log_std)

            if cfg.schedule == "adaptive":
                with torch.no_grad():
                    kl = distributed.mean(gaussian_kl(mb["means"], self.old_std, mean, std).mean().item())
                self.learning_rate = adapt_learning_rate(self.learning_rate, kl, cfg.desired_kl)
                for group in self.optimizer.param_groups:
                    group["lr"] = self.learning_rate
                kl_total += kl

            surrogate = clipped_surrogate_loss(log_prob, mb["log_probs"], advantages, cfg.clip_param)
            value_clip = cfg.clip_param if cfg.use_clipped_value_loss else None
            value_loss = clipped_value_loss(value, mb["values"], mb["returns"], value_clip)
            loss = surrogate + cfg.value_loss_coef * value_loss - cfg.entropy_coef * entropy

            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            distributed.all_reduce_gradients(self._all_params)
            for params in self._clip_groups:
                torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
            self.optimizer.step()

            with torch.no_grad():
                lp = log_prob.detach()
                totals += torch.stack(
                    (
                        value_loss.detach(),
                        surrogate.detach(),
                        entropy.detach(),
                        clip_fraction(lp, mb["log_probs"], cfg.clip_param),
                        approx_kl(lp, mb["log_probs"]),
                    )
                )
            n_updates += 1
        s = self.storage
        s.step = 0
        out = dict(zip(keys, (totals / n_updates).tolist(), strict=True))
        out["kl"] = kl_total / n_updates
        out["explained_variance"] = explained_variance(s.values.flatten(), s.returns.flatten()).item()
        out["learning_rate"] = self.learning_rate
        out["action_std"] = policy.action_std().mean().item()
        return out

    def inference_policy(self) -> tuple[torch.nn.Module, torch.nn.Module]:
        """(Gaussian mean MLP, observation normaliser): what export turns into ONNX."""
        return self.policy.inference_policy()

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        out = {
            "policy": self.policy.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "learning_rate": self.learning_rate,
            "generator": self.generator.get_state(),
        }
        if self.return_normalizer is not None:
            out["return_normalizer"] = self.return_normalizer.state_dict()
            out["discounted_return"] = self.discounted_return.clone()
        return out

    def load_state_dict(self, state: dict) -> None:
        self.policy.load_state_dict(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.learning_rate = float(state["learning_rate"])
        self.generator.set_state(state["generator"])
        if self.return_normalizer is not None:
            self.return_normalizer.load_state_dict(state["return_normalizer"])
            saved = state["discounted_return"]  # (N,) per world: a resume over another number of ranks restarts it
            if saved.shape == self.discounted_return.shape:
                self.discounted_return.copy_(saved)
            else:
                self.discounted_return.zero_()


def build_policy(cfg: PolicyConfig, spec: EnvSpec) -> ActorCritic:
    """A freshly initialised actor-critic sized for the env."""
    return ActorCritic(spec.obs_dim, spec.critic_obs_dim, spec.action_dim, cfg).to(spec.device)


def build(cfg: PPOConfig, policy: ActorCritic, spec: EnvSpec, generator: torch.Generator) -> PPO:
    return PPO(cfg, policy, spec.num_envs, generator)


ENTRY = ALGORITHMS.register("ppo", AlgorithmEntry(
    config_cls=PPOConfig, policy_config_cls=PolicyConfig, runner_cls=OnPolicyRunner, build_policy=build_policy,
    build=build), default=True)
"""The registry entry: the default algorithm (a config without `algo_name` trains PPO)."""
