"""Online RL fine-tuning of a VLA, πRL's way (`--algo vla-rl`): PPO over the likelihood of a stochastic denoising
chain, with either of πRL's two ways of making the flow policy stochastic (`algo.method`):

- **Flow-Noise**: every denoising step adds the VLA's learned noise (`noise_std`, bounded in [σ_min, σ_max]); the
  log-likelihood is the whole chain's, initial Gaussian included (the one-layer MDP: the chain is one action);
  an entropy bonus on the step noise.
- **Flow-SDE**: the ODE becomes an SDE with σ_s = a sqrt(s / (1 - s)); hybrid sampling makes one random denoising
  step per decision stochastic and the rest deterministic, and only that step's log-likelihood counts (the
  two-layer MDP: the denoising step is part of the transition).

Both sample through the VLA interface only (`robo_rl.learn.networks.vla.VLA`) and the chain machinery of
`robo_rl.learn.networks.flow` (ReinFlow's, generalised). The PPO is πRL's: GAE, clip with dual clip, value clip,
Huber value loss, a value head on the fused prefix (`policy.value_input`: detached from the encoders or shared).
One transition is one decision: the first E actions of the chunk run open-loop (`robo_rl.adapters.chunked`), their
rewards summed, `algo.gamma` discounting per decision. The observation normaliser stays the SFT one (frozen), so
the stored log-likelihoods stay exactly what the update recomputes (the first minibatch's ratio is 1).

**GRPO** (`algo.advantage: grpo`) is the critic-free alternative: the env's worlds form groups of M that start
every episode from one shared initial state (`env.reset_group_size`, `robo_rl.tasks.reset_groups`); every iteration
starts with a reset of all worlds and every world runs one whole episode (`num_steps_per_env` decisions must reach
its time-out; a world's decisions after its episode ended, e.g. by a failure, are left out). Each episode's return
(the sum of its rewards) is normalised within its group (`grpo_advantages`) and is the advantage of every decision
of the episode; groups whose success rate (the task's `success` at the episode's end) lies outside `algo.grpo_band`
are left out of the loss. No value head, no value loss, no critic warm-up; the same dual-clipped surrogate over
either method's likelihood.

The policy starts from a `vla-sft` run (`algo.pretrained`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from robo_rl.core.config import ConfigError, _f
from robo_rl.learn import distributed
from robo_rl.learn.algorithm_registry import ALGORITHMS, AlgorithmEntry, EnvSpec, InitFrom
from robo_rl.learn.algorithms.ppo import (
    adapt_learning_rate,
    approx_kl,
    clip_fraction,
    dual_clip_surrogate_loss,
    explained_variance,
    huber_value_loss,
    normalize_advantages,
)
from robo_rl.learn.algorithms.reinflow import noise_entropy
from robo_rl.learn.algorithms.vla_sft import build_vla_policy
from robo_rl.learn.networks.flow import (
    chain_log_prob,
    diagonal_normal_log_prob,
    euler_step_stats,
    flow_sde_hybrid_stats,
    flow_sde_step_stats,
    hybrid_step_mask,
    noisy_chain,
)
from robo_rl.learn.networks.vla import VLAPolicy, VLAPolicyConfig, bind
from robo_rl.learn.precision import PRECISIONS, autocast, resolve_precision
from robo_rl.learn.rollout_storage import RolloutStorage, bootstrap_time_outs
from robo_rl.learn.runner import OnPolicyRunner, critic_group

METHODS = ("flow-noise", "flow-sde")
ADVANTAGES = ("gae", "grpo")


@dataclass(frozen=True, kw_only=True)
class VLARLConfig:
    """PPO fine-tuning of a VLA (defaults from πRL, shared/REFERENCES.md)."""

    pretrained: str = ""
    """The vla-sft run or checkpoint to fine-tune."""
    method: str = _f("flow-sde", choices=METHODS)
    """How the chain is made stochastic: `flow-noise` (learned noise at every step, whole-chain likelihood) or
    `flow-sde` (one SDE step per decision, its likelihood only)."""
    num_steps_per_env: int = _f(25, ge=1)
    """Decisions per world per iteration (each runs `policy.execute_steps` env steps)."""
    num_learning_epochs: int = _f(4, ge=1)
    num_mini_batches: int = _f(8, ge=1)
    clip_param: float = _f(0.2, gt=0.0, le=1.0)
    dual_clip: float = _f(3.0, gt=1.0)
    """Dual clip c: a negative advantage's objective is bounded below by c A."""
    value_clip: float = _f(0.2, ge=0.0)
    """Clip of the value change from the rollout's (0: none)."""
    huber_delta: float = _f(10.0, gt=0.0)
    actor_learning_rate: float = _f(1e-4, gt=0.0, le=1.0)
    """The actor's Adam learning rate (its initial value with the adaptive schedule)."""
    schedule: str = _f("adaptive", choices=("adaptive", "fixed"))
    """`adaptive`: RSL-RL's rule on the actor's learning rate (divided by 1.5 when a minibatch's KL from the rollout
    policy exceeds 2 `desired_kl`, multiplied by 1.5 below half of it; within [1e-7, 1e-3]), the KL estimated from
    the chain likelihoods (`approx_kl`). A 56 % SFT policy fine-tuned at a fixed 1e-4 moved by a KL of 0.3-2.3 per
    update and collapsed to 0 % within 5 updates (docs/vla.md)."""
    desired_kl: float = _f(0.01, gt=0.0)
    freeze_prefix: bool = False
    """Keep the prefix (image encoder, keypoints, instruction and state projections, prefix transformer, the auxiliary
    head and token) at its SFT weights: RL trains the action expert (and Flow-Noise's noise head) only, and the
    update reads the context each decision's rollout computed (stored: (T, N, L, W) floats) instead of computing the
    prefix again."""
    kl_stop: float = _f(5.0, ge=0.0)
    """The actor takes no more steps in an update once a minibatch's KL exceeds `kl_stop` x `desired_kl` (the critic
    goes on); 0: never stops."""
    critic_learning_rate: float = _f(5e-4, gt=0.0, le=1.0)
    gamma: float = _f(0.99, gt=0.0, le=1.0)
    lam: float = _f(0.95, ge=0.0, le=1.0)
    value_loss_coef: float = _f(0.5, ge=0.0)
    entropy_coef: float = _f(0.005, ge=0.0)
    """Flow-Noise's entropy bonus on the step noise (πRL: 0.005; unused by flow-sde, whose noise is a schedule)."""
    max_grad_norm: float = _f(1.0, gt=0.0)
    critic_warmup_iterations: int = _f(2, ge=0)
    """First iterations that train only the value head (the SFT policy needs a baseline first)."""
    normalize_advantage: bool = True
    """Normalise GAE's advantages over the batch (GRPO's are normalised within their groups already)."""
    advantage: str = _f("gae", choices=ADVANTAGES)
    """How decisions are credited: `gae` (PPO with the value head) or `grpo` (critic-free: one whole episode per world
    and iteration from its group's shared initial state, its return normalised within the group; needs
    env.reset_group_size >= 2)."""
    grpo_band: tuple[float, float] = _f((0.1, 0.9))
    """GRPO: groups whose success rate lies outside [low, high] (all failed or all solved: no signal) are left out
    of the loss."""
    precision: str = _f("float32", choices=PRECISIONS)
    """`bfloat16`: the VLA's layers run under `torch.autocast` in bfloat16, in the rollout and the update alike (the
    first minibatch's ratio stays one); parameters, optimisers, the chains' arithmetic, likelihoods and losses stay
    float32 (`robo_rl.learn.precision`). `auto`: bfloat16 where the hardware has it. Export computes in float32."""

    def validate(self) -> None:
        band = self.grpo_band
        if len(band) != 2 or not 0.0 <= band[0] <= band[1] <= 1.0:
            raise ConfigError(f"config error: algo.grpo_band = {list(band)!r}: expected [low, high] with "
                              "0 <= low <= high <= 1")


def grpo_advantages(returns: Tensor, success: Tensor, band: tuple[float, float] = (0.1, 0.9),
                    eps: float = 1e-6) -> tuple[Tensor, Tensor]:
    """GRPO's critic-free advantages of G groups of M rollouts that each started from one initial state.

    Args:
        returns: (G, M) each rollout's return.
        success: (G, M) bool, each rollout's success.
        band: groups whose success rate lies outside [low, high] are dropped (all solved or all failed: no signal).
        eps: added to the group std.

    Returns:
        (advantages (G, M): (R - mean of its group) / (std of its group + eps), 0 in dropped groups;
         keep (G,) bool: the groups kept).
    """
    rate = success.to(returns.dtype).mean(1)  # (G,)
    keep = (rate >= band[0]) & (rate <= band[1])
    mean = returns.mean(1, keepdim=True)
    std = returns.std(1, keepdim=True, unbiased=False)
    advantages = (returns - mean) / (std + eps)
    return advantages * keep[:, None], keep


def grpo_decision_advantages(rewards: Tensor, dones: Tensor, success: Tensor, group_size: int,
                             band: tuple[float, float]) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """GRPO's advantage of every decision of a rollout in which each world's first episode starts at decision 0 and
    worlds g*M .. g*M+M-1 (M = `group_size`) started from one initial state.

    Args:
        rewards: (T, N) the decisions' rewards.
        dones: (T, N) 1 where an episode ended with the decision.
        success: (T, N) the task's success where an episode ended (read only there).
        group_size: M.
        band: `grpo_advantages`' success band.

    Returns:
        (advantages (T, N): the group-normalised return (sum of rewards) of each world's first episode on that
         episode's decisions, 0 elsewhere;
         in_loss (T, N) bool: the decisions of first episodes in kept groups;
         keep (G,) bool: the groups kept;
         won (N,) bool: each first episode's success).
    """
    inside = (dones.cumsum(0) - dones) == 0  # (T, N) decisions up to and including each world's first episode end
    returns = (rewards * inside).sum(0)  # (N,)
    won = (success * dones * inside).sum(0) > 0.5  # (N,)
    advantages, keep = grpo_advantages(returns.view(-1, group_size), won.view(-1, group_size), band)  # (G, M), (G,)
    in_loss = inside & keep.repeat_interleave(group_size)[None]  # (T, N)
    return advantages.flatten()[None] * in_loss, in_loss, keep, won


EXPERT_KEYS = ("action_in.", "action_time_mlp.", "action_pos", "expert.", "action_out.")
"""The action expert's parameters (what `algo.freeze_prefix` leaves the actor to train)."""
ACTOR_LR_BOUNDS = (1e-7, 1e-3)
"""The adaptive schedule keeps the actor's learning rate within these."""


def _bound(x: Tensor, clip: float | None) -> Tensor:
    return x if clip is None else x.clamp(-clip, clip)


class VLARL:
    """PPO over a VLA's denoising chain: `act` -> `process_env_step` (T times) -> `compute_returns` -> `update`.

    Args:
        cfg: the hyper-parameters.
        policy: the VLA to fine-tune (holding the SFT weights).
        num_envs: N.
        obs_dim: O, the "policy" group's size (stored whole: the VLA picks its state columns).
        generator: torch RNG for the chains' noise, the hybrid steps and minibatch shuffling (saved in checkpoints).
        group_size: M, the env's worlds per group of shared initial states (GRPO's groups).
    """

    reads_observation_groups = True
    """The runner passes the observation groups (image, instruction, state) to `act`, `process_env_step` and
    `compute_returns`."""

    def __init__(self, cfg: VLARLConfig, policy: VLAPolicy, num_envs: int, obs_dim: int, generator: torch.Generator,
                 group_size: int = 1):
        self.cfg, self.policy, self.generator, self.group_size = cfg, policy, generator, group_size
        self.grpo = cfg.advantage == "grpo"
        self.privileged = policy.config.value_input == "privileged"  # V reads the critic group, not the prefix
        policy.eval()  # rollouts run in eval mode (its attention's fast path), fresh or resumed alike; `update` trains
        critic = list(policy.critic.parameters())
        ids = {id(p) for p in critic}
        self.actor_parameters = [p for n, p in policy.named_parameters() if p.requires_grad and id(p) not in ids
                                 and (not cfg.freeze_prefix or n.startswith((*EXPERT_KEYS, "noise_head.")))]
        if cfg.method == "flow-sde":  # its noise is a schedule: the noise head is not used
            noise = {id(p) for p in policy.noise_head.parameters()}
            self.actor_parameters = [p for p in self.actor_parameters if id(p) not in noise]
        self.actor_optimizer = torch.optim.Adam(self.actor_parameters, lr=cfg.actor_learning_rate)
        self.actor_learning_rate = cfg.actor_learning_rate  # the adaptive schedule's current value
        self.critic_optimizer = torch.optim.Adam(critic, lr=cfg.critic_learning_rate)
        device = next(policy.parameters()).device
        self.precision = resolve_precision(cfg.precision, device)  # "float32" or "bfloat16"
        k, d = policy.num_steps, policy.flat_dim
        # the storage's "actions" are flattened chains; the observation groups go to extra buffers
        self.storage = s = RolloutStorage(cfg.num_steps_per_env, num_envs, 1, 1, (k + 1) * d, device)
        size = policy.image_size
        s.add_buffer("image", (3, size, size), torch.uint8)
        s.add_buffer("text", (), torch.long)
        s.add_buffer("policy", (obs_dim,))
        s.add_buffer("sde_step", (), torch.long)
        if cfg.freeze_prefix:
            s.add_buffer("ctx", (policy.context_len, policy.config.width))
        if self.privileged and not self.grpo:
            s.add_buffer("critic", (policy.critic_obs_dim,))
        if self.grpo:
            s.add_buffer("in_loss", (), torch.bool)  # the decisions of kept groups' episodes
            self.episode_success = torch.zeros(cfg.num_steps_per_env, num_envs, device=device)  # (T, N)
        self._grpo_stats: dict[str, float] = {}
        self.updates = 0

    @property
    def whole_episodes(self) -> bool:
        """GRPO: the runner starts every iteration with a reset of all worlds (`env.reset(random_start=False)`) and
        passes each step's episode ends to `record_episode_ends`."""
        return self.grpo

    # ------------------------------------------------------------------ rollout
    @torch.no_grad()
    def act(self, obs: dict[str, Tensor], critic_obs: dict[str, Tensor]) -> Tensor:
        """Sample one chain per world from the prefix of `obs`; the executed actions are the first E of its final
        sample's chunk (N, E, A) (or (N, A) when E = 1)."""
        with autocast(self.precision, self.storage.rewards.device):
            return self._act(obs)

    def _act(self, obs: dict[str, Tensor]) -> Tensor:
        s, t, policy = self.storage, self.storage.step, self.policy
        ctx = policy.encode_prefix(obs)
        n, k, d = ctx.shape[0], policy.num_steps, policy.flat_dim
        g = self.generator
        x0 = policy.initial_chain(n, g, ctx.device)  # as the deployed chain starts: zeros explore only by the method
        eps = torch.randn(n, k, d, generator=g, device=g.device).to(ctx.device)
        if self.cfg.method == "flow-noise":
            step = euler_step_stats(bind(policy, ctx), lambda x, tt: policy.noise_std(ctx, x, tt), k)
            chain, means, stds = noisy_chain(step, x0, eps, policy.action_clip)
            log_prob = chain_log_prob(chain, means, stds)
            sde_step = torch.zeros(n, dtype=torch.long, device=ctx.device)
        else:
            mask = hybrid_step_mask(n, k, g, ctx.device)  # (N, K) one stochastic step each
            step = flow_sde_hybrid_stats(bind(policy, ctx), k, policy.config.sde_noise_level, mask)
            chain, means, stds = noisy_chain(step, x0, eps, policy.action_clip)
            log_prob = chain_log_prob(chain, means, stds, steps=mask, prior=False)
            sde_step = mask.int().argmax(1)
        s.extras["image"][t] = obs["image"]
        s.extras["text"][t] = obs["text"]
        s.extras["policy"][t] = obs["policy"]
        s.extras["sde_step"][t] = sde_step
        if self.cfg.freeze_prefix:
            s.extras["ctx"][t] = ctx
        s.actions[t] = chain.flatten(1)
        s.log_probs[t] = log_prob
        if not self.grpo:  # GRPO has no critic
            if self.privileged:
                critic_obs = critic_group(obs)
                policy.critic_normalizer.update(critic_obs)
                s.extras["critic"][t] = critic_obs
                s.values[t] = policy.value(None, critic_obs)
            else:
                s.values[t] = policy.value(ctx)
        chunk = _bound(chain[:, -1], policy.action_clip).reshape(n, policy.horizon, policy.action_dim)
        return chunk[:, 0] if policy.execute_steps == 1 else chunk[:, : policy.execute_steps]

    @torch.no_grad()
    def record_episode_ends(self, episode: dict[str, Tensor]) -> None:
        """GRPO: the task's success of the episodes that ended in the last step (`info["episode"]`: ids (K,),
        success (K,)), given before `process_env_step`.

        Raises:
            ConfigError: the task reports no success at an episode's end (one line).
        """
        if not episode:
            return
        if "success" not in episode:
            metrics = ", ".join(k for k in episode if k != "ids") or "none"
            raise ConfigError("config error: algo.advantage = grpo keeps groups by their success rate: this task "
                              f"reports no success at an episode's end (its metrics: {metrics})")
        self.episode_success[self.storage.step, episode["ids"]] = episode["success"].to(self.episode_success)

    @torch.no_grad()
    def process_env_step(self, rewards: Tensor, terminated: Tensor, truncated: Tensor,
                         final_obs: dict[str, Tensor]) -> None:
        """Record the outcome of the last `act`; time-outs bootstrap from V of the final observation's prefix (GAE;
        GRPO sums the episode's rewards as they are)."""
        def final_values(ids: Tensor) -> Tensor:
            return self._value({k: v[ids] for k, v in final_obs.items()})
        if not self.grpo:
            rewards = bootstrap_time_outs(rewards, truncated, final_values, self.cfg.gamma)
        self.storage.record_outcome(rewards, terminated, truncated)

    @torch.no_grad()
    def compute_returns(self, last_obs: dict[str, Tensor]) -> None:
        s = self.storage
        if self.grpo:
            s.advantages, in_loss, keep, won = grpo_decision_advantages(s.rewards, s.dones, self.episode_success,
                                                                        self.group_size, self.cfg.grpo_band)
            s.extras["in_loss"].copy_(in_loss)
            self.episode_success.zero_()
            self._grpo_stats = {"grpo_kept_groups": keep.float().mean().item(),
                                "grpo_success_rate": won.float().mean().item()}
            return
        s.compute_returns(self._value(last_obs), self.cfg.gamma, self.cfg.lam)
        if self.cfg.normalize_advantage:
            s.advantages = normalize_advantages(s.advantages)

    def _value(self, obs: dict[str, Tensor]) -> Tensor:
        """V (N,) of observation groups: from the critic group (`value_input: privileged`) or the encoded prefix."""
        if self.privileged:
            return self.policy.value(None, critic_group(obs))
        with autocast(self.precision, obs["image"].device):
            return self.policy.value(self.policy.encode_prefix(obs))

    # ------------------------------------------------------------------ learning
    def minibatch_log_prob(self, ctx: Tensor, flat_chain: Tensor, sde_step: Tensor) -> tuple[Tensor, Tensor]:
        """(log-probs (B,), step stds (B, K', D)) of stored chains under the current policy: every step's
        (Flow-Noise) or the stochastic step's (Flow-SDE)."""
        policy = self.policy
        b, k, d = ctx.shape[0], policy.num_steps, policy.flat_dim
        chain = flat_chain.reshape(b, k + 1, d)
        inputs = torch.cat([chain[:, :1], _bound(chain[:, 1:-1], policy.action_clip)], 1)  # (B, K, D) steps' inputs
        if self.cfg.method == "flow-noise":
            x = inputs.reshape(b * k, d)
            t = (torch.arange(k, device=ctx.device, dtype=ctx.dtype) / k).repeat(b)  # (B K,)
            ctx_k = ctx.repeat_interleave(k, 0)
            means = (x + policy.velocity(ctx_k, x, t) / k).reshape(b, k, d)
            stds = policy.noise_std(ctx_k, x, t).reshape(b, k, d)
            return chain_log_prob(chain, means, stds), stds
        rows = torch.arange(b, device=ctx.device)
        x = inputs[rows, sde_step]  # (B, D)
        t = sde_step.to(ctx.dtype) / k
        mean, std = flow_sde_step_stats(x, policy.velocity(ctx, x, t), t, 1.0 / k, policy.config.sde_noise_level)
        return diagonal_normal_log_prob(chain[rows, sde_step + 1], mean, std), std[:, None]

    def update(self) -> dict[str, float]:
        """Epochs x minibatches of PPO on the chain ratio (the value head only, during warm-up); GRPO: the actor on
        the decisions of kept groups' episodes only (a minibatch without one is skipped), no critic."""
        cfg, policy, grpo = self.cfg, self.policy, self.grpo
        train_actor = grpo or self.updates >= cfg.critic_warmup_iterations
        keys = ("value_loss", "surrogate_loss", "entropy", "clip_fraction", "approx_kl")
        totals = torch.zeros(len(keys))
        n, ratio_first, kl_stopped = 0, 1.0, False
        policy.train()
        value_clip = cfg.value_clip if cfg.value_clip > 0 else None
        for mb in self.storage.minibatches(cfg.num_mini_batches, cfg.num_learning_epochs, self.generator):
            if grpo:
                rows = mb["in_loss"].nonzero().squeeze(-1)  # (B',) dropped groups contribute nothing
                if rows.numel() == 0:
                    continue
                mb = {k: v.index_select(0, rows) for k, v in mb.items()}
            with autocast(self.precision, mb["actions"].device):  # the layers only: their outputs are float32
                if cfg.freeze_prefix:  # the prefix has not changed since the rollout: its context is stored
                    ctx = mb["ctx"]
                else:
                    ctx = policy.encode_prefix({"image": mb["image"], "text": mb["text"], "policy": mb["policy"]})
                loss = value_loss = surrogate = entropy = torch.zeros(())
                if not grpo:
                    value = policy.value(ctx, mb["critic"] if self.privileged else None)
                    value_loss = huber_value_loss(value, mb["values"], mb["returns"], value_clip, cfg.huber_delta)
                    loss = cfg.value_loss_coef * value_loss
                if train_actor and not kl_stopped:
                    log_prob, stds = self.minibatch_log_prob(ctx, mb["actions"], mb["sde_step"])
                    surrogate = dual_clip_surrogate_loss(log_prob, mb["log_probs"], mb["advantages"],
                                                         cfg.clip_param, cfg.dual_clip)
                    loss = loss + surrogate
                    if cfg.method == "flow-noise":
                        entropy = noise_entropy(stds)
                        loss = loss - cfg.entropy_coef * entropy
                else:
                    with torch.no_grad():
                        log_prob = self.minibatch_log_prob(ctx, mb["actions"], mb["sde_step"])[0]
            actor_steps = train_actor and not kl_stopped
            if actor_steps:  # the KL of this minibatch before its step: the schedule and the stop read it
                kl = distributed.mean(approx_kl(log_prob.detach(), mb["log_probs"]).item())
                if cfg.schedule == "adaptive":
                    self._set_actor_learning_rate(kl)
                if cfg.kl_stop and kl > cfg.kl_stop * cfg.desired_kl:
                    actor_steps, kl_stopped = False, True
            self.actor_optimizer.zero_grad(set_to_none=True)
            self.critic_optimizer.zero_grad(set_to_none=True)
            if loss.requires_grad:
                loss.backward()
            distributed.all_reduce_gradients(policy.parameters())
            if not grpo:
                torch.nn.utils.clip_grad_norm_(policy.critic.parameters(), cfg.max_grad_norm)
                self.critic_optimizer.step()
            if actor_steps:
                torch.nn.utils.clip_grad_norm_(self.actor_parameters, cfg.max_grad_norm)
                self.actor_optimizer.step()
            with torch.no_grad():
                lp = log_prob.detach()
                if n == 0:  # before any step: the ratio must be 1
                    ratio_first = torch.exp(lp - mb["log_probs"]).mean().item()
                totals += torch.stack((value_loss.detach(), surrogate.detach(), entropy.detach(),
                                       clip_fraction(lp, mb["log_probs"], cfg.clip_param),
                                       approx_kl(lp, mb["log_probs"]))).cpu()
            n += 1
        policy.eval()
        s = self.storage
        s.step = 0
        self.updates += 1
        out = dict(zip(keys, (totals / max(n, 1)).tolist(), strict=True))
        out["ratio_first"] = ratio_first
        out["actor_learning_rate"] = self.actor_learning_rate
        out["kl_stopped"] = float(kl_stopped)
        out["actor_trained"] = float(train_actor and n > 0)
        if grpo:
            del out["value_loss"]
            out.update(self._grpo_stats)
        else:
            out["explained_variance"] = explained_variance(s.values.flatten(), s.returns.flatten()).item()
        return out

    def _set_actor_learning_rate(self, kl: float) -> None:
        self.actor_learning_rate = adapt_learning_rate(self.actor_learning_rate, kl, self.cfg.desired_kl,
                                                       *ACTOR_LR_BOUNDS)
        for group in self.actor_optimizer.param_groups:
            group["lr"] = self.actor_learning_rate

    def inference_policy(self) -> tuple[torch.nn.Module, torch.nn.Module]:
        return self.policy.inference_policy()

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        return {"policy": self.policy.state_dict(), "actor_optimizer": self.actor_optimizer.state_dict(),
                "critic_optimizer": self.critic_optimizer.state_dict(), "generator": self.generator.get_state(),
                "updates": self.updates, "actor_learning_rate": self.actor_learning_rate}

    def load_state_dict(self, state: dict) -> None:
        self.policy.load_state_dict(state["policy"])
        self.actor_optimizer.load_state_dict(state["actor_optimizer"])
        self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        self.generator.set_state(state["generator"])
        self.updates = int(state["updates"])
        self.actor_learning_rate = float(state.get("actor_learning_rate", self.cfg.actor_learning_rate))


def build(cfg: VLARLConfig, policy: VLAPolicy, spec: EnvSpec, generator: torch.Generator) -> VLARL:
    if cfg.num_mini_batches > cfg.num_steps_per_env * spec.num_envs:
        raise ConfigError(f"config error: algo.num_mini_batches = {cfg.num_mini_batches}: more than the "
                          f"{cfg.num_steps_per_env * spec.num_envs} decisions of an iteration")
    if cfg.advantage == "grpo":
        if spec.reset_group_size < 2:
            raise ConfigError(f"config error: algo.advantage = grpo compares episodes from one initial state: set "
                              f"env.reset_group_size to 2 or more (it is {spec.reset_group_size}; sim.num_envs = "
                              f"{spec.num_envs} must be a multiple of it)")
        if cfg.num_steps_per_env < spec.episode_decisions:
            raise ConfigError(f"config error: algo.num_steps_per_env = {cfg.num_steps_per_env}: GRPO runs one whole "
                              f"episode per world and iteration, {spec.episode_decisions} decisions here "
                              "(env.episode_length_s / policy_dt / policy.execute_steps, rounded up); set it to "
                              f"{spec.episode_decisions}")
    return VLARL(cfg, policy, spec.num_envs, spec.obs_dim, generator, spec.reset_group_size)


_SHAPE_FIELDS = ("horizon", "state_terms", "image_encoder", "image_stride", "image_pool", "image_grid",
                 "image_keypoints", "instruction_keypoints", "width", "heads", "prefix_layers", "expert_layers",
                 "ffn_mult", "obs_normalization", "aux_terms", "aux_token", "instruction_pool")
"""Policy settings the SFT run must share (they shape the network or feed it)."""
_SFT_KEYS = ("image_encoder.", "image_proj.", "keypoint_logits.", "keypoint_queries.", "keypoint_proj.", "cell_xy",
             "text_proj.", "state_proj.", "prefix_pos", "prefix.", "prefix_norm.", *EXPERT_KEYS, "obs_normalizer.",
             "instruction_", "state_columns", "aux_")
"""What SFT trained (everything but the noise head and the critic): the chain and SFT's auxiliary head, which the
chain reads with `aux_token` (RL does not train it: it has no labels on a robot)."""

ENTRY = ALGORITHMS.register("vla-rl", AlgorithmEntry(
    config_cls=VLARLConfig, policy_config_cls=VLAPolicyConfig, runner_cls=OnPolicyRunner,
    build_policy=build_vla_policy, build=build,
    init_from=InitFrom(field="pretrained", algorithms=("vla-sft", "vla-rl"), keys=_SFT_KEYS,
                       same_policy_fields=_SHAPE_FIELDS,
                       missing="vla-rl fine-tunes a vla-sft run; pass --set algo.pretrained=<run or checkpoint> "
                               "(train one with --algo vla-sft)")))
"""The registry entry: the policy starts from `algo.pretrained`'s SFT weights."""
