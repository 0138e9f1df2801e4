"""Standard gymnasium environments (Hopper-v5, Pendulum-v1, ...) behind our VecEnv contract.

`GymnasiumVecEnv` runs N copies of `gymnasium.make(id)` in a `gymnasium.vector.SyncVectorEnv` (one
process: on 2 cores worker processes only add copies and pipes) in gymnasium's same-step autoreset
mode, which is ours: an ended env is reset inside `step` and its last observation is in
`info["final_obs"]`. Observations become float32 torch tensors; "critic" is the same tensor as
"policy" (a gymnasium env has no privileged observations).

Actions: our Gaussian policy is unbounded. Each action is clipped to [-1, 1] and mapped affinely onto
the env's Box, [-1, 1] -> [low, high] (the identity for the usual [-1, 1] Box of the MuJoCo envs, so
there it is exactly SB3's clip-to-Box). Scaling rather than clipping in env units keeps the policy's
outputs O(1) whatever the env's units, so one initial std explores every env alike (Pendulum's
torque is in [-2, 2]). Dimensions with an infinite bound are passed through unchanged.

Task names `gym:<id>` reach this module through `robo_rl.tasks.task_entry`; the task's config is a
`GymTaskConfig` whose `id` is the task's.
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor

import robo_rl.sim.mujoco_cpu  # noqa: F401  (chooses a headless MUJOCO_GL before gymnasium's MuJoCo envs import mujoco)
from robo_rl.core.config import ConfigError, UserError, _f
from robo_rl.tasks.task_registry import TASKS, TaskEntry

GYM_PREFIX = "gym:"
"""Task names `gym:<id>` select a gymnasium environment."""
LIST_IDS_HINT = "list the ids with: python -c 'import gymnasium; gymnasium.pprint_registry()'"


@dataclass(frozen=True, kw_only=True)
class GymTaskConfig:
    """A gymnasium environment as a task (task name `gym:<id>`)."""

    id: str = ""
    """The gymnasium id, e.g. `Hopper-v5`; set from the task name and must equal it."""
    max_episode_steps: int = _f(0, ge=0)
    """Time limit in env steps (gymnasium's TimeLimit); 0 keeps the limit registered for the id."""

    task_id: ClassVar[str] = ""
    """The id of the task this config class belongs to ("" for the generic class: any id)."""

    def validate(self) -> None:
        if self.task_id and self.id != self.task_id:
            raise ConfigError(
                f"config error: env.id = {self.id!r}: must be {self.task_id!r}, the id of task "
                f"'{GYM_PREFIX}{self.task_id}' (choose another env with --task {GYM_PREFIX}<id>)"
            )
        check_gym_id(self.id)


def check_gym_id(env_id: str) -> None:
    """ConfigError (one line, with close matches) unless `env_id` is a registered gymnasium id."""
    import gymnasium

    if not env_id:
        raise ConfigError(f"task '{GYM_PREFIX}': expected {GYM_PREFIX}<gymnasium id>, e.g. gym:Hopper-v5; "
                          f"{LIST_IDS_HINT}")
    if env_id in gymnasium.registry:
        return
    close = difflib.get_close_matches(env_id, list(gymnasium.registry), n=3)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    raise ConfigError(f"unknown gymnasium id {env_id!r} in task '{GYM_PREFIX}{env_id}'{hint}; {LIST_IDS_HINT}")


def gym_task_config_class(env_id: str) -> type[GymTaskConfig]:
    """The config class of task `gym:<env_id>`: a GymTaskConfig whose `id` defaults to, and must equal, env_id."""
    return dataclasses.make_dataclass(
        "GymTaskConfig",
        [("id", str, dataclasses.field(default=env_id))],
        bases=(GymTaskConfig,),
        namespace={"task_id": env_id, "__doc__": GymTaskConfig.__doc__},
        frozen=True,
        kw_only=True,
    )


def gym_task_entry(env_id: str) -> TaskEntry:
    """(env class, config class) of task `gym:<env_id>`; ConfigError for an unknown id."""
    check_gym_id(env_id)
    return TaskEntry(GymnasiumVecEnv, gym_task_config_class(env_id))


def box_scale(low: np.ndarray, high: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Centre, half-width and finiteness mask (each (A,)) of a Box, for `to_box`."""
    finite = np.isfinite(low) & np.isfinite(high)
    low, high = np.where(finite, low, 0.0), np.where(finite, high, 0.0)  # no inf - inf below
    return (high + low) / 2.0, np.where(finite, (high - low) / 2.0, 1.0), finite


def to_box(actions: np.ndarray, center: np.ndarray, half: np.ndarray, finite: np.ndarray) -> np.ndarray:
    """Policy actions (N, A) -> env actions (N, A): clip to [-1, 1], then map onto [low, high] (finite dims only)."""
    return np.where(finite, center + half * np.clip(actions, -1.0, 1.0), actions)


def _render_mode(env_id: str) -> str | None:
    """"rgb_array" when the id's env class declares it (frames for videos), else None."""
    import gymnasium
    from gymnasium.envs.registration import load_env_creator

    entry = gymnasium.spec(env_id).entry_point
    creator = load_env_creator(entry) if isinstance(entry, str) else entry
    modes = getattr(creator, "metadata", {}).get("render_modes", ())
    return "rgb_array" if "rgb_array" in modes else None


class GymnasiumVecEnv:
    """N copies of a gymnasium env presented as our VecEnv (DESIGN.md §1).

    Args:
        cfg: the task's GymTaskConfig (its `id` names the env).
        num_envs: number of env copies N.
        seed: the first `reset` without a seed seeds copy i with `seed + i` (gymnasium's convention).
        num_threads: accepted for the common env signature; the copies step one after the other.
        backend: accepted for the common env signature; gymnasium envs bring their own physics.

    Raises:
        ConfigError: the id cannot be made, or its spaces are not a flat Box (observations) and a
            1-D Box (actions), which is what our Gaussian policies need.
    """

    action_clip = 1.0
    """Policy actions are clipped to [-1, 1] before they are mapped onto the env's Box."""

    def __init__(self, cfg: GymTaskConfig, num_envs: int, *, seed: int = 0, num_threads: int = 0,
                 backend: str = "mujoco_cpu", device: str = "cpu", nconmax: int | None = None,
                 njmax: int | None = None):
        import gymnasium
        from gymnasium.vector import AutoresetMode, SyncVectorEnv

        if backend != "mujoco_cpu" or str(device) != "cpu":
            raise ConfigError(f"config error: sim.backend = {backend!r}, sim.device = {str(device)!r}: a gymnasium "
                              f"task ({GYM_PREFIX}{cfg.id}) steps its own single-world physics on the cpu; "
                              "use sim.backend=mujoco_cpu")
        cfg.validate()
        self.cfg = cfg
        self.task = f"{GYM_PREFIX}{cfg.id}"
        self.num_envs = num_envs
        self.device = torch.device("cpu")
        make_kwargs: dict[str, Any] = {"render_mode": _render_mode(cfg.id)}
        if cfg.max_episode_steps:
            make_kwargs["max_episode_steps"] = cfg.max_episode_steps
        try:
            self.envs = SyncVectorEnv(
                [lambda: gymnasium.make(cfg.id, **make_kwargs)] * num_envs,
                copy=False,
                autoreset_mode=AutoresetMode.SAME_STEP,
            )
        except gymnasium.error.Error as exc:  # e.g. a missing extra (gymnasium[box2d])
            raise ConfigError(f"task {self.task!r}: gymnasium cannot make it: {exc}") from None
        self._check_spaces()
        first = self.envs.envs[0]
        self.obs_dims = {"policy": self.obs_dim, "critic": self.obs_dim}
        self.action_dim = int(self.envs.single_action_space.shape[0])
        self.dt = float(getattr(first.unwrapped, "dt", 0.0) or 1.0 / first.metadata.get("render_fps", 1.0))
        self.max_episode_length = int(first.spec.max_episode_steps or 0)  # 0: no time limit
        space = self.envs.single_action_space
        self._center, self._half, self._finite = box_scale(space.low.astype(np.float64), space.high.astype(np.float64))
        self._seed = seed
        self._seeded = False
        self._episode_return = np.zeros(num_envs)  # (N,) float64, raw env rewards
        self._episode_length = np.zeros(num_envs, dtype=np.int64)  # (N,)
        self._obs: dict[str, Tensor] | None = None

    def _check_spaces(self) -> None:
        from gymnasium.spaces import Box

        obs_space, act_space = self.envs.single_observation_space, self.envs.single_action_space
        problem = None
        if not isinstance(obs_space, Box):
            problem = f"its observation space {obs_space} is not a Box"
        elif not isinstance(act_space, Box) or len(act_space.shape) != 1:
            problem = f"its action space {act_space} is not a 1-D Box (our policies act continuously)"
        if problem:
            self.envs.close()
            raise ConfigError(f"task {self.task!r} cannot be trained here: {problem}")
        self.obs_dim = int(np.prod(obs_space.shape))

    # ------------------------------------------------------------------ VecEnv API
    def reset(self, seed: int | None = None, *, random_start: bool = True) -> dict[str, Tensor]:
        """Reset every copy; copy i is seeded with `seed + i`, the first time with the constructor's seed.

        `random_start` is accepted for the common signature and ignored: a gymnasium episode always
        starts at step 0 (its TimeLimit counter cannot be started elsewhere).
        """
        if seed is None and not self._seeded:
            seed = self._seed
        self._seeded = True
        obs, _ = self.envs.reset(seed=seed)
        self._episode_return[:] = 0.0
        self._episode_length[:] = 0
        self._obs = self._as_obs(obs)
        return self._obs

    def step(self, actions: Tensor) -> tuple[dict[str, Tensor], Tensor, Tensor, Tensor, dict[str, Any]]:
        """Apply actions (N, A) (see the module docstring for their scaling); ended copies are reset inside.

        info holds "final_obs" (observations before any reset), "log" (means over the episodes that
        ended: Episode/return, Episode/length in steps, Episode/length_s, Episode/terminated) and
        "episode" ({"ids": (K,), "return": (K,), "length": (K,)}, empty if none ended).
        `truncated` is only a time-out that is not also a termination, so it marks exactly the
        transitions to bootstrap.
        """
        if tuple(actions.shape) != (self.num_envs, self.action_dim):
            raise ValueError(f"actions have shape {tuple(actions.shape)}; expected {(self.num_envs, self.action_dim)}")
        env_actions = to_box(actions.detach().to(torch.float64).numpy(), self._center, self._half, self._finite)
        obs, reward, terminated, truncated, env_info = self.envs.step(env_actions.astype(np.float32))
        truncated = truncated & ~terminated
        done = terminated | truncated
        self._episode_return += reward
        self._episode_length += 1
        self._obs = self._as_obs(obs)
        info: dict[str, Any] = {"final_obs": self._obs, "log": {}, "episode": {}}
        ended = np.flatnonzero(done)  # (K,)
        if ended.size:
            final = self._obs["policy"].clone()  # (N, O)
            rows = np.stack([env_info["final_obs"][i] for i in ended]).reshape(ended.size, -1)
            final[torch.from_numpy(ended)] = torch.from_numpy(rows).to(torch.float32)
            info["final_obs"] = {"policy": final, "critic": final}
            info["episode"], info["log"] = self._episode_stats(ended, terminated)
            self._episode_return[ended] = 0.0
            self._episode_length[ended] = 0
        return (
            self._obs,
            torch.from_numpy(reward).to(torch.float32),
            torch.from_numpy(terminated),
            torch.from_numpy(truncated),
            info,
        )

    def _episode_stats(self, ended: np.ndarray, terminated: np.ndarray) -> tuple[dict[str, Tensor], dict[str, float]]:
        """info["episode"] and info["log"] of the episodes ending in copies `ended` (K,)."""
        returns = self._episode_return[ended]  # (K,)
        lengths = self._episode_length[ended].astype(np.float64)  # (K,)
        episode = {
            "ids": torch.from_numpy(ended),
            "return": torch.from_numpy(returns).to(torch.float32),
            "length": torch.from_numpy(lengths).to(torch.float32),
        }
        log = {
            "Episode/return": float(returns.mean()),
            "Episode/length": float(lengths.mean()),
            "Episode/length_s": float(lengths.mean() * self.dt),
            "Episode/terminated": float(terminated[ended].mean()),
        }
        return episode, log

    def get_observations(self) -> dict[str, Tensor]:
        """The observations of the last `reset` or `step`: "policy" (N, O) and "critic" (the same tensor)."""
        if self._obs is None:
            return self.reset()
        return self._obs

    def _as_obs(self, obs: np.ndarray) -> dict[str, Tensor]:
        policy = torch.from_numpy(np.asarray(obs, dtype=np.float32).reshape(self.num_envs, -1).copy())  # (N, O)
        return {"policy": policy, "critic": policy}

    @property
    def contract(self) -> Any:
        raise UserError(
            f"task {self.task!r} is a gymnasium environment: it has no deploy contract (robot, joints, gains), "
            "so its policies cannot be exported; export works for robo_rl's own tasks (robo-rl tasks)"
        )

    # ------------------------------------------------------------------ checkpointing
    def state_dict(self) -> dict[str, Any]:
        """What can be saved of gymnasium envs: each copy's RNG state and the seeding flag.

        A resumed run loses the episodes in progress: gymnasium offers no general way to save an
        env's simulator state, so `load_state_dict` starts a new episode in every copy (their
        partial returns are not logged). The restored RNGs make the resumed run reproducible from
        its checkpoint, but not bit-identical to a run that was never interrupted.
        """
        return {
            "rng": [env.unwrapped.np_random.bit_generator.state for env in self.envs.envs],
            "seeded": self._seeded,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the RNGs and start a new episode in every copy (see `state_dict`)."""
        self._seeded = bool(state["seeded"])
        for env, rng in zip(self.envs.envs, state["rng"], strict=True):
            env.unwrapped.np_random.bit_generator.state = rng
        self.reset(seed=None)

    def render(self, world: int = 0, *, width: int = 320, height: int = 240) -> np.ndarray:
        """RGB frame (H, W, 3) of copy `world`, at the env's own resolution (`width`, `height` are ignored)."""
        import gymnasium

        env = self.envs.envs[world]
        if env.render_mode != "rgb_array":
            raise UserError(f"task {self.task!r} cannot render frames (its env has no rgb_array render mode)")
        try:
            return env.render()
        except gymnasium.error.DependencyNotInstalled as exc:
            raise UserError(f"task {self.task!r} cannot render: {exc}") from None

    def close(self) -> None:
        self.envs.close()


TASKS.register_prefix(GYM_PREFIX, gym_task_entry, describes="gymnasium id",
                      help=f"any gymnasium env with Box observations and actions, e.g. {GYM_PREFIX}Hopper-v5; "
                           f"{LIST_IDS_HINT}")
