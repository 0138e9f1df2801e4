"""Whole-environment adapters: gymnasium (both ways), SB3, Isaac Lab / mjlab, chunked execution.

Importing any of them registers the task-name prefixes the adapters resolve (`gym:<id>`, `mjlab:<id>`,
`isaaclab:<id>`) in `robo_rl.tasks.task_registry.TASKS`, as importing `robo_rl.tasks` registers the built-in
tasks; the frameworks themselves are imported only when such a name is built.
"""

from robo_rl.adapters import from_gymnasium  # noqa: F401  (registers gym:)
from robo_rl.adapters.isaaclab import adapter  # noqa: F401  (registers mjlab: and isaaclab:)
