"""What an algorithm plug-in provides (DESIGN.md section 5), and the env facts it is built from.

An algorithm registers an `AlgorithmEntry` in `robo_rl.learn.algorithms.registry.ALGORITHMS` where it is
defined: its config dataclass, the policy config it needs, the runner class that drives it (on-policy,
off-policy or offline loop), two builders, and optionally the trained run its policy starts from (`InitFrom`).
The runner, the CLI and export know algorithms only through that entry and the protocols below.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import Tensor, nn


@dataclass(frozen=True)
class EnvSpec:
    """Sizes and limits of a VecEnv, all an algorithm needs to allocate its networks and buffers."""

    num_envs: int
    """N."""
    obs_dim: int
    """O, the "policy" group (what the deployed policy sees)."""
    critic_obs_dim: int
    """O_c, the "critic" group (privileged; equal to O when the env has none)."""
    action_dim: int
    """A."""
    action_clip: float | None
    """The task clips raw actions to +-action_clip (its deploy contract's action.clip); None: unbounded."""
    device: torch.device = torch.device("cpu")
    """Training device (buffers and networks)."""


class Policy(Protocol):
    """The module an algorithm trains; everything a checkpoint's `algo.policy` holds."""

    def act_inference(self, obs: Tensor) -> Tensor:
        """Deterministic actions (N, A) for raw policy observations (N, O)."""

    def inference_policy(self) -> tuple[nn.Module, nn.Module]:
        """(actor, obs normaliser): actor(normaliser(obs)) is the deterministic action; export bakes both."""


class Algorithm(Protocol):
    """Methods both runner loops call. `policy` holds every trained tensor (checked by the NaN guard)."""

    policy: nn.Module

    def act(self, obs: Tensor, critic_obs: Tensor) -> Tensor:
        """Actions (N, A) for raw observations (N, O) / (N, O_c) of the current step."""

    def update(self) -> dict[str, float]:
        """Learn from what was collected; loss statistics by name (may be empty when nothing was learned)."""

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...

    def inference_policy(self) -> tuple[nn.Module, nn.Module]:
        """The policy's `inference_policy()`."""


class OnPolicyAlgorithm(Algorithm, Protocol):
    """Driven by `OnPolicyRunner`: T x (act, process_env_step), compute_returns, update (T: algo.num_steps_per_env)."""

    def process_env_step(self, rewards: Tensor, terminated: Tensor, truncated: Tensor,
                         final_critic_obs: Tensor) -> None: ...

    def compute_returns(self, last_critic_obs: Tensor) -> None: ...


class OffPolicyAlgorithm(Algorithm, Protocol):
    """Driven by `OffPolicyRunner`: per env step act, process_env_step, update (a few gradient steps)."""

    def process_env_step(self, rewards: Tensor, terminated: Tensor, truncated: Tensor, final_obs: Tensor,
                         final_critic_obs: Tensor) -> None: ...

    def replay_state_dict(self) -> dict[str, Any]:
        """The replay buffer's contents (large: saved beside the checkpoint, not in it)."""

    def load_replay_state_dict(self, state: dict[str, Any]) -> None: ...

    def replay_nbytes(self) -> int: ...


@dataclass(frozen=True)
class InitFrom:
    """Policy weights copied from a trained run before training starts (the builders load them: `init_from`).

    The algorithm only declares what it accepts; loading the run is the builders' job, so no algorithm
    imports the builders.
    """

    field: str
    """The algorithm config's field naming the run folder, run name or checkpoint (e.g. "pretrained")."""
    algorithms: tuple[str, ...]
    """Algorithms whose runs may be used."""
    keys: tuple[str, ...]
    """Prefixes of the policy's state-dict keys that are copied (the rest keeps its fresh initialisation)."""
    same_policy_fields: tuple[str, ...] = ()
    """Policy config fields that must equal the run's (its network's shape)."""
    missing: str = ""
    """What to tell a user who did not set `field` (how to get such a run)."""


@dataclass(frozen=True)
class AlgorithmEntry:
    """One registered algorithm."""

    config_cls: type
    """Frozen dataclass of the algorithm's hyper-parameters (`TrainConfig.algo`)."""
    policy_config_cls: type
    """Frozen dataclass of the networks it trains (`TrainConfig.policy`)."""
    runner_cls: type
    """The runner class that drives it (`robo_rl.learn.runner`: `OnPolicyRunner` for rollouts, `OffPolicyRunner`
    for a replay buffer, `OfflineRunner` for a fixed dataset), or a subclass of one."""
    build_policy: Callable[[Any, EnvSpec], nn.Module]
    """(policy config, env spec) -> a freshly initialised policy module (see `Policy`)."""
    build: Callable[[Any, nn.Module, EnvSpec, torch.Generator], Algorithm]
    """(algo config, policy module, env spec, generator) -> the algorithm."""
    init_from: InitFrom | None = None
    """The trained run whose weights the policy starts from, if the algorithm fine-tunes one."""
