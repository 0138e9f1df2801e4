"""Groups of worlds that start every episode from one shared initial state (`env.reset_group_size` M > 1), for
GRPO's group-normalised returns: worlds g*M .. g*M+M-1 are group g.

A mixin of `robo_rl.tasks.task_env.TaskEnv` (split out by concern, like `randomization`). A group's worlds share one
time-out clock (`reset` draws one random start per group), so a time-out ends the whole group at once. When every
world of a group resets, its first world draws a new initial state as any reset does (`_reset_events`,
`_reset_worlds`: layout, goal, instruction, robot pose, the per-reset domain-randomisation and latency draws) and
the others copy what that reset set: the physics state's qpos and qvel (the rest of the state is the model's
initial state, as after every reset), actuator targets, mocap poses, randomisation samples (the startup ones too),
the action delay and the task's buffers (`_task_buffers`). Each group's copy is kept (`group_start`, saved in
checkpoints): a world whose episode ends before its group's (a failure: the cube fell off the table) restarts
from its group's initial state without drawing, and its time-out clock stays the group's, so the group still
times out, and draws its next state, together. What is drawn during an episode (observation noise, pushes,
command resampling) stays per world; different groups draw independently.
"""

from __future__ import annotations

import torch
from torch import Tensor

from robo_rl.core.config import ConfigError

GROUP_PREFIX = "group_start/"
"""State-dict keys of the groups' initial states."""


def split_groups(ids: Tensor, group_size: int, num_envs: int) -> tuple[Tensor, Tensor]:
    """Worlds to reset (K,), distinct -> (leaders (G',): the first world of each group all of whose worlds are in
    `ids`; rest (K',): the worlds of `ids` whose group is not all there)."""
    group = ids // group_size  # (K,)
    whole = torch.bincount(group, minlength=num_envs // group_size)[group] == group_size  # (K,)
    return ids[whole & (ids % group_size == 0)], ids[~whole]


class ResetGroups:
    """Grouped initial states for a TaskEnv (see the module docstring)."""

    def _setup_reset_groups(self) -> None:
        """Read M from the task config (1 without the field); ConfigError when the worlds do not split into groups."""
        m = getattr(self.cfg, "reset_group_size", 1)
        if self.num_envs % m:
            raise ConfigError(f"config error: env.reset_group_size = {m}: the number of worlds ({self.num_envs}, "
                              "sim.num_envs) must be a multiple of it")
        self.reset_group_size = m
        self.group_start: dict[str, Tensor] = {}
        """Each group's initial state (G, ...) by name (`_world_start`); empty before the first reset."""

    def _reset_grouped(self, ids: Tensor) -> None:
        """Reset worlds `ids` (K,) whose clocks and sums are already zeroed: whole groups draw, the others replay
        their group's initial state and take back the group's time-out clock."""
        m = self.reset_group_size
        leaders, rest = split_groups(ids, m, self.num_envs)
        if leaders.numel():
            self._reset_events(leaders)
            self._reset_worlds(leaders)
            start = self._world_start(leaders)
            if not self.group_start:
                self.group_start = {k: v.new_zeros(self.num_envs // m, *v.shape[1:]) for k, v in start.items()}
            for k, v in start.items():
                self.group_start[k][leaders // m] = v
            followers = (leaders[:, None] + torch.arange(1, m, device=leaders.device)).flatten()  # (G' (M-1),)
            self._set_world_start(followers, {k: v.repeat_interleave(m - 1, 0) for k, v in start.items()})
        if rest.numel():
            clock = self.episode_length.view(-1, m).amax(1)  # (G,) the clock of the worlds still running
            self.episode_length[rest] = clock[rest // m]
            self._set_world_start(rest, {k: v[rest // m] for k, v in self.group_start.items()})

    def _world_start(self, ids: Tensor) -> dict[str, Tensor]:
        """What the reset of worlds `ids` (K,) drew or set, row by row (copies)."""
        b = self.backend
        rows = {"qpos": b.qpos[ids], "qvel": b.qvel[ids], "ctrl": b.ctrl[ids], "mocap_pos": b.mocap_pos[ids],
                "action_delay": self.action_delay[ids]}
        rows.update({f"randomization/{k}": v[ids] for k, v in self.randomization.items()})
        rows.update({f"task/{k}": v[ids] for k, v in self._task_buffers().items()})
        return rows

    def _set_world_start(self, ids: Tensor, rows: dict[str, Tensor]) -> None:
        """Put worlds `ids` (K,) into the initial state `rows` (each (K, ...), as `_world_start` gives)."""
        b = self.backend
        b.ctrl[ids] = rows["ctrl"]  # before the reset: it computes the sensors with them
        b.mocap_pos[ids] = rows["mocap_pos"]
        self.action_delay[ids] = rows["action_delay"]
        for k, v in self.randomization.items():
            v[ids] = rows[f"randomization/{k}"]
        if self.randomization:
            self._write_physics(ids)
        for k, v in self._task_buffers().items():
            v[ids] = rows[f"task/{k}"]
        self._clear_events(ids)
        b.reset(ids, qpos=rows["qpos"], qvel=rows["qvel"])

    def _group_state_dict(self) -> dict[str, Tensor]:
        return {GROUP_PREFIX + k: v.clone() for k, v in self.group_start.items()}

    def _load_group_state_dict(self, state: dict[str, Tensor]) -> None:
        self.group_start = {k[len(GROUP_PREFIX):]: v.clone().to(self.device) for k, v in state.items()
                            if k.startswith(GROUP_PREFIX)}
