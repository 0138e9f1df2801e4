"""Our tasks as gymnasium environments, for third-party tools (SB3, cleanrl, gymnasium wrappers).

    import gymnasium
    env = gymnasium.make("robo_rl.adapters.to_gymnasium:robo_rl/arm-reach-v0")  # one world, a gymnasium.Env
    envs = gymnasium.make_vec("robo_rl.adapters.to_gymnasium:robo_rl/arm-reach-v0", num_envs=64)  # N worlds

Importing this module registers every task of `robo_rl.tasks.task_registry.TASKS` as `robo_rl/<task>-v0` (again
on a second import: registration skips ids already there). `TaskVectorEnv` is the batched task
itself behind gymnasium's vector API; `TaskGymEnv` is one world behind the `gymnasium.Env` API.

Both give the task's "policy" observations as float32 numpy arrays (Box, unbounded) and take actions
in Box(-action_clip, action_clip) (the task's `cfg.action_clip`). Keyword arguments of `make` /
`make_vec` reach the constructors: `config={...}` overrides task config fields (validated as in a
YAML preset), `seed` seeds the task's generator until the first seeded `reset`.
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium
import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from robo_rl.core.config import ConfigError, build
from robo_rl.tasks.task_env import TaskEnv
from robo_rl.tasks.task_registry import TASKS, make_env

NAMESPACE = "robo_rl"
"""gymnasium ids are `robo_rl/<task>-v0`."""


def gym_id(task: str) -> str:
    """The gymnasium id of one of our tasks, e.g. `robo_rl/arm-reach-v0`."""
    return f"{NAMESPACE}/{task}-v0"


def register_tasks() -> list[str]:
    """Register every task in TASKS with gymnasium (ids already registered are left alone); returns the ids."""
    ids = []
    for task in TASKS:
        env_id = gym_id(task)
        if env_id not in gymnasium.registry:
            gymnasium.register(
                env_id,
                entry_point="robo_rl.adapters.to_gymnasium:TaskGymEnv",
                vector_entry_point="robo_rl.adapters.to_gymnasium:TaskVectorEnv",
                kwargs={"task": task},
            )
        ids.append(env_id)
    return ids


def make_task(task: str, num_envs: int, config: dict[str, Any] | None, seed: int, num_threads: int) -> TaskEnv:
    """Our TaskEnv `task` with its default config updated by `config` (validated; ConfigError otherwise)."""
    if task not in TASKS:
        raise ConfigError(f"unknown task {task!r}; tasks: {', '.join(TASKS)}")
    cfg = build(TASKS.get(task).config_cls, config or {}, "config")
    return make_env(task, num_envs, cfg=cfg, seed=seed, num_threads=num_threads)


def task_spaces(env: TaskEnv) -> tuple[spaces.Box, spaces.Box]:
    """(observation space (O,), action space (A,)) of one world of `env`."""
    obs = spaces.Box(-np.inf, np.inf, (env.obs_dims["policy"],), np.float32)
    clip = float(env.cfg.action_clip)
    return obs, spaces.Box(-clip, clip, (env.action_dim,), np.float32)


class TaskVectorEnv(VectorEnv):
    """One of our batched tasks (N worlds) as a `gymnasium.vector.VectorEnv` in same-step autoreset mode.

    An ended world is reset inside `step` (our envs always do): the returned observation is the new
    episode's first, and, as gymnasium 1.x specifies for `AutoresetMode.SAME_STEP`,
    `info["final_obs"]` is an object array (N,) holding the last observation (O,) of each world that
    ended (None elsewhere), with the mask `info["_final_obs"]`. Episode statistics come as the
    `RecordEpisodeStatistics` wrapper writes them: `info["episode"] = {"r", "l", "t"}` (return,
    length, seconds; arrays (N,), zero where no episode ended) with the mask `info["_episode"]`;
    pass `episode_statistics=False` to wrap it with that wrapper instead (it refuses a duplicate key).
    `info["log"]` has the task's own means over the episodes that ended (reward terms, metrics).

    Args:
        task: one of our task names (`robo-rl tasks`).
        num_envs: number of worlds N.
        config: task config overrides, e.g. {"episode_length_s": 2.0}.
        seed: seed of the task's generator until the first seeded `reset`.
        num_threads: physics threads (0: one per core).
        render_mode: None or "rgb_array" (`render` returns one frame per world).
        episode_statistics: add `info["episode"]` / `info["_episode"]`.
    """

    def __init__(
        self,
        task: str,
        num_envs: int = 1,
        *,
        config: dict[str, Any] | None = None,
        seed: int = 0,
        num_threads: int = 0,
        render_mode: str | None = None,
        episode_statistics: bool = True,
    ):
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode = {render_mode!r}: allowed values are None, 'rgb_array'")
        self.env = make_task(task, num_envs, config, seed, num_threads)
        self.num_envs = num_envs
        self.render_mode = render_mode
        self.episode_statistics = episode_statistics
        self.metadata = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": ["rgb_array"],
                         "render_fps": 1.0 / self.env.dt}
        self.single_observation_space, self.single_action_space = task_spaces(self.env)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self._returns = np.zeros(num_envs)  # (N,) float64
        self._lengths = np.zeros(num_envs, dtype=np.int64)  # (N,)
        self._starts = np.zeros(num_envs)  # (N,) perf_counter at episode start
        self._seeded = False

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        """Reset every world; observations (N, O) float32.

        Args:
            seed: reseed the task's generator (one int for all worlds). The first reset without a seed
                draws one from gymnasium's `np_random` (unseeded: random).
            options: {"random_start": True} starts the episode clocks at random points, as our
                training does to decorrelate time-outs (default False: full episodes).
        """
        if seed is not None and not isinstance(seed, int):
            raise ValueError(f"seed = {seed!r}: expected one int for all worlds (or None)")
        super().reset(seed=seed)
        if seed is None and not self._seeded:
            seed = int(self.np_random.integers(2**31 - 1))
        self._seeded = True
        random_start = bool((options or {}).get("random_start", False))
        obs = self.env.reset(seed=seed, random_start=random_start)
        self._returns[:] = 0.0
        self._lengths[:] = 0
        self._starts[:] = time.perf_counter()
        return obs["policy"].numpy().copy(), {}

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """One policy step of every world: actions (N, A) -> (obs (N, O), reward (N,), terminated, truncated, info)."""
        acts = torch.as_tensor(np.asarray(actions, dtype=np.float32))  # (N, A)
        obs, reward, terminated, truncated, task_info = self.env.step(acts)
        reward_np = reward.numpy().copy()  # (N,) float32
        term, trunc = terminated.numpy().copy(), truncated.numpy().copy()
        self._returns += reward_np
        self._lengths += 1
        info: dict[str, Any] = {"log": dict(task_info["log"])}
        done = term | trunc
        if done.any():
            final = task_info["final_obs"]["policy"].numpy()  # (N, O)
            final_obs = np.full(self.num_envs, None, dtype=object)
            for i in np.flatnonzero(done):
                final_obs[i] = final[i].copy()
            info["final_obs"], info["_final_obs"] = final_obs, done.copy()
            if self.episode_statistics:
                now = time.perf_counter()
                info["episode"] = {
                    "r": np.where(done, self._returns, 0.0),
                    "l": np.where(done, self._lengths, 0),
                    "t": np.where(done, np.round(now - self._starts, 6), 0.0),
                }
                info["_episode"] = done.copy()
                self._starts[done] = now
            self._returns[done] = 0.0
            self._lengths[done] = 0
        return obs["policy"].numpy().copy(), reward_np, term, trunc, info

    def render(self) -> tuple[np.ndarray, ...] | None:
        """One RGB frame (H, W, 3) per world with render_mode "rgb_array" (N renders: keep N small), else None."""
        if self.render_mode != "rgb_array":
            return None
        return tuple(self.env.render(i) for i in range(self.num_envs))

    def close_extras(self, **kwargs: Any) -> None:
        self.env.close()


class TaskGymEnv(gymnasium.Env):
    """One world of one of our tasks as a `gymnasium.Env` (no autoreset: call `reset` after an episode ends).

    Our envs reset an ended world inside `step`; this env returns that step's pre-reset observation
    (with terminated / truncated set) and starts the next episode only on `reset()`. Stepping an
    ended episode raises `gymnasium.error.ResetNeeded`.

    Args:
        task: one of our task names (`robo-rl tasks`).
        config: task config overrides, e.g. {"episode_length_s": 2.0}.
        seed: seed of the task's generator until the first seeded `reset`.
        render_mode: None or "rgb_array".
    """

    metadata = {"render_modes": ["rgb_array"]}  # read by gymnasium.make before construction

    def __init__(
        self, task: str, *, config: dict[str, Any] | None = None, seed: int = 0, render_mode: str | None = None
    ):
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode = {render_mode!r}: allowed values are None, 'rgb_array'")
        self.env = make_task(task, 1, config, seed, num_threads=1)
        self.render_mode = render_mode
        self.metadata = {**self.metadata, "render_fps": 1.0 / self.env.dt}
        self.observation_space, self.action_space = task_spaces(self.env)
        self._needs_reset = True
        self._seeded = False

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        """Start an episode; observation (O,) float32. `seed` reseeds the task's generator (see TaskVectorEnv)."""
        super().reset(seed=seed)
        if seed is None and not self._seeded:
            seed = int(self.np_random.integers(2**31 - 1))
        self._seeded = True
        obs = self.env.reset(seed=seed, random_start=False)
        self._needs_reset = False
        return obs["policy"][0].numpy().copy(), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """One policy step: action (A,) -> (obs (O,), reward, terminated, truncated, info).

        At the end of an episode obs is its last observation and info["log"] holds the task's episode
        log (reward terms per second, metrics).
        """
        if self._needs_reset:
            raise gymnasium.error.ResetNeeded("the episode has ended (or never started): call reset() first")
        acts = torch.as_tensor(np.asarray(action, dtype=np.float32)).reshape(1, -1)  # (1, A)
        obs, reward, terminated, truncated, task_info = self.env.step(acts)
        term, trunc = bool(terminated[0]), bool(truncated[0])
        info: dict[str, Any] = {}
        if term or trunc:
            obs = task_info["final_obs"]  # the episode's last observation; the world itself has reset already
            info["log"] = dict(task_info["log"])
            self._needs_reset = True
        return obs["policy"][0].numpy().copy(), float(reward[0]), term, trunc, info

    def render(self) -> np.ndarray | None:
        """RGB frame (H, W, 3) with render_mode "rgb_array", else None."""
        if self.render_mode != "rgb_array":
            return None
        return self.env.render(0)

    def close(self) -> None:
        self.env.close()


register_tasks()
