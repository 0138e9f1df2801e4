"""The algorithm registry: name -> `AlgorithmEntry`, open to registration from anywhere, and the env facts
(`EnvSpec`) an algorithm is built from.

Each algorithm module (`robo_rl/learn/algorithms/`) registers itself at its bottom
(`ALGORITHMS.register(name, entry)`, one of them with `default=True`); the built-in ones are imported by
`robo_rl.learn` (its `__init__`), so they are registered whenever anything of `robo_rl.learn` is. A user's
script or test registers its own before training, and again before resuming or exporting such a run
(registration lasts for the process). The runner, the CLI, the builders and export know algorithms only
through this registry. It lives beside the runner, not inside `algorithms/`, because algorithms import the
runner classes their entries name: the runner and the builders must not import the algorithms' package.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from robo_rl.core.registry import Registry


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
    policy_terms: tuple[tuple[str, int], ...] = ()
    """(name, width) of each term of the "policy" group, in order (width: dim x history); () when unknown."""
    camera: str | None = None
    """The camera rendered into the "image" group (N, 3, S, S) uint8; None: no images."""
    image_size: int = 0
    """S, the image side (pixels)."""
    instructions: tuple[str, ...] = ()
    """The instruction texts the "text" group (N,) indexes; () for a task without instructions."""
    reset_group_size: int = 1
    """M: worlds g*M .. g*M+M-1 start every episode from one shared initial state (`env.reset_group_size`)."""
    episode_decisions: int = 0
    """Policy decisions (env steps, or chunks of them) of a whole episode, to its time-out; 0 when unknown."""


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
    build: Callable[..., Any]
    """(algo config, policy module, env spec, generator, **what its runner makes for it) -> the algorithm
    (`robo_rl.learn.algorithms.algorithm`)."""
    init_from: InitFrom | None = None
    """The trained run whose weights the policy starts from, if the algorithm fine-tunes one."""


ALGORITHMS: Registry[AlgorithmEntry] = Registry("algorithm", field="algo_name", entry_type=AlgorithmEntry)
"""Every registered algorithm; `ALGORITHMS.default` is the one a config without `algo_name` trains."""


def algorithm_configs(name: str) -> tuple[type, type]:
    """(algo config class, policy config class) of a registered algorithm; one-line ConfigError otherwise."""
    entry = ALGORITHMS.get(name)
    return entry.config_cls, entry.policy_config_cls
