"""A task's observations: its terms (computed by the term registry's torch functions), their noise, history and
the "policy" and "critic" groups.

The task provides sources (named batched tensors, `robo_rl.terms.SOURCES` plus its own); each term's record
says which it reads. The policy group is what the deployed policy sees (noise and history included); the critic
sees the clean current values of the policy's terms followed by its privileged extra terms.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import torch
from torch import Tensor

from robo_rl.core.config import ConfigError
from robo_rl.core.contract import ObsTerm
from robo_rl.terms import OBSERVATION_TERMS, TermContext


def with_history(terms: tuple[ObsTerm, ...], history: dict[str, int]) -> tuple[ObsTerm, ...]:
    """`terms` with the stacked-step counts of `history` (term name -> steps); ConfigError for unknown names."""
    names = [t.name for t in terms]
    for name, steps in history.items():
        if name not in names:
            raise ConfigError(f"config error: env.obs_history.{name}: not a policy observation term; "
                              f"terms: {', '.join(names)}")
        if not isinstance(steps, int) or not 1 <= steps <= 100:
            raise ConfigError(f"config error: env.obs_history.{name} = {steps!r}: must be an integer 1 .. 100")
    return tuple(dataclasses.replace(t, history=history.get(t.name, t.history)) for t in terms)


def apply_term(term: ObsTerm, value: Tensor) -> Tensor:
    """A term's value (N, dim) as float32, scaled and clipped as its ObsTerm says."""
    if value.dtype != torch.float32:
        value = value.to(torch.float32)
    if term.scale != 1.0:
        value = value * term.scale
    if term.clip is not None:
        value = value.clamp(-term.clip, term.clip)
    return value


class ObservationManager:
    """The observation terms of a task and the state they keep (history).

    Args:
        policy_terms: what the policy observes, in order (history already applied, see `with_history`).
        critic_extra_terms: privileged terms appended to the policy's for the critic.
        num_envs: N.
        noise: term name -> half-width of the uniform noise added to the policy's value (policy terms only).
        generator: the env's generator (noise draws).
        context: joints and action columns, for the terms' sizes.

    Raises:
        ConfigError: a term that is not registered, or whose dim differs from the registered size.
    """

    def __init__(self, policy_terms: tuple[ObsTerm, ...], critic_extra_terms: tuple[ObsTerm, ...], *, num_envs: int,
                 noise: Mapping[str, float], generator: torch.Generator, context: TermContext):
        self.policy_terms = policy_terms
        self.critic_extra_terms = critic_extra_terms
        self.generator = generator
        self.records = {}
        for t in policy_terms + critic_extra_terms:
            if t.name not in OBSERVATION_TERMS:
                raise ConfigError(f"config error: observation term {t.name!r} is not registered; registered: "
                                  f"{', '.join(OBSERVATION_TERMS.names())}")
            record = OBSERVATION_TERMS.get(t.name)
            expected = record.expected_dim(context)
            if expected is not None and t.dim != expected:
                raise ConfigError(f"config error: observation term {t.name!r}: dim = {t.dim}, but the term has "
                                  f"{expected} entries")
            self.records[t.name] = record
        self.noise = {t.name: noise[t.name] for t in policy_terms if noise.get(t.name, 0.0) > 0.0}  # term -> width
        # The policy group is a view of the critic's first columns unless it has noise or history.
        self.policy_is_view = not self.noise and all(t.history == 1 for t in policy_terms)
        self.dims = {
            "policy": sum(t.dim * t.history for t in policy_terms),
            "critic": sum(t.dim for t in policy_terms + critic_extra_terms),
        }
        # Past values of policy terms with history > 1: (N, history - 1, dim), oldest first.
        self.history = {t.name: torch.zeros(num_envs, t.history - 1, t.dim) for t in policy_terms if t.history > 1}

    def values(self, sources: Mapping[str, Tensor]) -> dict[str, Tensor]:
        """Every term's unscaled value (N, dim) from the task's sources."""
        out = {}
        for name, record in self.records.items():
            try:
                args = [sources[k] for k in record.inputs]
            except KeyError as exc:
                raise ValueError(f"observation term {name!r} reads source {exc.args[0]!r}, which this task does "
                                 f"not provide (sources: {', '.join(sources)})") from None
            out[name] = record.torch(*args)
        return out

    def observe(self, sources: Mapping[str, Tensor], fill_ids: Tensor | None = None
                ) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
        """(policy (N, O), critic (N, O_c), current policy term values with noise) for the current state.

        fill_ids: worlds just reset, whose history is filled with their current values first.
        """
        values = self.values(sources)
        parts = [apply_term(t, values[t.name]) for t in self.policy_terms + self.critic_extra_terms]
        critic = torch.cat(parts, dim=-1)  # (N, O_c)
        if self.policy_is_view:
            return critic[:, : self.dims["policy"]], critic, {}
        current, stacked = {}, []
        for t, clean in zip(self.policy_terms, parts, strict=False):
            v = clean
            if t.name in self.noise:
                width = self.noise[t.name]
                noise = torch.rand(v.shape, generator=self.generator).mul_(2 * width).sub_(width)
                v = apply_term(t, values[t.name].to(torch.float32) + noise)
            current[t.name] = v
            if t.history > 1:
                past = self.history[t.name]  # (N, h - 1, dim)
                if fill_ids is not None:
                    past[fill_ids] = v[fill_ids, None, :].expand(-1, t.history - 1, -1)
                v = torch.cat([past.flatten(1), v], dim=-1)  # (N, h * dim) oldest first
            stacked.append(v)
        return torch.cat(stacked, dim=-1), critic, current

    def push_history(self, current: dict[str, Tensor]) -> None:
        """Append this step's policy term values to their histories (dropping the oldest)."""
        for name, past in self.history.items():
            past[:, :-1] = past[:, 1:].clone()
            past[:, -1] = current[name]

    def state_dict(self) -> dict[str, Tensor]:
        """The histories, as `history/<term>` (the keys checkpoints have always used)."""
        return {f"history/{k}": v.clone() for k, v in self.history.items()}

    def load_state_dict(self, state: Mapping[str, Tensor]) -> None:
        for k, v in self.history.items():
            v.copy_(state[f"history/{k}"])
