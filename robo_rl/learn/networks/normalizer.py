"""Empirical observation normalisation (running mean and variance), baked into exported policies.

Under `torchrun` every update merges the batches of all ranks (`robo_rl.learn.distributed.moments`): the statistics
are those of the concatenated data, the same on every rank.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from robo_rl.learn import distributed


class EmpiricalNormalization(nn.Module):
    """y = (x - mean) / (std + eps), clipped to +-clip when clip > 0, with running statistics updated only
    by `update`.

    Args:
        dim: feature size O.
        eps: added to the standard deviation (1e-2 as in RSL-RL).
        until: stop updating after this many samples (None: never stop).
        clip: clip the normalised values to +-clip (0: no clipping; SB3's VecNormalize uses 10).
    """

    def __init__(self, dim: int, eps: float = 1e-2, until: int | None = None, clip: float = 0.0):
        super().__init__()
        self.eps = eps
        self.until = until
        self.clip = clip
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("var", torch.ones(dim))
        self.register_buffer("count", torch.zeros((), dtype=torch.long))

    def forward(self, x: Tensor) -> Tensor:
        y = (x - self.mean) / (self.var.sqrt() + self.eps)  # (B, O)
        return y.clamp(-self.clip, self.clip) if self.clip > 0 else y

    @torch.no_grad()
    def update(self, x: Tensor) -> None:
        """Merge a batch (B, O) (with every rank's, under torchrun) into the running statistics (parallel-variance
        formula)."""
        if self.until is not None and int(self.count) >= self.until:
            return
        n, batch_mean, batch_var = distributed.moments(x)
        total = self.count + n
        delta = batch_mean - self.mean
        frac = n / total
        self.mean += frac * delta
        self.var.copy_((1 - frac) * self.var + frac * batch_var + frac * (1 - frac) * delta.square())
        self.count.copy_(total)
