"""On-policy rollout storage and the return computation."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
from torch import Tensor


def compute_gae(
    rewards: Tensor, values: Tensor, dones: Tensor, last_values: Tensor, *, gamma: float, lam: float
) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation.

    Args:
        rewards: (T, N) rewards, time-outs already bootstrapped (r + gamma * V(s_final)).
        values: (T, N) V(s_t) predicted during the rollout.
        dones: (T, N) 1 where the episode ended after step t (terminated or truncated), else 0.
        last_values: (N,) V(s_T) of the observation after the last step.
        gamma: discount.
        lam: GAE lambda.

    Returns:
        advantages (T, N) and returns = advantages + values (T, N).
    """
    steps = rewards.shape[0]
    advantages = torch.empty_like(rewards)
    next_adv = torch.zeros_like(last_values)
    next_value = last_values
    not_done = 1.0 - dones.to(rewards.dtype)
    for t in reversed(range(steps)):
        delta = rewards[t] + gamma * next_value * not_done[t] - values[t]
        next_adv = delta + gamma * lam * not_done[t] * next_adv
        advantages[t] = next_adv
        next_value = values[t]
    return advantages, advantages + values


def bootstrap_time_outs(rewards: Tensor, truncated: Tensor, final_values: Callable[[Tensor], Tensor],
                        gamma: float) -> Tensor:
    """rewards (N,) plus gamma * V(final observation) where `truncated` (a time-out, not a termination); a copy.

    `final_values(ids)` returns V of the final observations of worlds `ids` (K,) -> (K,); it is called only
    when some world timed out.
    """
    rewards = rewards.clone()
    if truncated.any():
        ids = truncated.nonzero().squeeze(-1)
        rewards[ids] += gamma * final_values(ids)
    return rewards


class RolloutStorage:
    """Preallocated (T, N, ...) buffers for one PPO iteration. Observations are stored normalised."""

    def __init__(self, steps: int, num_envs: int, obs_dim: int, critic_obs_dim: int, action_dim: int,
                 device: torch.device | str = "cpu"):
        t, n, z = steps, num_envs, {"device": device}
        self.steps = steps
        self.obs = torch.zeros(t, n, obs_dim, **z)
        self.critic_obs = torch.zeros(t, n, critic_obs_dim, **z)
        self.actions = torch.zeros(t, n, action_dim, **z)
        self.log_probs = torch.zeros(t, n, **z)
        self.means = torch.zeros(t, n, action_dim, **z)
        self.values = torch.zeros(t, n, **z)
        self.rewards = torch.zeros(t, n, **z)
        self.dones = torch.zeros(t, n, **z)
        self.advantages = torch.zeros(t, n, **z)
        self.returns = torch.zeros(t, n, **z)
        self.extras: dict[str, Tensor] = {}
        """More per-step buffers (T, N, ...) that minibatches carry by name (`add_buffer`)."""
        self.step = 0

    def add_buffer(self, name: str, shape: tuple[int, ...], dtype: torch.dtype = torch.float32) -> Tensor:
        """A (T, N, *shape) buffer of `dtype` that `minibatches` yields under `name` (e.g. uint8 camera images)."""
        ref = self.rewards
        self.extras[name] = torch.zeros(*ref.shape, *shape, dtype=dtype, device=ref.device)
        return self.extras[name]

    def record_outcome(self, rewards: Tensor, terminated: Tensor, truncated: Tensor) -> None:
        """Store the (bootstrapped) rewards (N,) and dones of the current step, and move to the next step."""
        self.rewards[self.step] = rewards
        self.dones[self.step] = (terminated | truncated).to(torch.float32)
        self.step += 1

    def compute_returns(self, last_values: Tensor, gamma: float, lam: float) -> None:
        """GAE advantages and returns (T, N) of the full rollout, bootstrapped from V(last observation) (N,)."""
        self.advantages, self.returns = compute_gae(self.rewards, self.values, self.dones, last_values,
                                                    gamma=gamma, lam=lam)

    def minibatches(
        self, num_mini_batches: int, epochs: int, generator: torch.Generator, *, reshuffle: bool = False
    ) -> Iterator[dict[str, Tensor]]:
        """`epochs` passes over the flattened (T * N) batch in `num_mini_batches` minibatches each.

        By default one shuffle makes the partition for all epochs, as RSL-RL does (reshuffling every epoch
        learned arm-reach more slowly: see docs/benchmarks.md), and each minibatch is gathered once instead
        of once per epoch. `reshuffle` draws a new partition in every epoch, as SB3 and cleanrl do.
        """
        b_size = self.steps * self.obs.shape[1]
        batch = {
            "obs": self.obs.flatten(0, 1),  # (B, O)
            "critic_obs": self.critic_obs.flatten(0, 1),  # (B, O_c)
            "actions": self.actions.flatten(0, 1),  # (B, A)
            "log_probs": self.log_probs.flatten(),  # (B,)
            "means": self.means.flatten(0, 1),  # (B, A)
            "values": self.values.flatten(),  # (B,)
            "advantages": self.advantages.flatten(),  # (B,)
            "returns": self.returns.flatten(),  # (B,)
            **{k: v.flatten(0, 1) for k, v in self.extras.items()},  # (B, ...)
        }
        mb_size = b_size // num_mini_batches
        mbs: list[dict[str, Tensor]] = []
        for _ in range(epochs):
            if reshuffle or not mbs:
                perm = torch.randperm(b_size, generator=generator, device=generator.device)  # (B,)
                # index_select: same rows as v[idx], ~3x cheaper than advanced indexing on CPU
                parts = [perm[i * mb_size : (i + 1) * mb_size] for i in range(num_mini_batches)]
                mbs = [{k: v.index_select(0, idx) for k, v in batch.items()} for idx in parts]
            yield from mbs
