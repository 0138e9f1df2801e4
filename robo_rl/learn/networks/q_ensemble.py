"""An ensemble of E Q-networks evaluated as one batched MLP, with LayerNorm, scalar or C51 outputs.

Member weights are stacked (E, in, out), so the whole ensemble costs a few batched matmuls instead
of E separate networks. A C51 (distributional) ensemble returns logits over K atoms of a fixed
support [v_min, v_max]; `q_values` gives the expected values either way.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

_ACTIVATIONS = {"elu": F.elu, "relu": F.relu, "tanh": torch.tanh, "silu": F.silu}


class EnsembleLinear(nn.Module):
    """E independent linear layers: (B, in) or (E, B, in) -> (E, B, out); PyTorch's default init per member."""

    def __init__(self, ensemble: int, in_dim: int, out_dim: int):
        super().__init__()
        bound = 1.0 / math.sqrt(in_dim)
        self.weight = nn.Parameter(torch.empty(ensemble, in_dim, out_dim).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(ensemble, 1, out_dim).uniform_(-bound, bound))

    def forward(self, x: Tensor) -> Tensor:
        return torch.baddbmm(self.bias, x, self.weight) if x.dim() == 3 else torch.matmul(x, self.weight) + self.bias


class EnsembleLayerNorm(nn.Module):
    """LayerNorm over features with a separate affine per member: (E, B, D) -> (E, B, D)."""

    def __init__(self, ensemble: int, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ensemble, 1, dim))
        self.bias = nn.Parameter(torch.zeros(ensemble, 1, dim))

    def forward(self, x: Tensor) -> Tensor:
        return torch.addcmul(self.bias, F.layer_norm(x, x.shape[-1:]), self.weight)


def subset_min(q: Tensor, subset_size: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """REDQ's target: the minimum over a random subset of the ensemble, one subset per batch.

    Args:
        q: (E, B) member values.
        subset_size: M, 2 <= M <= E (M = E is the plain ensemble minimum, clipped double Q for E = 2).
        generator: picks the subset.

    Returns:
        (B,) the minimum over the subset and the (M,) member indices used.
    """
    members = torch.randperm(q.shape[0], generator=generator)[:subset_size].to(q.device)  # (M,)
    return q.index_select(0, members).min(0).values, members


def categorical_projection(next_probs: Tensor, returns: Tensor, discount: Tensor, support: Tensor) -> Tensor:
    """C51's target: the distribution of returns + discount * Z projected onto the fixed support.

    Args:
        next_probs: (B, K) probabilities of Z at the bootstrap state.
        returns: (B,) n-step returns.
        discount: (B,) bootstrap discount (0 after a termination).
        support: (K,) evenly spaced atoms from v_min to v_max.

    Returns:
        (B, K) target probabilities (each row sums to 1).
    """
    k = support.numel()
    v_min, v_max = support[0], support[-1]
    delta = (v_max - v_min) / (k - 1)
    tz = (returns[:, None] + discount[:, None] * support).clamp(v_min, v_max)  # (B, K)
    b = (tz - v_min) / delta  # (B, K) fractional atom position
    low = b.floor().long().clamp(0, k - 1)
    high = (low + 1).clamp(max=k - 1)
    w_high = b - low  # share going to the upper atom (0 when b sits on an atom)
    target = torch.zeros_like(next_probs)
    target.scatter_add_(1, low, next_probs * (1.0 - w_high))
    target.scatter_add_(1, high, next_probs * w_high)
    return target


class QEnsemble(nn.Module):
    """E critics Q(s, a) on [critic observations, actions in (-1, 1)].

    Args:
        obs_dim: O_c (normalised critic observations).
        action_dim: A.
        hidden: hidden widths (the same for every member).
        ensemble: E.
        activation: hidden activation name.
        layer_norm: LayerNorm after every hidden layer (keeps massively parallel SAC from diverging).
        num_atoms: 1 for scalar Q, K > 1 for a C51 critic on `value_range`.
        value_range: (v_min, v_max) of the C51 support.
    """

    def __init__(self, obs_dim: int, action_dim: int, hidden: tuple[int, ...], ensemble: int, activation: str,
                 layer_norm: bool = True, num_atoms: int = 1, value_range: tuple[float, float] = (-20.0, 20.0)):
        super().__init__()
        layers: list[nn.Module] = []
        in_dim = obs_dim + action_dim
        for width in hidden:
            layers.append(EnsembleLinear(ensemble, in_dim, width))
            layers.append(EnsembleLayerNorm(ensemble, width) if layer_norm else nn.Identity())
            in_dim = width
        self.hidden = nn.ModuleList(layers)
        self.out = EnsembleLinear(ensemble, in_dim, num_atoms)
        self.activation = _ACTIVATIONS[activation]
        self.ensemble, self.num_atoms = ensemble, num_atoms
        self.register_buffer("support", torch.linspace(value_range[0], value_range[1], max(num_atoms, 2)))

    @property
    def distributional(self) -> bool:
        return self.num_atoms > 1

    def forward(self, obs: Tensor, actions: Tensor) -> Tensor:
        """(B, O_c), (B, A) -> (E, B) Q-values, or (E, B, K) logits for a C51 ensemble."""
        x = torch.cat((obs, actions), -1)  # (B, O_c + A)
        for i in range(0, len(self.hidden), 2):
            x = self.activation(self.hidden[i + 1](self.hidden[i](x)))  # (E, B, H)
        out = self.out(x)  # (E, B, K)
        return out if self.distributional else out.squeeze(-1)

    def q_values(self, output: Tensor) -> Tensor:
        """Expected values (E, B) of `forward`'s output (the output itself for scalar critics)."""
        if not self.distributional:
            return output
        return (torch.softmax(output, -1) * self.support).sum(-1)
