"""An Isaac Lab or mjlab env as our VecEnv: task names `isaaclab:<id>` and `mjlab:<id>`.

Both frameworks share one manager-based API (mjlab is the Isaac Lab API on MuJoCo Warp), so one adapter
serves both, duck-typed: it calls the env's methods and reads its managers (see the package docstring for
observations, steps, logs and checkpoints). Importing this module registers the task name prefixes
`isaaclab:` and `mjlab:` in the task registry.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from robo_rl.adapters.isaaclab.bootstrap import FRAMEWORKS, INSTALL_HINT, make_framework_env
from robo_rl.adapters.isaaclab.contract_translation import framework_contract
from robo_rl.core.config import ConfigError, UserError, _f
from robo_rl.core.contract import DeployContract
from robo_rl.tasks.task_registry import TASKS, TaskEntry

POLICY_GROUPS = ("policy", "actor")
"""Observation groups that become our "policy" group (Isaac Lab's name, then mjlab's)."""

@dataclass(frozen=True, kw_only=True)
class ExternalTaskConfig:
    """An Isaac Lab or mjlab environment as a task (task names `isaaclab:<id>`, `mjlab:<id>`)."""

    id: str = ""
    """The framework's task id, e.g. `Mjlab-Velocity-Flat-Unitree-Go1`; set from the task name and must equal it."""
    action_clip: float = _f(0.0, ge=0.0)
    """Raw actions are clipped to +-action_clip; 0 uses the framework's `clip_actions` (none for most tasks:
    SAC then needs `policy.action_bound`)."""
    episode_length_s: float = _f(0.0, ge=0.0)
    """Episode time limit in seconds; 0 keeps the task's own."""
    terminal_obs: bool = False
    """mjlab only: step without auto-reset and reset ended worlds right after, so `info["final_obs"]` holds the
    true last observation of each ended episode (exact time-out bootstrapping), at the cost of one more forward
    pass on steps where episodes end. Off: `final_obs` is the post-reset observation (see the module docstring)."""
    robot: str = ""
    """The deploy contract's robot name (matched against the hardware file); "" uses the last word of the id,
    lower-cased (`...-Unitree-Go1` -> `go1`)."""

    framework: ClassVar[str] = ""
    """`mjlab` or `isaaclab`, set by the task name's prefix."""
    task_id: ClassVar[str] = ""
    """The id of the task this config class belongs to."""

    def validate(self) -> None:
        if self.task_id and self.id != self.task_id:
            prefix = FRAMEWORKS[self.framework]
            raise ConfigError(f"config error: env.id = {self.id!r}: must be {self.task_id!r}, the id of task "
                              f"'{prefix}{self.task_id}' (choose another env with --task {prefix}<id>)")

    @property
    def robot_name(self) -> str:
        return self.robot or self.id.rsplit("-", 1)[-1].lower()


def external_task_entry(framework: str, env_id: str) -> TaskEntry:
    """(env class, config class) of task `<framework>:<env_id>`; ConfigError for an empty id."""
    if not env_id:
        raise ConfigError(f"task '{FRAMEWORKS[framework]}': expected {FRAMEWORKS[framework]}<task id>, e.g. "
                          "mjlab:Mjlab-Velocity-Flat-Unitree-Go1")
    cfg_cls = dataclasses.make_dataclass(
        "ExternalTaskConfig",
        [("id", str, dataclasses.field(default=env_id))],
        bases=(ExternalTaskConfig,),
        namespace={"task_id": env_id, "framework": framework, "__doc__": ExternalTaskConfig.__doc__},
        frozen=True,
        kw_only=True,
    )
    return TaskEntry(IsaacLabVecEnv, cfg_cls)


class IsaacLabVecEnv:
    """An Isaac Lab-API environment (Isaac Lab 3 or mjlab) presented as our VecEnv (DESIGN.md §1).

    Args:
        cfg: the task's ExternalTaskConfig (its `id` names the framework's task).
        num_envs: number of worlds N.
        seed: the framework env's seed.
        num_threads, backend, nconmax, njmax: accepted for the common env signature; the framework brings its
            own simulator (mjlab: MuJoCo Warp; Isaac Lab: PhysX or Newton) and its own buffer sizes.
        device: the framework's device ("cpu" runs mjlab on Warp's CPU device; "cuda:0").

    Raises:
        UserError: the framework is not installed in this Python (with how to install it).
        ConfigError: the id is not one of the framework's tasks, or the env has no policy observation group.
    """

    def __init__(self, cfg: ExternalTaskConfig, num_envs: int, *, seed: int = 0, num_threads: int = 0,
                 backend: str = "mujoco_cpu", device: str = "cpu", nconmax: int | None = None,
                 njmax: int | None = None):
        cfg.validate()
        self.cfg = cfg
        self.task = f"{FRAMEWORKS[cfg.framework]}{cfg.id}"
        self.env, framework_clip = make_framework_env(cfg, num_envs, str(device), seed)
        u = self.unwrapped
        self.num_envs = int(u.num_envs)
        self.device = torch.device(u.device)
        groups = dict(u.observation_manager.group_obs_dim)
        self._policy_group = next((g for g in POLICY_GROUPS if g in groups), None)
        if self._policy_group is None:
            self.close()
            raise ConfigError(f"task {self.task!r} has no observation group {' or '.join(POLICY_GROUPS)} "
                              f"(groups: {', '.join(groups)}); the policy's observations must be one of them")
        self._critic_group = "critic" if "critic" in groups else self._policy_group
        for g in {self._policy_group, self._critic_group}:
            if len(groups[g]) != 1:
                self.close()
                raise ConfigError(f"task {self.task!r}: observation group {g!r} has shape {groups[g]}; our "
                                  "policies need one flat vector (concatenate_terms=True, flattened history)")
        self.obs_dims = {"policy": int(groups[self._policy_group][0]), "critic": int(groups[self._critic_group][0])}
        self.action_dim = int(u.action_manager.total_action_dim)
        clip = cfg.action_clip or framework_clip
        self.action_clip: float | None = float(clip) if clip else None
        self.dt = float(u.step_dt)
        self.max_episode_length = int(u.max_episode_length)
        self.finite_horizon = bool(getattr(u.cfg, "is_finite_horizon", False))
        self._episode_return = torch.zeros(self.num_envs, device=self.device)  # (N,)
        self._episode_length = torch.zeros(self.num_envs, device=self.device)  # (N,) steps
        self._obs: dict[str, Tensor] | None = None
        self._seeded = False
        self._warned_final_obs = False

    @property
    def unwrapped(self) -> Any:
        """The framework's own env (below any gymnasium wrappers)."""
        return getattr(self.env, "unwrapped", self.env)

    # ------------------------------------------------------------------ VecEnv API
    def _groups(self, obs: dict[str, Tensor]) -> dict[str, Tensor]:
        """The framework's observation dict as ours: the same tensors under "policy" and "critic"."""
        return {"policy": obs[self._policy_group], "critic": obs[self._critic_group]}

    def reset(self, seed: int | None = None, *, random_start: bool = True) -> dict[str, Tensor]:
        """Reset every world (seeded with `seed` if given).

        `random_start`: spread the episode clocks uniformly over the time limit, as rsl_rl's
        `init_at_random_ep_len`, so that time-outs do not all happen at once.
        """
        obs, _ = self.env.reset(seed=seed) if seed is not None else self.env.reset()
        self._seeded = True
        u = self.unwrapped
        if random_start and self.max_episode_length > 1:
            u.episode_length_buf[:] = torch.randint_like(u.episode_length_buf, high=self.max_episode_length)
        self._episode_return.zero_()
        self._episode_length.zero_()
        self._obs = self._groups(obs)
        return self._obs

    def step(self, actions: Tensor) -> tuple[dict[str, Tensor], Tensor, Tensor, Tensor, dict[str, Any]]:
        """Apply actions (N, A), clipped to +-action_clip; ended worlds are reset inside by the framework.

        info holds "final_obs" (the ended worlds' last observations with `env.terminal_obs`, else the post-reset
        ones: see the module docstring), "log" (the
        framework's extras["log"] as floats, plus our Episode/* means over the episodes that ended) and
        "episode" ({"ids": (K,), "return": (K,), "length": (K,)}, empty if none ended).
        """
        if tuple(actions.shape) != (self.num_envs, self.action_dim):
            raise ValueError(f"actions have shape {tuple(actions.shape)}; expected {(self.num_envs, self.action_dim)}")
        actions = actions.to(self.device, torch.float32)
        if self.action_clip is not None:
            actions = actions.clamp(-self.action_clip, self.action_clip)
        obs, reward, terminated, truncated, extras = self.env.step(actions)
        terminated, truncated = terminated.to(torch.bool), truncated.to(torch.bool)
        if self.finite_horizon:  # the time limit is part of the task: nothing to bootstrap
            terminated, truncated = terminated | truncated, torch.zeros_like(truncated)
        truncated = truncated & ~terminated
        log = _floats(extras.get("log", {}))
        done = terminated | truncated
        ended = done.nonzero().squeeze(-1)  # (K,)
        if self.cfg.terminal_obs:  # obs are the ended worlds' last observations: keep them, then reset those worlds
            final = self._groups(obs)
            self._obs = final
            if ended.numel():
                reset_obs, reset_extras = self.env.reset(env_ids=ended)
                log.update(_floats(reset_extras.get("log", {})))  # the episode sums, logged when worlds reset
                # the reset rows from the reset; the others as the step observed them (a reset recomputes every
                # world's terms, with new noise)
                self._obs = {k: torch.where(done[:, None], v, final[k]) for k, v in self._groups(reset_obs).items()}
        else:
            self._obs = self._groups(obs)
            final = self._final_obs(extras)
        info: dict[str, Any] = {"final_obs": final, "log": log, "episode": {}}
        self._episode_return += reward
        self._episode_length += 1
        if ended.numel():
            returns, lengths = self._episode_return[ended], self._episode_length[ended]
            info["episode"] = {"ids": ended, "return": returns, "length": lengths}  # indexing copied them
            info["log"].update({
                "Episode/return": returns.mean().item(),
                "Episode/length": lengths.mean().item(),
                "Episode/length_s": lengths.mean().item() * self.dt,
                "Episode/terminated": terminated[ended].float().mean().item(),
            })
            self._episode_return[ended] = 0.0
            self._episode_length[ended] = 0.0
        return self._obs, reward, terminated, truncated, info

    def _final_obs(self, extras: dict[str, Any]) -> dict[str, Tensor]:
        """The observations before auto-reset where the framework provides them, else the current ones."""
        final = extras.get("final_obs") or extras.get("final_observation")
        if isinstance(final, dict) and self._policy_group in final:
            return self._groups(final)
        if not self._warned_final_obs:
            self._warned_final_obs = True
            warnings.warn(f"task {self.task!r}: the framework does not return the observation before an auto-reset; "
                          "time-out bootstrapping uses the post-reset observation", stacklevel=3)
        return self._obs

    def get_observations(self) -> dict[str, Tensor]:
        """The observations of the last `reset` or `step`."""
        if self._obs is None:
            return self.reset()
        return self._obs

    @property
    def contract(self) -> DeployContract:
        """The deploy contract read from the env's managers (see `framework_contract`)."""
        return framework_contract(self.unwrapped, robot=self.cfg.robot_name, task=self.task,
                                  policy_group=self._policy_group, action_clip=self.action_clip)

    # ------------------------------------------------------------------ checkpointing
    def state_dict(self) -> dict[str, Any]:
        """Only the seeding flag: neither framework can save its simulator state (see `load_state_dict`)."""
        return {"seeded": self._seeded}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Start a new episode in every world: the episodes of the interrupted run cannot be restored."""
        self.reset(seed=None)
        self._seeded = bool(state["seeded"])

    def render(self, world: int = 0, *, width: int = 320, height: int = 240) -> Any:
        """RGB frame (H, W, 3) uint8 from the framework's renderer (its own resolution and world choice)."""
        frame = self.env.render()
        if frame is None:
            raise UserError(f"task {self.task!r} cannot render frames (its env has no rgb_array render mode)")
        return frame if not isinstance(frame, Tensor) else frame.cpu().numpy()

    def close(self) -> None:
        self.env.close()


def _floats(log: dict[str, Any]) -> dict[str, float]:
    """A framework log dict (tensors or numbers) as plain floats."""
    return {k: float(v.float().mean().item() if isinstance(v, Tensor) else v) for k, v in log.items()}


TASK_HELP = {
    "mjlab": "an mjlab task, e.g. mjlab:Mjlab-Velocity-Flat-Unitree-Go1 (ids: .venv-mjlab/bin/python -c 'import "
             "mjlab.tasks; from mjlab.tasks.registry import list_tasks; print(list_tasks())')",
    "isaaclab": "an Isaac Lab 3 task, e.g. isaaclab:Isaac-Velocity-Flat-Unitree-Go1-v0",
}
"""Framework -> what its task names are (`robo-rl tasks`), completed by its INSTALL_HINT."""

for _framework, _prefix in FRAMEWORKS.items():
    TASKS.register_prefix(_prefix, functools.partial(external_task_entry, _framework), describes="id",
                          help=f"{TASK_HELP[_framework]}; {INSTALL_HINT[_framework]}")
