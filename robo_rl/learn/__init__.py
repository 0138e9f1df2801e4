"""Training: algorithms, networks, runner, storage, checkpoints, logging, evaluation.

Importing any part of `robo_rl.learn` registers the built-in algorithms: each module registers itself where it
is defined, and importing them here makes them known without naming them anywhere else (in this order: the
order the registry lists them).
"""

# isort: off
from robo_rl.learn.algorithms import ppo  # noqa: F401  (registration)
from robo_rl.learn.algorithms import sac  # noqa: F401
from robo_rl.learn.algorithms import bc  # noqa: F401
from robo_rl.learn.algorithms import reinflow  # noqa: F401
from robo_rl.learn.algorithms import vla_sft  # noqa: F401
from robo_rl.learn.algorithms import vla_rl  # noqa: F401
# isort: on
