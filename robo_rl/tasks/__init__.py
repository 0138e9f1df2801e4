"""Tasks: small pure tensor functions over batched physics state, and the task envs built from them.

Each task module registers its tasks in `robo_rl.tasks.task_registry.TASKS` where they are defined; importing them
here makes the built-in tasks known whenever anything of `robo_rl.tasks` is imported, in the order
`robo-rl tasks` lists them.
"""

# isort: off
from robo_rl.tasks import arm_reach  # noqa: F401  (registration)
from robo_rl.tasks import quadruped_walk  # noqa: F401
from robo_rl.tasks import arm_pick_place  # noqa: F401
from robo_rl.tasks import quadruped_rough  # noqa: F401
# isort: on
