"""Terrain curriculum as pure torch functions: per-world levels that follow how far each robot walks.

As in legged_gym's game-inspired curriculum: when an episode ends, a robot that walked farther than
half a sub-terrain (it left its cell) moves one level up, one that walked less than half of the
distance it was commanded moves one level down, and a robot that moves up from the top level is
sent to a random level, so solved robots keep the whole range in training.
"""

from __future__ import annotations

import torch
from torch import Tensor


def next_terrain_levels(
    levels: Tensor,
    walked: Tensor,
    commanded: Tensor,
    *,
    move_up_distance: float,
    num_levels: int,
    generator: torch.Generator,
) -> Tensor:
    """Levels (K,) long for the next episodes of K robots.

    Args:
        levels: (K,) long, the levels the ending episodes ran on.
        walked: (K,) distance from the spawn point at the end of the episode (m).
        commanded: (K,) distance the velocity commands asked for during the episode (m).
        move_up_distance: walking farther than this moves a robot up (half a sub-terrain).
        num_levels: number of levels L; levels lie in [0, L).
        generator: draws the random level of robots that solved the top level.
    """
    up = walked > move_up_distance
    down = (walked < 0.5 * commanded) & ~up
    new = levels + up.long() - down.long()  # (K,)
    solved = new >= num_levels
    random = torch.randint(0, num_levels, levels.shape, generator=generator)
    return torch.where(solved, random, new.clamp(min=0))


def initial_terrain_levels(num_envs: int, low: int, high: int, *, generator: torch.Generator) -> Tensor:
    """(N,) long starting levels, uniform integers in [low, high]."""
    return torch.randint(low, high + 1, (num_envs,), generator=generator)


def terrain_columns(num_envs: int, num_columns: int) -> Tensor:
    """(N,) long column (terrain type) of each world: worlds are spread evenly, in blocks, over the columns."""
    return torch.arange(num_envs) * num_columns // num_envs


def spawn_origins(origins: Tensor, levels: Tensor, columns: Tensor) -> Tensor:
    """(K, 3) spawn points of K robots from the (L, J, 3) cell origins and their (K,) levels and columns."""
    return origins[levels, columns]
