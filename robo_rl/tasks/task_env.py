"""The VecEnv every task implements: batched torch tensors, auto-reset, per-term reward logging.

A task subclasses `TaskEnv`, lists its observation terms (`policy_terms`, `critic_extra_terms`) and action
terms (`_action_term_specs`) from the term registry (`robo_rl.terms`), and fills in a handful of small methods
(`_obs_sources`, `_reward_terms`, `_terminated`, `_reset_worlds`, `_episode_metrics`) that call the pure
functions in `rewards.py`. The base class composes the observation manager (terms, noise, history, groups) and
the action manager (terms, layout, targets) and owns the physics stepping, episode bookkeeping, auto-reset with
`info["final_obs"]`, logging and the RNG. Worlds can start in groups from shared initial states
(`env.reset_group_size`, `robo_rl.tasks.reset_groups`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import torch
from torch import Tensor

from robo_rl.core.config import ConfigError
from robo_rl.core.contract import ActionSpec, ActionTermSpec, DeployContract, ObsTerm
from robo_rl.core.instructions import InstructionSet
from robo_rl.sim.backend import PhysicsBackend, make_backend
from robo_rl.tasks import events
from robo_rl.tasks.action_manager import ActionManager, as_slice
from robo_rl.tasks.events import DomainRandConfig
from robo_rl.tasks.mjcf import load_mjcf
from robo_rl.tasks.observation_manager import ObservationManager, with_history
from robo_rl.tasks.randomization import DomainRandomization
from robo_rl.tasks.reset_groups import ResetGroups
from robo_rl.tasks.setpoint_path import SetpointPath
from robo_rl.terms import TermContext
from robo_rl.terms.joint_position_offset import joint_position_offset_spec


class TaskEnv(DomainRandomization, ResetGroups):
    """Base VecEnv over a batched physics backend.

    Args:
        cfg: the task's frozen config dataclass.
        num_envs: number of worlds N.
        seed: seed of the environment's own torch generator (resets, commands, noise).
        num_threads: physics worker threads (0: one per core).
        backend: physics backend name (`robo_rl.sim.backend.BACKENDS`).
        device: where the backend keeps state and steps ("cpu"; "cuda:N" with mujoco_warp).
        nconmax, njmax: contacts and constraint rows per world for backends with fixed buffers
            (mujoco_warp); None takes the task's `buffer_sizes`.
    """

    description = ""
    """One line for `robo-rl tasks`."""
    reward_terms: tuple[str, ...] = ()
    """Names of the reward terms this task computes (keys allowed in `cfg.rewards`)."""
    policy_terms: tuple[ObsTerm, ...] = ()
    critic_extra_terms: tuple[ObsTerm, ...] = ()
    """Privileged terms appended to the policy terms for the critic."""
    keyframe: str | None = None
    base_joint: str | None = None
    """Name of the free joint of a floating-base robot (pushes act on it); None for fixed-base robots."""
    camera: str | None = None
    """Camera rendered into the "image" observation group at `cfg.image_size` pixels square when `cfg.images` is
    true (None: no images; a task with a camera has both fields in its config)."""
    instruction_set: InstructionSet | None = None
    """Task instructions (`robo_rl.core.instructions`); when set, the "text" group is each world's instruction index
    (`self.instruction`, (N,) long, into `instructions`) and the contract carries the set."""
    defer_images = False
    """While true, `step` renders the "image" group only for the worlds whose episode ends in it (their final
    observation) and repeats the last rendered image for the others: `robo_rl.adapters.chunked` sets it for the steps
    inside an action chunk, whose observations no policy reads (rendering is most of a vision task's step)."""
    start_grid_s = 0.2
    """Random episode starts (training) lie on this grid (s); see `reset`."""
    buffer_sizes: dict[str, int] = {}
    """Contacts ("nconmax") and constraint rows ("njmax") per world that the task needs on backends with
    fixed buffers (mujoco_warp); missing keys take the backend's default for the model."""

    def __init__(self, cfg: Any, num_envs: int, *, seed: int = 0, num_threads: int = 0,
                 backend: str = "mujoco_cpu", device: str = "cpu", nconmax: int | None = None,
                 njmax: int | None = None):
        self.cfg = cfg
        self.num_envs = num_envs
        self._setup_reset_groups()
        model = self._load_model(cfg)
        model.opt.timestep = cfg.physics_dt  # before the backend reads the model's options
        self.backend: PhysicsBackend = make_backend(
            backend, model, num_envs, num_threads=num_threads, keyframe=self.keyframe, device=device,
            nconmax=nconmax or self.buffer_sizes.get("nconmax"), njmax=njmax or self.buffer_sizes.get("njmax"),
        )
        self.device = self.backend.device
        self.dt = cfg.physics_dt * cfg.decimation
        self.max_episode_length = episode_steps(cfg)
        self.start_stride = min(self.max_episode_length, max(1, round(self.start_grid_s / self.dt)))  # steps
        # On the state's device, like every tensor of the env: construct it under `torch.device(device)`
        # (`make_env` does); on the CPU this is the same generator, so both backends draw the same states.
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        self._clocks = torch.zeros(2, num_envs, dtype=torch.long)  # (2, N) both episode clocks, one add per step
        self.episode_length = self._clocks[0]  # (N,) time-out clock, random at start
        self.episode_steps = self._clocks[1]  # (N,) steps actually taken since reset
        self.episode_sums = torch.zeros(len(self.reward_terms), num_envs)  # (K, N) weighted term sums
        self._reward_weights = torch.tensor([cfg.rewards[n] * self.dt for n in self.reward_terms])[:, None]  # (K, 1)
        self.policy_terms = with_history(self.policy_terms, getattr(cfg, "obs_history", {}))
        self.rand: DomainRandConfig = getattr(cfg, "randomization", None) or DomainRandConfig()
        self._resolve_joints()
        self._setpoints = self._setpoint_path(cfg, num_envs)
        self._tick_target: Tensor | None = None  # (N, J) the targets of this step, played through `_setpoints`
        self._build_action_terms()
        self.observations = ObservationManager(
            self.policy_terms, self.critic_extra_terms, num_envs=num_envs, noise=self.rand.obs_noise,
            generator=self.generator, context=TermContext(num_joints=len(self.joint_names), action_dim=self.action_dim),
        )
        self.obs_dims = self.observations.dims
        self._last_image: Tensor | None = None  # (N, 3, S, S) the "image" group rendered last (`defer_images`)
        self.action = torch.zeros(num_envs, self.action_dim)  # (N, A) the policy's latest (clipped) action
        self.prev_action = torch.zeros(num_envs, self.action_dim)  # (N, A) the one before it
        # Float32 copies of the physics state and sensors, refreshed in place; the named parts are views.
        b = self.backend
        self._state32 = torch.zeros(num_envs, b.nstate)  # (N, S)
        self.sensors32 = torch.zeros(num_envs, b.model.nsensordata)  # (N, D)
        self.qpos32 = self._state32[:, b.slices["qpos"]]  # (N, nq)
        self.qvel32 = self._state32[:, b.slices["qvel"]]  # (N, nv)
        self._joint_views = isinstance(self.q_idx, slice) and isinstance(self.dq_idx, slice)
        self.q = self.qpos32[:, self.q_idx]  # (N, J) a view when the joints' addresses are consecutive
        self.dq = self.qvel32[:, self.dq_idx]  # (N, J)
        self._setup_randomization()
        self._refresh_state()

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
        self._kp_nominal = self.kp.to(torch.float64)  # (J,)
        self._kd_nominal = self.kd.to(torch.float64)
        self._torque_limit_nominal = self.torque_limit.to(torch.float64)
        actadr = m.actuator_actadr[a]  # (J,) -1 for actuators without dynamics
        act0 = b.slices["act"].start
        self._lag_columns = torch.tensor(act0 + actadr) if (actadr >= 0).all() and m.na else None  # (J,)
        self._base_dof = int(m.jnt_dofadr[b.name_id("joint", self.base_joint)]) if self.base_joint else 0
        self.ctrl_low = torch.tensor(m.actuator_ctrlrange[a, 0], dtype=torch.float32)
        self.ctrl_high = torch.tensor(m.actuator_ctrlrange[a, 1], dtype=torch.float32)
        init_qpos = b.init_state[b.slices["qpos"]]
        self.default_joint_pos = init_qpos[self.q_idx].to(torch.float32)  # (J,)
        # The contract carries the model's own float64 numbers (not their float32 copies above).
        self._contract_joints = {
            "default_joint_pos": tuple(init_qpos[self.q_idx].tolist()),
            "kp": tuple(m.actuator_gainprm[a, 0].tolist()),
            "kd": tuple((-m.actuator_biasprm[a, 2]).tolist()),
            "torque_limits": tuple(m.actuator_forcerange[a, 1].tolist()),
        }

    def _setpoint_path(self, cfg: Any, num_envs: int) -> SetpointPath | None:
        """The robot's setpoint stream of `cfg.setpoint_controller` (None without one)."""
        hardware = getattr(cfg, "setpoint_controller", "")
        if not hardware:
            return None
        lead = (self._kd_nominal / self._kp_nominal).numpy()  # (J,)
        return SetpointPath(hardware, tuple(self.joint_names), physics_dt=cfg.physics_dt, decimation=cfg.decimation,
                            lead=lead, default_q=self._contract_joints["default_joint_pos"], num_envs=num_envs)

    def _load_model(self, cfg: Any) -> Any:
        """The MjModel the backend will own (a task overrides this to edit the model, e.g. fill terrain)."""
        return load_mjcf(cfg.model, motor_lag_s=getattr(cfg, "motor_lag_s", 0.0), lag_actuators=self.joint_names)

    def _action_term_specs(self) -> tuple[ActionTermSpec, ...]:
        """The task's action terms in raw-action column order; called once, after the joints are resolved.

        Default: joint-position offsets of every joint, q* = default + cfg.action_scale * a.
        """
        return (joint_position_offset_spec(self.joint_names, self.cfg.action_scale),)

    def _build_action_terms(self) -> None:
        """The action manager of `_action_term_specs` (ConfigError for malformed terms); sets action_dim."""
        self.action_specs = self._action_term_specs()
        self.actions = ActionManager(self.action_specs, tuple(self.joint_names), self.default_joint_pos,
                                     self._act_columns)
        self.action_terms = self.actions.terms
        self.action_dim = self.actions.dim

    def _action_targets(self, action: Tensor) -> Tensor:
        """Joint position targets (N, J) of clipped raw actions (N, A): each term maps its own columns."""
        return self.actions.targets(action, self.q, self.backend.ctrl)

    def joint_targets(self, actions: Tensor) -> Tensor:
        """(N, J) joint position targets that raw actions (N, A) would set now (clipped as `step` clips them,
        before any action latency): what a robot is commanded, for recording and replay."""
        with device_scope(self.device):
            return self._action_targets(actions.to(self.device, torch.float32).clamp(-self.action_clip,
                                                                                     self.action_clip))

    @classmethod
    def action_dim_of(cls, cfg: Any) -> int:
        """Raw action columns A of the task with config `cfg`, without building it (for `robo-rl tasks`)."""
        return len(cls.joint_names)

    def _set_joint_targets(self, q_target: Tensor, ids: Tensor | None = None) -> None:
        """Write joint position targets (N, J), or (K, J) for worlds `ids`, into the actuators' ctrl.

        With a setpoint controller (cfg.setpoint_controller) the step's targets (N, J) are kept for `_step_physics`,
        which plays them as setpoints; a reset's (K, J) are written and restart the setpoint stream there."""
        ctrl = self.backend.ctrl
        if self._setpoints is not None:
            if ids is None:
                self._tick_target = q_target
                return
            self._setpoints.restart(ids, q_target)
        if ids is not None:
            ctrl[ids[:, None], self._act_columns] = q_target.to(ctrl.dtype)
        elif isinstance(self.act_idx, slice):
            ctrl[:, self.act_idx] = q_target  # a view: the copy converts to float64
        else:
            ctrl[:, self.act_idx] = q_target.to(ctrl.dtype)

    def _make_contract(self, robot: str, extra: dict[str, Any]) -> DeployContract:
        return DeployContract(
            robot=robot,
            joint_names=tuple(self.joint_names),
            **self._contract_joints,
            action=ActionSpec(terms=self.action_specs, clip=self.cfg.action_clip),
            observation=tuple(self.policy_terms),
            policy_dt=self.dt,
            physics_dt=self.cfg.physics_dt,
            quaternion_order="wxyz",
            extra=extra if self._setpoints is None else {**extra, "setpoint_rate_hz": self._setpoints.rate_hz},
        )

    # ------------------------------------------------------------------ to implement per task
    joint_names: tuple[str, ...] = ()

    def _apply_action(self, action: Tensor) -> None:
        """Write actuator targets for the raw actions (N, A) applied this step (after any latency) into ctrl."""
        self._set_joint_targets(self._action_targets(action))

    def _step_physics(self) -> None:
        """One policy step of physics: `decimation` substeps with the targets in ctrl, or, with a setpoint controller,
        each substep with the setpoint the robot plays then (`SetpointPath`)."""
        if self._setpoints is None or self._tick_target is None:
            self.backend.step(self.cfg.decimation)
            return
        ctrl = self.backend.ctrl
        for target in self._setpoints.substep_targets(self._tick_target):  # (N, J) float64 each
            ctrl[:, self._act_columns] = target.to(ctrl.device, ctrl.dtype)
            self.backend.step(1)

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

    def _obs_sources(self) -> dict[str, Tensor]:
        """The sources the observation terms read (`robo_rl.terms.SOURCES`), batched (N, ...), float32 views.

        The base class gives the joints and the previous action; tasks add theirs (calling super).
        """
        return {"joint_pos": self.q, "joint_vel": self.dq, "default_joint_pos": self.default_joint_pos,
                "action": self.action}

    def _reward_terms(self) -> dict[str, Tensor]:
        """Every reward term by name, each (N,), unscaled."""
        raise NotImplementedError

    def _terminated(self) -> Tensor | None:
        """(N,) bool: episodes that end by failure (not time-out); None for a task that never fails."""
        return None

    def _reset_worlds(self, ids: Tensor) -> None:
        """Put worlds `ids` (K,) into a new random initial state.

        In grouped envs (`env.reset_group_size` > 1) it runs for each group's first world only and the others copy
        the result (`robo_rl.tasks.reset_groups`): what it sets must live in the physics state's qpos and qvel, the
        actuator targets, the mocap poses or the task's buffers (`_task_buffers`).
        """
        raise NotImplementedError

    def _episode_metrics(self, ids: Tensor) -> dict[str, Tensor]:
        """Task metrics (each (K,) float32) of episodes ending in worlds `ids`, measured before their reset."""
        return {}

    @property
    def action_clip(self) -> float:
        """Raw actions are clipped to +-this before the action terms see them (the contract's action.clip)."""
        return self.cfg.action_clip

    @property
    def instructions(self) -> tuple[str, ...]:
        """The texts the "text" group indexes (`instruction_set.texts`); () for a task without instructions."""
        return self.instruction_set.texts if self.instruction_set is not None else ()

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
        more steps/s). Failures (`_terminated`) still reset on the step they happen. The worlds of a group
        (`env.reset_group_size`) share their random start.
        """
        if seed is not None:
            self.generator.manual_seed(seed)
        with single_torch_thread(), device_scope(self.device):
            self._reset_ids(torch.arange(self.num_envs))
            if random_start:
                slots = -(-self.max_episode_length // self.start_stride)  # ceil
                m = self.reset_group_size
                start = torch.randint(0, slots, (self.num_envs // m,), generator=self.generator).repeat_interleave(m)
                self.episode_length[:] = start * self.start_stride
            return self._observe(fill_ids=torch.arange(self.num_envs))[0]

    def step(self, actions: Tensor) -> tuple[dict[str, Tensor], Tensor, Tensor, Tensor, dict[str, Any]]:
        with single_torch_thread(), device_scope(self.device):  # tensors made in a step live with the state
            return self._step(actions)

    def _step(self, actions: Tensor) -> tuple[dict[str, Tensor], Tensor, Tensor, Tensor, dict[str, Any]]:
        """Apply actions (N, A) for one policy step; ended worlds are reset before returning.

        info holds "final_obs" (observations before any reset, for time-out bootstrapping), "log"
        (means over episodes that ended: per-term reward per second, metrics, lengths) and "episode"
        ({"ids": (K,), <metric>: (K,)} for the worlds that ended, empty if none).
        """
        if actions.shape != (self.num_envs, self.action_dim):
            raise ValueError(f"actions have shape {tuple(actions.shape)}; expected {(self.num_envs, self.action_dim)}")
        if actions.dtype != torch.float32 or actions.device != self.device:
            actions = actions.to(self.device, torch.float32)
        if actions.requires_grad:
            actions = actions.detach()
        actions = actions.clamp(-self.cfg.action_clip, self.cfg.action_clip)
        # What the policy sent: its `last_action` observation and the action-rate cost, as on the robot,
        # where the deploy side knows its own outputs, not when the motors received them.
        self.prev_action.copy_(self.action)
        self.action.copy_(actions)
        if self._action_queue is not None:  # action latency: apply what the policy sent delay steps ago
            actions = events.delayed_actions(self._action_queue, actions, self.action_delay)
        if self._pushes:
            self._interval_events()
        self._apply_action(actions)
        self._step_physics()
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
        if self.defer_images and self._last_image is not None:
            obs, current = self._observe(render_ids=done.nonzero().squeeze(-1), previous={"image": self._last_image})
        else:
            obs, current = self._observe()
        self.observations.push_history(current)
        info: dict[str, Any] = {"final_obs": obs, "log": {}, "episode": {}}
        ended = done.nonzero().squeeze(-1)  # (K,)
        if ended.numel() > 0:
            metrics = self._episode_metrics(ended)
            info["episode"] = {"ids": ended, **metrics}
            info["log"] = {**self._episode_log(ended, terminated, metrics), **self._dr_log}
            self._reset_ids(ended)
            obs, _ = self._observe(fill_ids=ended, previous=obs)
        return obs, reward, terminated, truncated, info

    def reset_worlds(self, ids: Tensor, obs: dict[str, Tensor]) -> dict[str, Tensor]:
        """Start new episodes in worlds `ids` (K,) now; returns `obs` (the current groups) with their rows renewed.

        The other worlds keep their rows as they are, noise draws included (their histories hold those).
        `robo_rl.adapters.chunked` uses it for worlds whose episode ended in the middle of an action chunk.
        """
        with single_torch_thread(), device_scope(self.device):
            self._reset_ids(ids)
            new, _ = self._observe(fill_ids=ids, previous=obs)
            if not self.observations.policy_is_view:  # noisy or stacked policy terms: keep the other worlds' draws
                keep = torch.ones(self.num_envs, dtype=torch.bool)
                keep[ids] = False
                new["policy"][keep] = obs["policy"][keep]
            return new

    def get_observations(self) -> dict[str, Tensor]:
        """Observation groups for the current state: "policy" (N, O) and "critic" (N, O_c).

        The critic's terms start with the policy's current values: without observation noise and
        history both come from one concatenation and "policy" is a view of the critic's first O
        columns. With them, "policy" stacks each term's last `history` values (oldest first, noise
        included) and the critic sees the clean current values.
        """
        with device_scope(self.device):
            return self._observe()[0]

    def _observe(
        self, fill_ids: Tensor | None = None, previous: dict[str, Tensor] | None = None,
        render_ids: Tensor | None = None,
    ) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        """(observation groups, current policy term values with noise) for the current state.

        fill_ids: worlds just reset, whose history is filled with their current values first.
        previous: the groups computed before those resets; only the reset worlds' camera images are
            rendered again (rendering costs far more than the rest of a step).
        render_ids: the worlds whose images are rendered again, when not `fill_ids` (`defer_images`).
        """
        policy, critic, current = self.observations.observe(self._obs_sources(), fill_ids)
        render = fill_ids if render_ids is None else render_ids
        return {"policy": policy, "critic": critic, **self._extra_groups(render, previous)}, current

    def _extra_groups(self, fill_ids: Tensor | None, previous: dict[str, Tensor] | None) -> dict[str, Tensor]:
        """The "image" group (N, 3, H, W) uint8 of the task's camera and the "text" group (N,) instruction index."""
        out: dict[str, Tensor] = {}
        if self.camera is not None and self.cfg.images:
            size = self.cfg.image_size
            if previous is not None and fill_ids is not None:
                image = previous["image"].clone()
                if fill_ids.numel():
                    image[fill_ids] = self.backend.render_cameras(self.camera, size, size, ids=fill_ids)
            else:
                image = self.backend.render_cameras(self.camera, size, size).clone()
            out["image"] = self._last_image = image
        if self.instructions:
            out["text"] = self.instruction.clone()  # (N,) long: index into `instructions`
        return out

    # ------------------------------------------------------------------ internals
    def _reset_ids(self, ids: Tensor) -> None:
        self._clocks.index_fill_(1, ids, 0)
        self.episode_sums.index_fill_(1, ids, 0.0)
        if self.reset_group_size > 1:
            self._reset_grouped(ids)
        else:
            self._reset_events(ids)
            self._reset_worlds(ids)
        if self._lag_columns is not None:  # lagged motors start at their reset targets, not at zero
            b = self.backend
            b.state[ids[:, None], self._lag_columns] = b.ctrl[ids[:, None], self._act_columns]
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
            "action_delay": self.action_delay.clone(),
            "push_timer": self._push_timer.clone(),
        }
        if self._action_queue is not None:
            out["action_queue"] = self._action_queue.clone()
        if self._setpoints is not None:
            out["setpoints"] = self._setpoints.state()
        out.update(self.observations.state_dict())
        out.update({f"randomization/{k}": v.clone() for k, v in self.randomization.items()})
        out.update({f"task/{k}": v.clone() for k, v in self._task_buffers().items()})
        out.update(self._group_state_dict())
        return out

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        with device_scope(self.device):
            self._load_state_dict(state)

    def _load_state_dict(self, state: dict[str, Tensor]) -> None:
        self.backend.state.copy_(state["physics_state"])
        self.backend.ctrl.copy_(state["ctrl"])
        self.backend.sensordata.copy_(state["sensordata"])
        self.backend.mocap_pos.copy_(state["mocap_pos"])
        self.episode_length.copy_(state["episode_length"])
        self.episode_steps.copy_(state["episode_steps"])
        self.generator.set_state(state["generator"])
        self.episode_sums.copy_(state["episode_sums"])
        self.action_delay.copy_(state["action_delay"])
        self._push_timer.copy_(state["push_timer"])
        if self._action_queue is not None:
            self._action_queue.copy_(state["action_queue"])
        if self._setpoints is not None:
            self._setpoints.load_state(state["setpoints"])
        self.observations.load_state_dict(state)
        for k, v in self.randomization.items():
            v.copy_(state[f"randomization/{k}"])
        if self.randomization:
            self._write_physics(torch.arange(self.num_envs))
        for k, v in self._task_buffers().items():
            v.copy_(state[f"task/{k}"])
        self._load_group_state_dict(state)
        self._refresh()

    def _task_buffers(self) -> dict[str, Tensor]:
        """The task's own mutable tensors (commands, targets, last actions, ...)."""
        return {}

    def render(self, world: int = 0, *, width: int = 320, height: int = 240) -> Any:
        return self.backend.render(world, camera="track", width=width, height=height)

    def close(self) -> None:
        self.backend.close()


def episode_steps(cfg: Any) -> int:
    """Policy steps of an episode to its time-out (`max_episode_length`): env.episode_length_s / (physics_dt x
    decimation), rounded, at least 1."""
    return max(1, round(cfg.episode_length_s / (cfg.physics_dt * cfg.decimation)))


_NO_SCOPE = nullcontext()


def device_scope(device: torch.device | str) -> Any:
    """`torch.device(device)` as the default device of the tensors made inside, for a GPU env; nothing on the CPU.

    The scope is a TorchFunctionMode that runs Python on every torch call: on the CPU, where it would
    change nothing, it cost ~4 % of a quadruped-walk-flat step (256 worlds, measured).
    """
    return _NO_SCOPE if torch.device(device).type == "cpu" else torch.device(device)


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


def check_reward_names(rewards: dict[str, float], allowed: tuple[str, ...], path: str = "env.rewards") -> None:
    """ConfigError naming an unknown reward term or a non-finite scale."""
    for name, scale in rewards.items():
        if name not in allowed:
            raise ConfigError(f"config error: {path}.{name}: unknown reward term; terms: {', '.join(allowed)}")
        if not math.isfinite(scale):
            raise ConfigError(f"config error: {path}.{name} = {scale!r}: must be a finite number")
