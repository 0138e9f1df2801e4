"""Learning algorithms, one per file, and their registry: an explicit dict of name -> AlgorithmEntry.

`register_algorithm` adds one from outside the package (the registry is open); the runner, the CLI
and export look algorithms up only here. Registration lasts for the process: a script that adds
its own algorithm registers it before training, and again before resuming or exporting such a run.
"""

from __future__ import annotations

import re

from robo_rl.core.config import ConfigError
from robo_rl.learn.algorithms import bc, ppo, reinflow, sac
from robo_rl.learn.algorithms.base import AlgorithmEntry, EnvSpec

ALGORITHMS: dict[str, AlgorithmEntry] = {
    "ppo": ppo.ENTRY,
    "sac": sac.ENTRY,
    "bc": bc.ENTRY,
    "flow-bc": bc.FLOW_ENTRY,
    "reinflow": reinflow.ENTRY,
}

_NAME = re.compile(r"^[a-z][a-z0-9_\-]*$")

__all__ = ["ALGORITHMS", "AlgorithmEntry", "EnvSpec", "algorithm_configs", "algorithm_entry", "register_algorithm"]


def register_algorithm(name: str, entry: AlgorithmEntry) -> None:
    """Add an algorithm under `name` (lower case, digits, `-`, `_`); ValueError if taken or malformed."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"algorithm name {name!r}: use lower-case letters, digits, '-' and '_', "
                         "starting with a letter")
    if name in ALGORITHMS:
        raise ValueError(f"algorithm {name!r} is already registered; registered: {', '.join(ALGORITHMS)}")
    if not isinstance(entry, AlgorithmEntry):
        raise ValueError(f"algorithm {name!r}: expected an AlgorithmEntry, got {type(entry).__name__}")
    ALGORITHMS[name] = entry


def algorithm_entry(name: str) -> AlgorithmEntry:
    """The registered entry; ConfigError listing the valid names otherwise."""
    if name not in ALGORITHMS:
        raise ConfigError(f"config error: algo_name = {name!r}: allowed values are {', '.join(ALGORITHMS)}")
    return ALGORITHMS[name]


def algorithm_configs(name: str) -> tuple[type, type]:
    """(algo config class, policy config class) of a registered algorithm, for `resolve_train_config`."""
    entry = algorithm_entry(name)
    return entry.config_cls, entry.policy_config_cls
