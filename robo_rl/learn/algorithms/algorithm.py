"""What an algorithm plug-in provides (DESIGN.md section 5): the methods the runner loops and export call.

An algorithm registers an `AlgorithmEntry` in `robo_rl.learn.algorithm_registry.ALGORITHMS` where it is
defined (its config, policy config, runner class and builders); the objects its builders return offer the
methods below. The runner, the CLI and export know algorithms only through that entry and these protocols.
"""

from __future__ import annotations

from typing import Any, Protocol

from torch import Tensor, nn


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
    """Driven by `OnPolicyRunner`: T x (act, process_env_step), compute_returns, update (T: algo.num_steps_per_env).

    Optional: `whole_episodes` (true: every iteration starts with all worlds reset, and `record_episode_ends(
    info["episode"])` is called before each `process_env_step`; GRPO).
    """

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
