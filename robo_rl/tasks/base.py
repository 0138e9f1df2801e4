"""The VecEnv every task implements: batched torch tensors, auto-reset, per-term reward logging.

A task subclasses `TaskEnv` and fills in a handful of small methods (`_apply_action`,
`_obs_terms`, `_reward_terms`, `_terminated`, `_reset_worlds`, `_episode_metrics`) that call the
pure term functions in `observations.py` / `rewards.py`. The base class owns the physics stepping,
episode bookkeeping, auto-reset with `info["final_obs"]`, logging and the RNG.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from robo_rl.config import ConfigError
from robo_rl.contract import ActionSpec, DeployContract, ObsTerm
from robo_rl.sim.mujoco_cpu import MujocoCpuBackend

REPO_ROOT = Path(__file__).resolve().parents[2]


def resolve_asset(path: str) -> Path:
    """An MJCF path as given, or relative to the repository root (where `envs/` lives)."""
    p = Path(path)
    if p.is_file() or p.is_absolute():
        return p
    return REPO_ROOT / p


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

    def __init__(self, cfg: Any, num_envs: int, *, seed: int = 0, num_threads: int = 0):
        self.cfg = cfg
        self.num_envs = num_envs
        self.device = torch.device("cpu")
        self.backend = MujocoCpuBackend(
            resolve_asset(cfg.model), num_envs, num_threads=num_threads, keyframe=self.keyframe
        )
        self.backend.model.opt.timestep = cfg.physics_dt
        self.dt = cfg.physics_dt * cfg.decimation
        self.max_episode_length = max(1, round(cfg.episode_length_s / self.dt))
        self.generator = torch.Generator().manual_seed(seed)
        self.episode_length = torch.zeros(num_envs, dtype=torch.long)  # (N,) time-out clock, random at start
        self.episode_steps = torch.zeros(num_envs, dtype=torch.long)  # (N,) steps actually taken since reset
        self.episode_sums = torch.zeros(len(self.reward_terms), num_envs)  # (K, N) weighted term sums
        self._reward_weights = torch.tensor([cfg.rewards[n] * self.dt for n in self.reward_terms])[:, None]  # (K, 1)
        self.obs_dims = {
            "policy": sum(t.dim for t in self.policy_terms),
            "critic": sum(t.dim for t in self.policy_terms + self.critic_extra_terms),
        }
        self.action_dim = len(self.joint_names)
        self._resolve_joints()
        self.q = torch.zeros(num_envs, self.action_dim)  # (N, J) float32 joint positions, see _refresh
        self.dq = torch.zeros(num_envs, self.action_dim)  # (N, J) float32 joint velocities

    def _resolve_joints(self) -> None:
        """Joint addresses and PD parameters of `joint_names` (position actuators named like the joints)."""
        b, m = self.backend, self.backend.model
        # Consecutive addresses become slices: a slice of a state view is itself a view (no gather).
        self.q_idx = as_slice(b.joint_qpos_index(self.joint_names))  # (J,)
        self.dq_idx = as_slice(b.joint_qvel_index(self.joint_names))  # (J,)
        self.act_idx = as_slice(b.actuator_index(self.joint_names))  # (J,)
        a = torch.arange(m.nu)[self.act_idx].numpy()
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

    @property
    def joint_pos(self) -> Tensor:
        return self.backend.qpos[:, self.q_idx]  # (N, J) float64

    @property
    def joint_vel(self) -> Tensor:
        return self.backend.qvel[:, self.dq_idx]  # (N, J) float64

    def _set_joint_targets(self, q_target: Tensor, ids: Tensor | None = None) -> None:
        """Write joint position targets (N, J), or (K, J) for worlds `ids`, into the actuators' ctrl."""
        if ids is None:
            self.backend.ctrl[:, self.act_idx] = q_target.to(torch.float64)
        else:
            rows = self.backend.ctrl[ids]  # (K, U)
            rows[:, self.act_idx] = q_target.to(torch.float64)
            self.backend.ctrl[ids] = rows

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

    def _refresh(self) -> None:
        """Cache float32 copies of the state the terms read, once per physics step and after resets.

        Tasks extend this (calling super) for their own derived state (sensor values, distances).
        """
        self.q = self.joint_pos.to(torch.float32)  # (N, J)
        self.dq = self.joint_vel.to(torch.float32)  # (N, J)

    def _post_physics(self) -> None:
        """Update derived quantities after physics (optional)."""

    def _obs_terms(self) -> dict[str, Tensor]:
        """Every observation term by name, each (N, dim), unscaled."""
        raise NotImplementedError

    def _reward_terms(self) -> dict[str, Tensor]:
        """Every reward term by name, each (N,), unscaled."""
        raise NotImplementedError

    def _terminated(self) -> Tensor:
        """(N,) bool: episodes that end by failure (not time-out)."""
        return torch.zeros(self.num_envs, dtype=torch.bool)

    def _reset_worlds(self, ids: Tensor) -> None:
        """Put worlds `ids` (K,) into a new random initial state."""
        raise NotImplementedError

    def _episode_metrics(self, ids: Tensor) -> dict[str, Tensor]:
        """Task metrics (each (K,)) of episodes ending in worlds `ids`, measured before their reset."""
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
        """
        if seed is not None:
            self.generator.manual_seed(seed)
        all_ids = torch.arange(self.num_envs)
        self._reset_ids(all_ids)
        if random_start:
            self.episode_length[:] = torch.randint(
                0, self.max_episode_length, (self.num_envs,), generator=self.generator
            )
        return self.get_observations()

    def step(self, actions: Tensor) -> tuple[dict[str, Tensor], Tensor, Tensor, Tensor, dict[str, Any]]:
        """Apply actions (N, A) for one policy step; ended worlds are reset before returning.

        info holds "final_obs" (observations before any reset, for time-out bootstrapping), "log"
        (means over episodes that ended: per-term reward per second, metrics, lengths) and "episode"
        ({"ids": (K,), <metric>: (K,)} for the worlds that ended, empty if none).
        """
        if actions.shape != (self.num_envs, self.action_dim):
            raise ValueError(f"actions have shape {tuple(actions.shape)}; expected {(self.num_envs, self.action_dim)}")
        actions = actions.detach().to(torch.float32).clamp(-self.cfg.action_clip, self.cfg.action_clip)
        self._apply_action(actions)
        self.backend.step(self.cfg.decimation)
        self._refresh()
        self.episode_length += 1
        self.episode_steps += 1
        self._post_physics()

        terms = self._reward_terms()
        weighted = torch.stack([terms[n] for n in self.reward_terms]) * self._reward_weights  # (K, N)
        reward = weighted.sum(0)  # (N,)
        self.episode_sums += weighted
        terminated = self._terminated()
        truncated = (self.episode_length >= self.max_episode_length) & ~terminated
        obs = self.get_observations()
        info: dict[str, Any] = {"final_obs": obs, "log": {}, "episode": {}}
        ended = (terminated | truncated).nonzero().squeeze(-1)  # (K,)
        if ended.numel() > 0:
            metrics = self._episode_metrics(ended)
            info["episode"] = {"ids": ended, **metrics}
            info["log"] = self._episode_log(ended, terminated, metrics)
            self._reset_ids(ended)
            obs = self.get_observations()
        return obs, reward, terminated, truncated, info

    def get_observations(self) -> dict[str, Tensor]:
        """Observation groups for the current state: "policy" (N, O) and "critic" (N, O_c)."""
        values = self._obs_terms()
        parts = [self._apply_term(t, values[t.name]) for t in self.policy_terms]
        policy = torch.cat(parts, dim=-1)  # (N, O)
        if not self.critic_extra_terms:
            return {"policy": policy, "critic": policy}
        extra = [self._apply_term(t, values[t.name]) for t in self.critic_extra_terms]
        return {"policy": policy, "critic": torch.cat([policy, *extra], dim=-1)}

    # ------------------------------------------------------------------ internals
    @staticmethod
    def _apply_term(term: ObsTerm, value: Tensor) -> Tensor:
        value = value.to(torch.float32)
        if term.scale != 1.0:
            value = value * term.scale
        if term.clip is not None:
            value = value.clamp(-term.clip, term.clip)
        return value

    def _reset_ids(self, ids: Tensor) -> None:
        self.episode_length[ids] = 0
        self.episode_steps[ids] = 0
        self.episode_sums[:, ids] = 0.0
        self._reset_worlds(ids)
        self._refresh()

    def _episode_log(self, ids: Tensor, terminated: Tensor, metrics: dict[str, Tensor]) -> dict[str, float]:
        """Means over the episodes that end now: reward per second of each term, metrics, lengths."""
        seconds = self.episode_steps[ids].to(torch.float32) * self.dt  # (E,)
        columns = torch.cat(
            [
                self.episode_sums[:, ids] / seconds,  # (K, E) reward per second of each term
                torch.stack([v.to(torch.float32) for v in metrics.values()]) if metrics else torch.zeros(0, len(ids)),
                seconds[None],
                terminated[ids].to(torch.float32)[None],
            ]
        )  # (K + M + 2, E)
        names = [f"Episode_Reward/{k}" for k in self.reward_terms] + [f"Metrics/{k}" for k in metrics]
        return dict(zip([*names, "Episode/length_s", "Episode/terminated"], columns.mean(1).tolist(), strict=True))

    def _uniform(self, k: int, low: Tensor | float, high: Tensor | float, dim: int | None = None) -> Tensor:
        """Uniform samples (k,) or (k, dim) in [low, high) from the env generator."""
        shape = (k,) if dim is None else (k, dim)
        return low + (high - low) * torch.rand(shape, generator=self.generator)

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


def as_slice(index: Tensor) -> slice | Tensor:
    """`index` as a slice when it is a run of consecutive integers, else unchanged."""
    start = int(index[0])
    if torch.equal(index, torch.arange(start, start + len(index))):
        return slice(start, start + len(index))
    return index


def check_reward_names(rewards: dict[str, float], allowed: tuple[str, ...], path: str = "env.rewards") -> None:
    """ValueError naming an unknown reward term."""
    for name, scale in rewards.items():
        if name not in allowed:
            raise ConfigError(f"config error: {path}.{name}: unknown reward term; terms: {', '.join(allowed)}")
        if not math.isfinite(scale):
            raise ConfigError(f"config error: {path}.{name} = {scale!r}: must be a finite number")
