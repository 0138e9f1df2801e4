"""Gaussian actor-critic MLP with separate actor and critic inputs (asymmetric critic)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from robo_rl.core.config import _f
from robo_rl.learn.networks.normalizer import EmpiricalNormalization

_ACTIVATIONS = {"elu": nn.ELU, "relu": nn.ReLU, "tanh": nn.Tanh, "silu": nn.SiLU}
_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
STD_MIN = 1e-6
"""Floor of a learned scalar std (RSL-RL's default lower bound): keeps σ > 0 and log σ finite."""


@dataclass(frozen=True, kw_only=True)
class PolicyConfig:
    """Gaussian actor-critic MLP."""

    actor_hidden_dims: tuple[int, ...] = _f((256, 128, 64))
    """Hidden layer widths of the actor."""
    critic_hidden_dims: tuple[int, ...] = _f((256, 128, 64))
    """Hidden layer widths of the critic."""
    activation: str = _f("elu", choices=("elu", "relu", "tanh", "silu"))
    """Hidden activation."""
    init_noise_std: float = _f(1.0, gt=0.0)
    """Initial standard deviation of the Gaussian policy."""
    noise_std_type: str = _f("scalar", choices=("scalar", "log"))
    """How the state-independent action std is learned: `scalar` learns σ itself (RSL-RL's default; kept
    >= 1e-6 by a clamp), `log` learns log σ. Under Adam σ falls by a roughly fixed amount per step in the
    first and by a fixed fraction in the second, so `scalar` narrows exploration faster late in training;
    on arm-reach it reached 1 cm in 139 and 157 iterations, `log` not within 200 (2 seeds, before the
    other parity changes; docs/benchmarks.md)."""
    obs_normalization: bool = True
    """Empirical running mean/std normalisation of actor and critic inputs."""
    obs_norm_eps: float = _f(1e-2, gt=0.0, le=1.0)
    """Added to the running std before dividing by it (RSL-RL: 1e-2). SB3's VecNormalize divides by
    sqrt(var + 1e-8), which 1e-4 matches to within 1e-4 of σ: a smaller value lets nearly constant inputs
    be amplified more."""
    obs_norm_clip: float = _f(0.0, ge=0.0)
    """Clip normalised inputs to +-this (0: no clipping; SB3's VecNormalize clip_obs: 10). Part of the
    normaliser, so it is baked into exported policies too."""


def mlp(in_dim: int, hidden: tuple[int, ...], out_dim: int, activation: str) -> nn.Sequential:
    layers: list[nn.Module] = []
    for width in hidden:
        layers += [nn.Linear(in_dim, width), _ACTIVATIONS[activation]()]
        in_dim = width
    layers.append(nn.Linear(in_dim, out_dim))
    return nn.Sequential(*layers)


def gaussian_log_prob(actions: Tensor, mean: Tensor, log_std: Tensor) -> Tensor:
    """Log-density of a diagonal Gaussian, summed over action dims: (B, A) -> (B,)."""
    z = (actions - mean) * torch.exp(-log_std)
    return -(0.5 * z.square() + log_std + _LOG_SQRT_2PI).sum(-1)


def gaussian_entropy(log_std: Tensor) -> Tensor:
    """Entropy of a diagonal Gaussian summed over action dims: (A,) or (B, A) -> () or (B,)."""
    return (0.5 + _LOG_SQRT_2PI + log_std).sum(-1)


def gaussian_kl(mean_old: Tensor, std_old: Tensor, mean: Tensor, std: Tensor) -> Tensor:
    """KL(old || new) of diagonal Gaussians, summed over action dims: (B, A) -> (B,)."""
    return (
        torch.log(std / std_old) + (std_old.square() + (mean_old - mean).square()) / (2.0 * std.square()) - 0.5
    ).sum(-1)


def _normalizer(dim: int, cfg: PolicyConfig) -> nn.Module:
    """The input normaliser `cfg` asks for (an identity when `cfg.obs_normalization` is off)."""
    if not cfg.obs_normalization:
        return nn.Identity()
    return EmpiricalNormalization(dim, eps=cfg.obs_norm_eps, clip=cfg.obs_norm_clip)


class ActorCritic(nn.Module):
    """Actor mean MLP + state-independent action std, critic MLP, and one normaliser per input.

    The std is one (A,) parameter: `std` (σ itself) when `cfg.noise_std_type` is "scalar", `log_std`
    (log σ) when it is "log". Read it only through `action_std()` / `action_log_std()`.

    Args:
        obs_dim: actor input size O.
        critic_obs_dim: critic input size O_c (privileged observations allowed).
        action_dim: A.
        cfg: network sizes and options.
    """

    def __init__(self, obs_dim: int, critic_obs_dim: int, action_dim: int, cfg: PolicyConfig):
        super().__init__()
        self.actor = mlp(obs_dim, cfg.actor_hidden_dims, action_dim, cfg.activation)
        self.critic = mlp(critic_obs_dim, cfg.critic_hidden_dims, 1, cfg.activation)
        self.noise_std_type = cfg.noise_std_type
        if cfg.noise_std_type == "scalar":
            self.std = nn.Parameter(torch.full((action_dim,), float(cfg.init_noise_std)))
        elif cfg.noise_std_type == "log":
            self.log_std = nn.Parameter(torch.full((action_dim,), math.log(cfg.init_noise_std)))
        else:
            raise ValueError(f"policy.noise_std_type = {cfg.noise_std_type!r}: allowed values are scalar, log")
        self.obs_normalizer = _normalizer(obs_dim, cfg)
        self.critic_obs_normalizer = _normalizer(critic_obs_dim, cfg)

    @property
    def action_dim(self) -> int:
        return (self.std if self.noise_std_type == "scalar" else self.log_std).numel()

    def action_std(self) -> Tensor:
        """σ of the action noise (A,), differentiable; a scalar σ is clamped to >= STD_MIN."""
        if self.noise_std_type == "scalar":
            return self.std.clamp(min=STD_MIN)
        return torch.exp(self.log_std)

    def action_log_std(self) -> Tensor:
        """log σ of the action noise (A,), differentiable (the same σ as `action_std`)."""
        if self.noise_std_type == "scalar":
            return torch.log(self.std.clamp(min=STD_MIN))
        return self.log_std

    def update_normalization(self, obs: Tensor, critic_obs: Tensor) -> None:
        if isinstance(self.obs_normalizer, EmpiricalNormalization):
            self.obs_normalizer.update(obs)
            self.critic_obs_normalizer.update(critic_obs)

    def act_inference(self, obs: Tensor) -> Tensor:
        """Deterministic action (the mean) for raw observations (N, O) -> (N, A)."""
        return self.actor(self.obs_normalizer(obs))

    def inference_policy(self) -> tuple[nn.Module, nn.Module]:
        """(actor mean MLP, observation normaliser): `act_inference` is actor(normaliser(obs))."""
        return self.actor, self.obs_normalizer

    def value(self, critic_obs: Tensor) -> Tensor:
        """V(s) for raw critic observations (N, O_c) -> (N,)."""
        return self.critic(self.critic_obs_normalizer(critic_obs)).squeeze(-1)
