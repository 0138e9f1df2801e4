"""The VecEnv every task implements: batched torch tensors, auto-reset, per-term reward logging.

A task subclasses `TaskEnv` and fills in a handful of small methods (`_apply_action`,
`_obs_terms`, `_reward_terms`, `_terminated`, `_reset_worlds`, `_episode_metrics`) that call the
pure term functions in `observations.py` / `rewards.py`. The base class owns the physics stepping,
episode bookkeeping, auto-reset with `info["final_obs"]`, logging and the RNG.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor

from robo_rl.assets import find_asset
from robo_rl.config import ConfigError
from robo_rl.contract import ActionSpec, DeployContract, ObsTerm
from robo_rl.sim.mujoco_cpu import MujocoCpuBackend, load_model


def check_model_file(model: str, path: str = "env.model") -> None:
    """ConfigError unless `model` names an existing MJCF file (found by `robo_rl.assets.find_asset`)."""
    if not model.strip():
        raise ConfigError(f"config error: {path} = {model!r}: expected the path of an MJCF file")
    try:
        find_asset(model, what="MJCF file")
    except ValueError as exc:
        raise ConfigError(f"config error: {path} = {model!r}: {exc}") from None


def _load_mjcf(model: str) -> Any:
    """The MjModel of a task's MJCF; ConfigError (one line) when it is missing or MuJoCo cannot compile it."""
    check_model_file(model)
    try:
        return load_model(find_asset(model))
    except ValueError as exc:  # mujoco reports XML and compile errors as ValueError
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"config error: env.model = {model!r}: MuJoCo cannot load it: {first}") from None


class TaskEnv:
    """Base VecEnv over a batched physics backend.

    Args:
        cfg: the task's frozen config dataclass.
        num_envs: number of worlds N.
        seed: seed of the environment's own torch generator (resets, commands, noise).
        num_threads: physics worker threads (0: one per core).
    """

    description = ""
    """One line for `robo-rl tasks`."""
    reward_terms: tuple[str, ...] = ()
    """Names of the reward terms this task computes (keys allowed in `cfg.rewards`)."""
    policy_terms: tuple[ObsTerm, ...] = ()
    critic_extra_terms: tuple[ObsTerm, ...] = ()
    """Privileged terms appended to the policy terms for the critic."""
    keyframe: str | None = None
    start_grid_s = 0.2
    """Random episode starts (training) lie on this grid (s); see `reset`."""

    def __init__(self, cfg: Any, num_envs: int, *, seed: int = 0, num_threads: int = 0):
        self.cfg = cfg
        self.num_envs = num_envs
        self.device = torch.device("cpu")
        self.backend = MujocoCpuBackend(
            self._load_model(cfg), num_envs, num_threads=num_threads, keyframe=self.keyframe
        )
        self.backend.model.opt.timestep = cfg.physics_dt
        self.dt = cfg.physics_dt * cfg.decimation
        self.max_episode_length = max(1, round(cfg.episode_length_s / self.dt))
        self.start_stride = min(self.max_episode_length, max(1, round(self.start_grid_s / self.dt)))  # steps
        self.generator = torch.Generator().manual_seed(seed)
        self._clocks = torch.zeros(2, num_envs, dtype=torch.long)  # (2, N) both episode clocks, one add per step
        self.episode_length = self._clocks[0]  # (N,) time-out clock, random at start
        self.episode_steps = self._clocks[1]  # (N,) steps actually taken since reset
        self.episode_sums = torch.zeros(len(self.reward_terms), num_envs)  # (K, N) weighted term sums
        self._reward_weights = torch.tensor([cfg.rewards[n] * self.dt for n in self.reward_terms])[:, None]  # (K, 1)
        self.obs_dims = {
            "policy": sum(t.dim for t in self.policy_terms),
            "critic": sum(t.dim for t in self.policy_terms + self.critic_extra_terms),
        }
        self.action_dim = len(self.joint_names)
        self._resolve_joints()
        # Float32 copies of the physics state and sensors, refreshed in place; the named parts are views.
        b = self.backend
        self._state32 = torch.zeros(num_envs, b.nstate)  # (N, S)
        self.sensors32 = torch.zeros(num_envs, b.model.nsensordata)  # (N, D)
        self.qpos32 = self._state32[:, b.slices["qpos"]]  # (N, nq)
        self.qvel32 = self._state32[:, b.slices["qvel"]]  # (N, nv)
        self._joint_views = isinstance(self.q_idx, slice) and isinstance(self.dq_idx, slice)
        self.q = self.qpos32[:, self.q_idx]  # (N, J) a view when the joints' addresses are consecutive
        self.dq = self.qvel32[:, self.dq_idx]  # (N, J)
        self._refresh_state()

    def _load_model(self, cfg: Any) -> Any:
        """The task's MjModel, built before any world exists (override to edit it, e.g. fill a heightfield)."""
        return _load_mjcf(cfg.model)

    def _resolve_joints(self) -> None:
        """Joint addresses and PD parameters of `joint_names` (position actuators named like the joints)."""
        b, m = self.backend, self.backend.model
        # Consecutive addresses become slices: a slice of a state view is itself a view (no gather).
        self.q_idx = as_slice(b.joint_qpos_index(self.joint_names))  # (J,)
        self.dq_idx = as_slice(b.joint_qvel_index(self.joint_names))  # (J,)
        self.act_idx = as_slice(b.actuator_index(self.joint_names))  # (J,)
        self._act_columns = torch.arange(m.nu)[self.act_idx]  # (J,) the same as a tensor, for row updates
        a = self._act_columns.numpy()
        self.kp = torch.tensor(m.actuator_gainprm[a, 0], dtype=torch.float32)  # (J,)
        self.kd = torch.tensor(-m.actuator_biasprm[a, 2], dtype=torch.float32)  # (J,)
        self.torque_limit = torch.tensor(m.actuator_forcerange[a, 1], dtype=torch.float32)  # (J,)
        self.ctrl_low = torch.tensor(m.actuator_ctrlrange[a, 0], dtype=torch.float32)
        self.ctrl_high = torch.tensor(m.actuator_ctrlrange[a, 1], dtype=torch.float32)
        init_qpos = torch.from_numpy(b._init_state[b.slices["qpos"]])
        self.default_joint_pos = init_qpos[self.q_idx].to(torch.float32)  # (J,)
        # The contract carries the model's own float64 numbers (not their float32 copies above).
        self._contract_joints = {
            "default_joint_pos": tuple(init_qpos[self.q_idx].tolist()),
            "kp": tuple(m.actuator_gainprm[a, 0].tolist()),
            "kd": tuple((-m.actuator_biasprm[a, 2]).tolist()),
            "torque_limits": tuple(m.actuator_forcerange[a, 1].tolist()),
        }

    def _set_joint_targets(self, q_target: Tensor, ids: Tensor | None = None) -> None:
        """Write joint position targets (N, J), or (K, J) for worlds `ids`, into the actuators' ctrl."""
        ctrl = self.backend.ctrl
        if ids is not None:
            ctrl[ids[:, None], self._act_columns] = q_target.to(ctrl.dtype)
        elif isinstance(self.act_idx, slice):
            ctrl[:, self.act_idx] = q_target  # a view: the copy converts to float64
        else:
            ctrl[:, self.act_idx] = q_target.to(ctrl.dtype)

    def _make_contract(self, robot: str, action_kind: str, extra: dict[str, Any]) -> DeployContract:
        return DeployContract(
            robot=robot,
            joint_names=tuple(self.joint_names),
            **self._contract_joints,
            action=ActionSpec(
                kind=action_kind, scale=(self.cfg.action_scale,) * self.action_dim, clip=self.cfg.action_clip
            ),
            observation=tuple(self.policy_terms),
            policy_dt=self.dt,
            physics_dt=self.cfg.physics_dt,
            quaternion_order="wxyz",
            extra=extra,
        )

    # ------------------------------------------------------------------ to implement per task
    joint_names: tuple[str, ...] = ()

    def _apply_action(self, action: Tensor) -> None:
        """Write actuator targets for raw policy actions (N, A) into backend.ctrl."""
        raise NotImplementedError

    def _refresh_state(self) -> None:
        """Refresh the float32 state and sensor copies: one conversion each, the parts are views of them.

        The views (qpos32, qvel32, q, dq, and task views of sensors32) change in place: terms that
        must outlive a step copy them.
        """
        self._state32.copy_(self.backend.state)
        self.sensors32.copy_(self.backend.sensordata)
        if not self._joint_views:  # gathered joints are copies: gather again
            self.q = self.qpos32[:, self.q_idx]
            self.dq = self.qvel32[:, self.dq_idx]

    def _refresh(self) -> None:
        """Cache float32 state the terms read, once per physics step and after resets.

        Tasks extend this (calling super) for their own derived state (sensor values, distances).
        """
        self._refresh_state()

    def _post_physics(self) -> None:
        """Update derived quantities after physics (optional)."""

    def _obs_terms(self) -> dict[str, Tensor]:
        """Every observation term by name, each (N, dim), unscaled."""
        raise NotImplementedError

    def _reward_terms(self) -> dict[str, Tensor]:
        """Every reward term by name, each (N,), unscaled."""
        raise NotImplementedError

    def _terminated(self) -> Tensor | None:
        """(N,) bool: episodes that end by failure (not time-out); None for a task that never fails."""
        return None

    def _reset_worlds(self, ids: Tensor) -> None:
        """Put worlds `ids` (K,) into a new random initial state."""
        raise NotImplementedError

    def _episode_metrics(self, ids: Tensor) -> dict[str, Tensor]:
        """Task metrics (each (K,) float32) of episodes ending in worlds `ids`, measured before their reset."""
        return {}

    @property
    def contract(self) -> DeployContract:
        raise NotImplementedError

    # ------------------------------------------------------------------ VecEnv API
    def reset(self, seed: int | None = None, *, random_start: bool = True) -> dict[str, Tensor]:
        """Reset every world.

        Args:
            seed: reseed the environment's generator first.
            random_start: start episode clocks at random points (decorrelates time-outs in training);
                False for evaluation, where every episode should run its full length.

        The random clocks are multiples of `start_grid_s`: time-outs stay spread over the episode,
        but worlds time out together once per grid interval instead of a few every step. A reset
        costs a fixed ~40 small tensor ops however many worlds it covers, so this pays it once per
        interval (arm-reach at 1024 worlds: ~7 worlds every step become ~68 every 10th step; ~8 %
        more steps/s). Failures (`_terminated`) still reset on the step they happen.
        """
        if seed is not None:
            self.generator.manual_seed(seed)
        with single_torch_thread():
            self._reset_ids(torch.arange(self.num_envs))
            if random_start:
                slots = -(-self.max_episode_length // self.start_stride)  # ceil
                start = torch.randint(0, slots, (self.num_envs,), generator=self.generator)
                self.episode_length[:] = start * self.start_stride
            return self.get_observations()

    def step(self, actions: Tensor) -> tuple[dict[str, Tensor], Tensor, Tensor, Tensor, dict[str, Any]]:
        with single_torch_thread():
            return self._step(actions)

    def _step(self, actions: Tensor) -> tuple[dict[str, Tensor], Tensor, Tensor, Tensor, dict[str, Any]]:
        """Apply actions (N, A) for one policy step; ended worlds are reset before returning.

        info holds "final_obs" (observations before any reset, for time-out bootstrapping), "log"
        (means over episodes that ended: per-term reward per second, metrics, lengths) and "episode"
        ({"ids": (K,), <metric>: (K,)} for the worlds that ended, empty if none).
        """
        if actions.shape != (self.num_envs, self.action_dim):
            raise ValueError(f"actions have shape {tuple(actions.shape)}; expected {(self.num_envs, self.action_dim)}")
        if actions.dtype != torch.float32:
            actions = actions.to(torch.float32)
        if actions.requires_grad:
            actions = actions.detach()
        actions = actions.clamp(-self.cfg.action_clip, self.cfg.action_clip)
        self._apply_action(actions)
        self.backend.step(self.cfg.decimation)
        self._refresh()
        self._clocks += 1
        self._post_physics()

        terms = self._reward_terms()
        weighted = torch.stack([terms[n] for n in self.reward_terms]) * self._reward_weights  # (K, N)
        reward = weighted.sum(0)  # (N,)
        self.episode_sums += weighted
        truncated = self.episode_length >= self.max_episode_length  # (N,) bool
        terminated = self._terminated()
        if terminated is None:  # the task never fails
            terminated, done = torch.zeros_like(truncated), truncated
        else:
            truncated &= ~terminated
            done = terminated | truncated
        obs = self.get_observations()
        info: dict[str, Any] = {"final_obs": obs, "log": {}, "episode": {}}
        ended = done.nonzero().squeeze(-1)  # (K,)
        if ended.numel() > 0:
            metrics = self._episode_metrics(ended)
            info["episode"] = {"ids": ended, **metrics}
            info["log"] = self._episode_log(ended, terminated, metrics)
            self._reset_ids(ended)
            obs = self.get_observations()
        return obs, reward, terminated, truncated, info

    def get_observations(self) -> dict[str, Tensor]:
        """Observation groups for the current state: "policy" (N, O) and "critic" (N, O_c).

        The critic's terms start with the policy's, so both come from one concatenation: "policy"
        is a view of the critic's first O columns.
        """
        values = self._obs_terms()
        parts = [self._apply_term(t, values[t.name]) for t in self.policy_terms + self.critic_extra_terms]
        critic = torch.cat(parts, dim=-1)  # (N, O_c)
        return {"policy": critic[:, : self.obs_dims["policy"]], "critic": critic}

    # ------------------------------------------------------------------ internals
    @staticmethod
    def _apply_term(term: ObsTerm, value: Tensor) -> Tensor:
        if value.dtype != torch.float32:
            value = value.to(torch.float32)
        if term.scale != 1.0:
            value = value * term.scale
        if term.clip is not None:
            value = value.clamp(-term.clip, term.clip)
        return value

    def _reset_ids(self, ids: Tensor) -> None:
        self._clocks.index_fill_(1, ids, 0)
        self.episode_sums.index_fill_(1, ids, 0.0)
        self._reset_worlds(ids)
        self._refresh()

    def _episode_log(self, ids: Tensor, terminated: Tensor, metrics: dict[str, Tensor]) -> dict[str, float]:
        """Means over the episodes that end now: reward per second of each term, metrics, lengths."""
        seconds = self.episode_steps[ids] * self.dt  # (E,) float32
        columns = torch.cat(
            [
                self.episode_sums[:, ids] / seconds,  # (K, E) reward per second of each term
                torch.stack([*metrics.values(), seconds, terminated[ids].to(torch.float32)]),
            ]
        )  # (K + M + 2, E)
        names = [f"Episode_Reward/{k}" for k in self.reward_terms] + [f"Metrics/{k}" for k in metrics]
        return dict(zip([*names, "Episode/length_s", "Episode/terminated"], columns.mean(1).tolist(), strict=True))

    def _uniform(self, k: int, low: Tensor, width: Tensor) -> Tensor:
        """(k, D) samples uniform in [low, low + width) per column (low, width: (D,)), from the env generator."""
        return torch.addcmul(low, torch.rand(k, low.numel(), generator=self.generator), width)

    # ------------------------------------------------------------------ checkpointing
    def state_dict(self) -> dict[str, Tensor]:
        """All mutable state, so a resumed run continues bit-for-bit."""
        out = {
            "physics_state": self.backend.state.clone(),
            "ctrl": self.backend.ctrl.clone(),
            "sensordata": self.backend.sensordata.clone(),
            "mocap_pos": self.backend.mocap_pos.clone(),
            "episode_length": self.episode_length.clone(),
            "episode_steps": self.episode_steps.clone(),
            "generator": self.generator.get_state(),
            "episode_sums": self.episode_sums.clone(),
        }
        out.update({f"task/{k}": v.clone() for k, v in self._task_buffers().items()})
        return out

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        self.backend.state.copy_(state["physics_state"])
        self.backend.ctrl.copy_(state["ctrl"])
        self.backend.sensordata.copy_(state["sensordata"])
        self.backend.mocap_pos.copy_(state["mocap_pos"])
        self.episode_length.copy_(state["episode_length"])
        self.episode_steps.copy_(state["episode_steps"])
        self.generator.set_state(state["generator"])
        self.episode_sums.copy_(state["episode_sums"])
        for k, v in self._task_buffers().items():
            v.copy_(state[f"task/{k}"])
        self._refresh()

    def _task_buffers(self) -> dict[str, Tensor]:
        """The task's own mutable tensors (commands, targets, last actions, ...)."""
        return {}

    def render(self, world: int = 0, *, width: int = 320, height: int = 240) -> Any:
        return self.backend.render(world, camera="track", width=width, height=height)

    def close(self) -> None:
        self.backend.close()


@contextmanager
def single_torch_thread() -> Iterator[None]:
    """Run torch ops on the calling thread only, for the env's small per-step tensor work.

    Task tensors are (N, <100); above 32k elements torch would hand an op to its OpenMP workers,
    which sleep (OMP_WAIT_POLICY=PASSIVE) while MuJoCo's threads use the cores, and waking them
    costs ~70 us per op against ~5 us for doing the op alone. Learning code keeps every thread.
    """
    previous = torch.get_num_threads()
    if previous == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def as_slice(index: Tensor) -> slice | Tensor:
    """`index` as a slice when it is a run of consecutive integers, else unchanged."""
    start = int(index[0])
    if torch.equal(index, torch.arange(start, start + len(index))):
        return slice(start, start + len(index))
    return index


def check_reward_names(rewards: dict[str, float], allowed: tuple[str, ...], path: str = "env.rewards") -> None:
    """ConfigError naming an unknown reward term or a non-finite scale."""
    for name, scale in rewards.items():
        if name not in allowed:
            raise ConfigError(f"config error: {path}.{name}: unknown reward term; terms: {', '.join(allowed)}")
        if not math.isfinite(scale):
            raise ConfigError(f"config error: {path}.{name} = {scale!r}: must be a finite number")
