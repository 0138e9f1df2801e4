"""Flow-matching policies: a velocity network over action chunks, K-step Euler sampling, and ReinFlow's noise net.

Conventions (rectified flow): t runs from 0 (noise) to 1 (action); x_t = (1 - t) x_0 + t x_1 with
x_0 ~ N(0, I) and x_1 the demonstrated action chunk, flattened to D = H * A values; the network predicts the
velocity v = x_1 - x_0. Sampling integrates x_{k+1} = x_k + v(x_k, t_k, s) / K from x_0, t_k = k / K.
The policy integrates the ODE from x_0 ~ N(0, I) (`initial_noise: sample`, the default: the exported graph then
takes x_0 as a second input, `noise`, which the robot side draws) or from x_0 = 0 (`zeros`: fully deterministic;
for a multimodal policy x_0 = 0 can land between the modes, e.g. between opening and closing a gripper).

The shortcut-model variant (Frans et al., 2024) also conditions on the step size d, and is trained so that
one step of size 2d equals two steps of size d, which makes 1-4 sampling steps accurate.

ReinFlow turns the chain stochastic, x_{k+1} ~ N(x_k + v/K, σ_φ(s, t_k)²), whose exact log-likelihood
(`chain_log_prob`) PPO fine-tunes.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor, nn

from robo_rl.core.config import ConfigError
from robo_rl.learn.networks.actor_critic import _LOG_SQRT_2PI, _normalizer, mlp


def time_embedding(t: Tensor, dim: int) -> Tensor:
    """Sinusoidal features of times t (B,) in [0, 1] -> (B, dim): sin and cos at geometric angular frequencies
    1..100 rad per unit of t (periods from 6.3 down to 0.06: smooth in t, yet fine enough for 1/64 steps)."""
    half = dim // 2
    freqs = torch.exp(torch.linspace(0.0, math.log(100.0), half, device=t.device, dtype=t.dtype))  # (half,)
    angles = t[:, None] * freqs[None, :]  # (B, half)
    return torch.cat([torch.sin(angles), torch.cos(angles)], dim=-1)


class VelocityNet(nn.Module):
    """v(x_t, t, obs[, d]): an MLP on [normalised obs, x_t, time features (and step-size features)].

    Args:
        obs_dim: O, the (normalised) observation size.
        flat_dim: D = H * A, the flattened action chunk.
        hidden_dims, activation: the MLP.
        time_dim: size of each sinusoidal embedding.
        shortcut: also condition on the step size d (shortcut model).
    """

    def __init__(self, obs_dim: int, flat_dim: int, hidden_dims: tuple[int, ...], activation: str,
                 time_dim: int, shortcut: bool):
        super().__init__()
        self.time_dim, self.shortcut = time_dim, shortcut
        in_dim = obs_dim + flat_dim + time_dim * (2 if shortcut else 1)
        self.net = mlp(in_dim, hidden_dims, flat_dim, activation)

    def forward(self, x: Tensor, t: Tensor, obs: Tensor, d: Tensor | None = None) -> Tensor:
        """x (B, D), t (B,), obs (B, O), d (B,) for a shortcut model -> velocity (B, D)."""
        parts = [obs, x, time_embedding(t, self.time_dim)]
        if self.shortcut:
            parts.append(time_embedding(d if d is not None else torch.zeros_like(t), self.time_dim))
        return self.net(torch.cat(parts, dim=-1))


Velocity = Callable[[Tensor, Tensor], Tensor]
"""v(x_t (B, D), t (B,)) -> (B, D): a velocity field with its conditioning bound (the observation of a `VelocityNet`,
the prefix of a VLA); what the samplers below integrate."""

StepStats = Callable[[Tensor, Tensor], tuple[Tensor, Tensor]]
"""(x_k (B, D), t_k (B,)) -> (mean (B, D), std (B, D)) of a stochastic denoising step x_{k+1} ~ N(mean, diag(std²));
std = 0 marks a deterministic step (its sample is its mean)."""


def check_chunk_and_noise(cfg) -> None:
    """ConfigError (one line) unless a flow policy config's `execute_steps` <= `horizon` and `sigma_min` <=
    `sigma_max` (FlowPolicyConfig, VLAPolicyConfig)."""
    if cfg.execute_steps > cfg.horizon:
        raise ConfigError(f"config error: policy.execute_steps = {cfg.execute_steps}: must be <= policy.horizon "
                          f"= {cfg.horizon} (the actions of one chunk)")
    if cfg.sigma_min > cfg.sigma_max:
        raise ConfigError(f"config error: policy.sigma_min = {cfg.sigma_min!r}: must be <= policy.sigma_max "
                          f"= {cfg.sigma_max!r}")


def conditioned(velocity: VelocityNet, obs: Tensor, step: float | None = None) -> Velocity:
    """The field x, t -> velocity(x, t, obs[, d = step]) of a `VelocityNet` for observations obs (B, O); a shortcut
    model is told the step size `step` (the sampler's 1/K)."""
    def field(x: Tensor, t: Tensor) -> Tensor:
        d = torch.full_like(t, step) if velocity.shortcut and step is not None else None
        return velocity(x, t, obs, d)
    return field


def euler_sample(velocity: Velocity, x0: Tensor, num_steps: int, *, clip: float | None = None) -> Tensor:
    """Deterministic K-step Euler integration of the field `velocity` from x0 (B, D) at t = 0 to t = 1 -> (B, D).

    `clip` bounds every intermediate and the final sample.
    """
    x, dt = x0, 1.0 / num_steps
    for k in range(num_steps):
        t = torch.full((x0.shape[0],), k * dt, device=x0.device, dtype=x0.dtype)
        x = x + dt * velocity(x, t)
        if clip is not None:
            x = x.clamp(-clip, clip)
    return x


def diagonal_normal_log_prob(x: Tensor, mean: Tensor, std: Tensor) -> Tensor:
    """log N(x; mean, diag(std²)) summed over the last dim: (..., D) -> (...)."""
    z = (x - mean) / std
    return -(0.5 * z.square() + torch.log(std) + _LOG_SQRT_2PI).sum(-1)


def chain_log_prob(chain: Tensor, means: Tensor, stds: Tensor, *, steps: Tensor | None = None,
                   prior: bool = True) -> Tensor:
    """Exact log-likelihood of a stochastic denoising chain (ReinFlow, πRL's Flow-Noise):

        log N(x_0; 0, I) + sum_k log N(x_{k+1}; mean_k, diag(std_k²))

    Args:
        chain: (B, K + 1, D) the samples x_0 ... x_K.
        means: (B, K, D) the steps' means (e.g. x_k + v(x_k, t_k) / K).
        stds: (B, K, D) the noise std at each step.
        steps: (B, K) bool, the stochastic steps whose terms count (None: all). Flow-SDE's hybrid sampler counts
            only its one stochastic step (`prior` False): the deterministic steps have std 0 and no density.
        prior: include the initial Gaussian's term.

    Returns:
        (B,) the log-probability of the chain (the final action's likelihood is its marginal over the
        chain; ReinFlow and πRL optimise this joint instead).
    """
    x0 = chain[:, 0]
    if steps is None:
        terms = diagonal_normal_log_prob(chain[:, 1:], means, stds)  # (B, K)
    else:  # the masked-out steps get a unit std, so a deterministic step's 0 never reaches the log
        safe = torch.where(steps[..., None], stds, torch.ones_like(stds))
        terms = diagonal_normal_log_prob(chain[:, 1:], means, safe) * steps  # (B, K)
    total = terms.sum(-1)
    if prior:
        total = total + diagonal_normal_log_prob(x0, torch.zeros_like(x0), torch.ones_like(x0))  # (B,)
    return total


NOISE_CLIP = 3.0
"""ReinFlow's per-step noise is clipped to +-NOISE_CLIP standard deviations."""


def noisy_chain(step: StepStats, x0: Tensor, eps: Tensor, clip: float | None) -> tuple[Tensor, Tensor, Tensor]:
    """A stochastic K-step chain from given draws: (chain (B, K + 1, D), means (B, K, D), stds (B, K, D)).

    x0 (B, D) and eps (B, K, D) are standard normal draws; x̃_{k+1} = mean_k + std_k * clip(eps_k, ±3) is stored,
    (mean_k, std_k) = step(c(x̃_k), t_k) with c the clamp to `clip` (not applied to x_0) and t_k = k / K. The action
    chunk is c(x̃_K); with eps = 0 (or std = 0 at every step) and Euler steps it is `euler_sample`'s.
    """
    b, k = x0.shape[0], eps.shape[1]
    x, chain, means, stds = x0, [x0], [], []
    for i in range(k):
        t = torch.full((b,), i / k, device=x0.device, dtype=x0.dtype)
        inp = x if i == 0 or clip is None else x.clamp(-clip, clip)
        mean, std = step(inp, t)
        x = mean + std * eps[:, i].clamp(-NOISE_CLIP, NOISE_CLIP)
        chain.append(x)
        means.append(mean)
        stds.append(std)
    return torch.stack(chain, 1), torch.stack(means, 1), torch.stack(stds, 1)


def euler_step_stats(velocity: Velocity, noise_std: Velocity, num_steps: int) -> StepStats:
    """ReinFlow's and Flow-Noise's step: mean x + v(x, t) / K, std from `noise_std(x, t)` (learned, bounded)."""
    return lambda x, t: (x + velocity(x, t) / num_steps, noise_std(x, t))


# ---------------------------------------------------------------------------------------------- Flow-SDE
# πRL's Flow-SDE (shared/REFERENCES.md) is written in π0's time, where s = 1 is noise and s = 0 the action, the
# velocity is u = noise - action and a step goes from s to s - Δ. Here t = 1 - s and v = -u, so with Δ = 1 / K:
#   predicted action  x̂_a = x + (1 - t) v        predicted noise  x̂_n = x - t v
#   σ_s = a sqrt(s / (1 - s))                     (s = 1 - t; at s = 1 the denominator takes the next grid time,
#                                                  1 - Δ, as Flow-GRPO does: σ is infinite there otherwise)
#   mean = x̂_a (1 - (s - Δ)) + x̂_n (s - Δ - σ_s² Δ / (2 s)),   std = sqrt(Δ) σ_s
# With σ = 0 the mean is the interpolation at s - Δ, i.e. the Euler step x + Δ v.

def flow_sde_step_stats(x: Tensor, v: Tensor, t: Tensor, dt: float, noise_level: float) -> tuple[Tensor, Tensor]:
    """Mean and std (B, D) of Flow-SDE's step from x (B, D) at our time t (B,) with velocity v (B, D) (see above)."""
    s = (1.0 - t)[:, None]  # (B, 1) π0's time
    x_action, x_noise = x + s * v, x - (1.0 - s) * v
    sigma = noise_level * torch.sqrt(s / (1.0 - s).clamp_min(dt))  # (B, 1)
    mean = x_action * (1.0 - (s - dt)) + x_noise * (s - dt - sigma.square() * dt / (2.0 * s))
    return mean, (math.sqrt(dt) * sigma).expand_as(mean)


def flow_sde_hybrid_stats(velocity: Velocity, num_steps: int, noise_level: float, stochastic: Tensor) -> StepStats:
    """Flow-SDE's hybrid sampler: the step marked in `stochastic` (B, K) bool is the SDE step, every other one the
    deterministic Euler (ODE) step (std 0). The step index is read from t (t_k = k / K)."""
    dt = 1.0 / num_steps

    def step(x: Tensor, t: Tensor) -> tuple[Tensor, Tensor]:
        v = velocity(x, t)
        k = torch.round(t * num_steps).long().clamp(0, num_steps - 1)  # (B,) each row's step index
        mean_sde, std_sde = flow_sde_step_stats(x, v, t, dt, noise_level)
        on = stochastic.gather(1, k[:, None])  # (B, 1)
        return torch.where(on, mean_sde, x + dt * v), torch.where(on, std_sde, torch.zeros_like(std_sde))

    return step


def hybrid_step_mask(batch: int, num_steps: int, generator: torch.Generator, device: torch.device | str = "cpu"
                     ) -> Tensor:
    """(B, K) bool with exactly one True per row, at a uniformly drawn denoising step (Flow-SDE's hybrid sampling)."""
    k = torch.randint(0, num_steps, (batch,), generator=generator, device=generator.device).to(device)
    return torch.nn.functional.one_hot(k, num_steps).bool()


class NoiseNet(nn.Module):
    """σ_φ(obs, t_k): a per-dimension std in [σ_min, σ_max] (tanh-squashed log-std).

    Args:
        obs_dim, flat_dim: O and D.
        hidden_dims, activation, time_dim: the MLP and its time features.
        sigma_min, sigma_max: the std bounds; `max_sigma` may later be lowered (a schedule) down to sigma_min.
    """

    def __init__(self, obs_dim: int, flat_dim: int, hidden_dims: tuple[int, ...], activation: str, time_dim: int,
                 sigma_min: float, sigma_max: float):
        super().__init__()
        if not 0.0 < sigma_min <= sigma_max:
            raise ValueError(f"noise std bounds [{sigma_min}, {sigma_max}]: need 0 < sigma_min <= sigma_max")
        self.time_dim = time_dim
        self.sigma_min = sigma_min
        self.register_buffer("max_sigma", torch.tensor(float(sigma_max)))
        self.net = mlp(obs_dim + time_dim, hidden_dims, flat_dim, activation)

    def forward(self, t: Tensor, obs: Tensor) -> Tensor:
        """t (B,), obs (B, O) -> std (B, D) in [sigma_min, max_sigma]."""
        raw = self.net(torch.cat([obs, time_embedding(t, self.time_dim)], dim=-1))
        lo, hi = math.log(self.sigma_min), torch.log(self.max_sigma)
        return torch.exp(lo + (hi - lo) * 0.5 * (torch.tanh(raw) + 1.0))


class DeterministicFlowActor(nn.Module):
    """(normalised obs (B, O), noise or None) -> the executed actions: K Euler steps, deterministic given the noise.

    The first action (B, A) of the chunk, or its first E actions (B, E, A) for a policy that executes E > 1
    open-loop. `noise` is x_0 (B, D) (None: zeros), or with `step_noise` x_0 and the K steps' standard normal
    draws (B, (K + 1) D): ReinFlow's stochastic chain (`noisy_chain`) with the policy's noise net. What
    `inference_policy()` returns and export turns into ONNX (the K steps unrolled in the graph).
    """

    def __init__(self, velocity: VelocityNet, noise_net: NoiseNet, horizon: int, action_dim: int, num_steps: int,
                 clip: float | None, execute_steps: int = 1, step_noise: bool = False):
        super().__init__()
        self.velocity, self.noise_net, self.horizon, self.action_dim = velocity, noise_net, horizon, action_dim
        self.num_steps, self.clip, self.execute_steps, self.step_noise = num_steps, clip, execute_steps, step_noise

    def chunk(self, obs_n: Tensor, noise: Tensor | None = None) -> Tensor:
        """The action chunk (B, H, A) for normalised observations (B, O) and the noise (see the class)."""
        d = self.horizon * self.action_dim
        if noise is None:
            noise = torch.zeros(obs_n.shape[0], d, device=obs_n.device, dtype=obs_n.dtype)
        k = self.num_steps
        field = conditioned(self.velocity, obs_n, 1.0 / k)
        if not self.step_noise:
            x = euler_sample(field, noise, k, clip=self.clip)
        else:
            eps = noise[:, d:].reshape(-1, k, d)
            step = euler_step_stats(field, lambda x, t: self.noise_net(t, obs_n), k)
            x = noisy_chain(step, noise[:, :d], eps, self.clip)[0][:, -1]
            x = x if self.clip is None else x.clamp(-self.clip, self.clip)
        return x.reshape(-1, self.horizon, self.action_dim)

    def forward(self, obs_n: Tensor, noise: Tensor | None = None) -> Tensor:
        chunk = self.chunk(obs_n, noise)
        return chunk[:, 0] if self.execute_steps == 1 else chunk[:, : self.execute_steps]

    def noise_width(self, initial_noise: str) -> int:
        """Size of `noise` the chain takes: (K + 1) D with step noise, D when it samples x_0, else 0."""
        d = self.horizon * self.action_dim
        return d * (self.num_steps + 1) if self.step_noise else d if initial_noise == "sample" else 0


def _alias_actor_noise(module: nn.Module, state_dict: dict, prefix: str, *_: object) -> None:
    """Load checkpoints written before the actor held the noise net: its entries are the policy's `noise.*`."""
    for key in [k for k in state_dict if k.startswith(prefix + "noise.")]:
        state_dict.setdefault(f"{prefix}actor.noise_net.{key[len(prefix) + len('noise.'):]}", state_dict[key])


class FlowPolicy(nn.Module):
    """A flow-matching policy over action chunks, with ReinFlow's noise net and a value critic.

    Args:
        obs_dim, critic_obs_dim, action_dim: O, O_c, A.
        cfg: a FlowPolicyConfig (robo_rl.learn.algorithms.bc): horizon H, num_steps K, variant, network sizes, σ bounds.
        action_clip: the task's action clip (bounds every sample), or None.
    """

    def __init__(self, obs_dim: int, critic_obs_dim: int, action_dim: int, cfg, action_clip: float | None):
        super().__init__()
        self.config = cfg
        self.obs_dim, self.critic_obs_dim = obs_dim, critic_obs_dim
        self.horizon, self.action_dim, self.num_steps = cfg.horizon, action_dim, cfg.num_steps
        self.execute_steps = cfg.execute_steps
        """E: actions of each chunk executed open-loop (`act_inference` returns (N, E, A) when E > 1)."""
        self.flat_dim = cfg.horizon * action_dim
        self.action_clip = action_clip
        self.velocity = VelocityNet(obs_dim, self.flat_dim, cfg.hidden_dims, cfg.activation, cfg.time_dim,
                                    shortcut=cfg.variant == "shortcut")
        self.noise = NoiseNet(obs_dim, self.flat_dim, cfg.noise_hidden_dims, cfg.activation, cfg.time_dim,
                              cfg.sigma_min, cfg.sigma_max)
        self.critic = mlp(critic_obs_dim, cfg.critic_hidden_dims, 1, cfg.activation)
        self.obs_normalizer = _normalizer(obs_dim, cfg)
        self.critic_obs_normalizer = _normalizer(critic_obs_dim, cfg)
        self.actor = DeterministicFlowActor(self.velocity, self.noise, cfg.horizon, action_dim, cfg.num_steps,
                                            action_clip, cfg.execute_steps, cfg.step_noise)
        self._eval_generator = torch.Generator().manual_seed(0)  # x_0 of act_inference (not saved: evaluation only)
        self.register_load_state_dict_pre_hook(_alias_actor_noise)

    @property
    def noise_input_dim(self) -> int:
        """Size of the exported graph's `noise` input: x_0 (D), x_0 and every step's draw ((K + 1) D) with step noise,
        or 0 when the chain integrates from zeros."""
        return self.actor.noise_width(self.config.initial_noise)

    def act_inference(self, obs: Tensor) -> Tensor:
        """The executed actions for raw observations (N, O), from x_0 ~ N(0, I) or zeros (see config): the first
        action (N, A), or the first E (N, E, A) of a policy that executes chunks."""
        noise = None
        if self.noise_input_dim:
            noise = torch.randn(obs.shape[0], self.noise_input_dim, generator=self._eval_generator).to(obs.device)
        return self.actor(self.obs_normalizer(obs), noise)

    def inference_policy(self) -> tuple[nn.Module, nn.Module]:
        return self.actor, self.obs_normalizer

    def deploy_extra(self) -> dict:
        """What the deploy contract records of the exported chain (`extra["flow"]`)."""
        return {"flow": {"num_steps": self.num_steps, "horizon": self.horizon, "variant": self.config.variant,
                         "initial_noise": self.config.initial_noise, "step_noise": self.actor.step_noise,
                         "noise_input_dim": self.noise_input_dim,
                         "execute_steps": self.execute_steps}}

    def value(self, critic_obs: Tensor) -> Tensor:
        """V(s) (N,) for raw critic observations (N, O_c)."""
        return self.critic(self.critic_obs_normalizer(critic_obs)).squeeze(-1)

    def sample(self, obs: Tensor, x0: Tensor, num_steps: int | None = None) -> Tensor:
        """Deterministic chunks (N, H, A) from given initial noise x0 (N, D) (multimodal samples when x0 ~ N(0, I))."""
        k = num_steps or self.num_steps
        x = euler_sample(conditioned(self.velocity, self.obs_normalizer(obs), 1.0 / k), x0, k, clip=self.action_clip)
        return x.reshape(-1, self.horizon, self.action_dim)

    def flow_matching_loss(self, obs_n: Tensor, x1: Tensor, generator: torch.Generator,
                           shortcut_fraction: float = 0.25, min_step: float = 1.0 / 128) -> Tensor:
        """Behaviour-cloning loss on normalised observations (B, O) and flat action chunks (B, D).

        Rectified flow: || v(x_t, t) - (x_1 - x_0) ||² at uniform t. Shortcut model: the same at step size
        d = 0 (the instantaneous velocity) for most of the batch, and, for `shortcut_fraction` of it, the
        self-consistency target s(x_t, t, 2d) = (s(x_t, t, d) + s(x_t + d s(x_t, t, d), t + d, d)) / 2 with
        d a random power of two >= min_step (targets without gradient).
        """
        b, dev = x1.shape[0], x1.device
        x0 = torch.randn(x1.shape, generator=generator, device=generator.device).to(dev)
        t = torch.rand(b, generator=generator, device=generator.device).to(dev)
        if not self.velocity.shortcut:
            xt = (1 - t[:, None]) * x0 + t[:, None] * x1
            return (self.velocity(xt, t, obs_n) - (x1 - x0)).square().mean()
        n_sc = int(round(b * shortcut_fraction))
        levels = int(round(-math.log2(min_step)))  # d = 2^-j, j = 1..levels (so 2d <= 1)
        j = torch.randint(1, levels + 1, (n_sc,), generator=generator, device=generator.device).to(dev)
        d = torch.pow(2.0, -j.to(x1.dtype))  # (n_sc,)
        t_sc = torch.floor(t[:n_sc] * (1.0 / (2 * d))) * (2 * d)  # on the 2d grid, so t + 2d <= 1
        t_all = torch.cat([t_sc, t[n_sc:]])
        xt = (1 - t_all[:, None]) * x0 + t_all[:, None] * x1
        d_all = torch.cat([2 * d, torch.zeros(b - n_sc, device=dev, dtype=x1.dtype)])
        with torch.no_grad():
            o, x = obs_n[:n_sc], xt[:n_sc]
            s1 = self.velocity(x, t_sc, o, d)
            s2 = self.velocity(x + d[:, None] * s1, t_sc + d, o, d)
            target_sc = 0.5 * (s1 + s2)
        target = torch.cat([target_sc, (x1 - x0)[n_sc:]])
        return (self.velocity(xt, t_all, obs_n, d_all) - target).square().mean()
