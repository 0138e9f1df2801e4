"""The algorithm registry: name -> `AlgorithmEntry`, open to registration from anywhere.

Each algorithm module registers itself at its bottom (`ALGORITHMS.register(name, entry)`, one of them
with `default=True`); the built-in ones are imported by `robo_rl.learn` (its `__init__`), so they are
registered whenever anything of `robo_rl.learn` is. A user's script or test registers its own before
training, and again before resuming or exporting such a run (registration lasts for the process). The
runner, the CLI, the builders and export know algorithms only through this registry.
"""

from __future__ import annotations

from robo_rl.core.registry import Registry
from robo_rl.learn.algorithms.base import AlgorithmEntry

ALGORITHMS: Registry[AlgorithmEntry] = Registry("algorithm", field="algo_name", entry_type=AlgorithmEntry)
"""Every registered algorithm; `ALGORITHMS.default` is the one a config without `algo_name` trains."""


def algorithm_configs(name: str) -> tuple[type, type]:
    """(algo config class, policy config class) of a registered algorithm; one-line ConfigError otherwise."""
    entry = ALGORITHMS.get(name)
    return entry.config_cls, entry.policy_config_cls
