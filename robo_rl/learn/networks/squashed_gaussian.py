"""Tanh-squashed Gaussian actor for SAC: a = bound * tanh(u), u ~ N(mean(s), std(s)^2), bounded log-std.

Log-probabilities are those of the squashed action y = tanh(u) in (-1, 1)^A (the change of variables
from u), so the target entropy does not depend on the task's action scale.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
_LOG_2 = math.log(2.0)
_ACTIVATIONS = {"elu": nn.ELU, "relu": nn.ReLU, "tanh": nn.Tanh, "silu": nn.SiLU}


def bounded_log_std(raw: Tensor, low: float, high: float) -> Tensor:
    """Map an unbounded network output to [low, high] smoothly: low + (high - low) * (tanh(raw) + 1) / 2."""
    return low + 0.5 * (high - low) * (torch.tanh(raw) + 1.0)


def log_tanh_jacobian(u: Tensor) -> Tensor:
    """log(1 - tanh(u)^2) elementwise, in the stable form 2 * (log 2 - u - softplus(-2u))."""
    return 2.0 * (_LOG_2 - u - F.softplus(-2.0 * u))


def squashed_gaussian_log_prob(u: Tensor, mean: Tensor, log_std: Tensor) -> Tensor:
    """log-density of y = tanh(u), u ~ N(mean, exp(log_std)^2), at y = tanh(u): (B, A) -> (B,).

    log p(y) = sum_i [log N(u_i; mean_i, std_i) - log(1 - tanh(u_i)^2)].
    """
    z = (u - mean) * torch.exp(-log_std)
    gaussian = -(0.5 * z.square() + log_std + _LOG_SQRT_2PI)
    return (gaussian - log_tanh_jacobian(u)).sum(-1)


def _trunk(in_dim: int, hidden: tuple[int, ...], activation: str, layer_norm: bool) -> tuple[nn.Sequential, int]:
    layers: list[nn.Module] = []
    for width in hidden:
        layers.append(nn.Linear(in_dim, width))
        if layer_norm:
            layers.append(nn.LayerNorm(width))
        layers.append(_ACTIVATIONS[activation]())
        in_dim = width
    return nn.Sequential(*layers), in_dim


def trunk_layers(trunk: nn.Sequential) -> tuple[tuple, ...]:
    """The trunk as numpy layers (`robo_rl.deploy.actor_weights`, the actor process's copy): ("linear", W (out, in),
    b (out,)), ("layer_norm", gain, bias, eps) or (activation name,), in order, float32."""
    names = {cls: name for name, cls in _ACTIVATIONS.items()}
    layers: list[tuple] = []
    for m in trunk:
        if isinstance(m, nn.Linear):
            layers.append(("linear", _numpy(m.weight), _numpy(m.bias)))
        elif isinstance(m, nn.LayerNorm):
            layers.append(("layer_norm", _numpy(m.weight), _numpy(m.bias), float(m.eps)))
        elif type(m) in names:
            layers.append((names[type(m)],))
        else:
            raise TypeError(f"trunk layer {type(m).__name__} has no numpy form")
    return tuple(layers)


def _numpy(t: Tensor) -> np.ndarray:
    return t.detach().to("cpu", torch.float32).numpy().copy()


class SquashedGaussianActor(nn.Module):
    """MLP trunk with a mean head and a bounded log-std head; actions in (-1, 1)^A before scaling.

    Args:
        obs_dim: O (normalised observations in).
        action_dim: A.
        hidden: trunk widths.
        activation: hidden activation name.
        log_std_bounds: (low, high) of log std.
        layer_norm: LayerNorm after every hidden linear layer.
    """

    def __init__(self, obs_dim: int, action_dim: int, hidden: tuple[int, ...], activation: str,
                 log_std_bounds: tuple[float, float], layer_norm: bool = False):
        super().__init__()
        self.trunk, width = _trunk(obs_dim, hidden, activation, layer_norm)
        self.mean = nn.Linear(width, action_dim)
        self.log_std = nn.Linear(width, action_dim)
        self.log_std_low, self.log_std_high = log_std_bounds

    def distribution(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        """Pre-tanh mean (B, A) and bounded log std (B, A) for normalised observations (B, O)."""
        h = self.trunk(obs)
        return self.mean(h), bounded_log_std(self.log_std(h), self.log_std_low, self.log_std_high)

    def sample(self, obs: Tensor, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        """A reparameterised sample y = tanh(u) (B, A) in (-1, 1) and its log-probability (B,)."""
        mean, log_std = self.distribution(obs)
        noise = torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype)
        u = mean + torch.exp(log_std) * noise
        return torch.tanh(u), squashed_gaussian_log_prob(u, mean, log_std)

    def deterministic(self, obs: Tensor) -> Tensor:
        """tanh(mean) (B, A) in (-1, 1): the action the exported policy takes."""
        return torch.tanh(self.mean(self.trunk(obs)))


class ScaledTanhMean(nn.Module):
    """The deterministic SAC policy for export: bound * tanh(mean(obs)) for normalised observations (B, O)."""

    def __init__(self, actor: SquashedGaussianActor, bound: float):
        super().__init__()
        self.trunk, self.mean = actor.trunk, actor.mean
        self.bound = float(bound)

    def forward(self, obs: Tensor) -> Tensor:
        return self.bound * torch.tanh(self.mean(self.trunk(obs)))  # (B, A)
