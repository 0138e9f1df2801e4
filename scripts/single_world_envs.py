"""Single-world gymnasium equivalents of our tasks, for `bench_sim.py`'s comparison with gymnasium.

Each env does one world's share of the task's work the way a gymnasium MuJoCo env would: one
MjData, `mj_step(nstep=decimation)`, then the task's observations, every reward term, termination,
time-out, command or target resampling and reset distribution, in numpy and Python floats. The
numbers equal our batched TaskEnv's (tests/test_benchmarks.py steps both side by side), so the
benchmark compares the same work. Everything a world needs is read once from the task into a
`TaskSpec` of plain numbers, which pickles into AsyncVectorEnv's worker processes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import mujoco
import numpy as np

from robo_rl.core.assets import find_asset
from robo_rl.tasks.registry import make_env


@dataclass(frozen=True)
class TaskSpec:
    """One task's parameters as numpy arrays and floats (joint order is the task's)."""

    task: str
    cfg: Any  # the task's frozen config dataclass
    model_path: str
    keyframe: str
    dt: float  # policy step (s)
    max_episode_length: int  # policy steps
    q_idx: np.ndarray  # (J,) qpos addresses
    dq_idx: np.ndarray  # (J,) qvel addresses
    act_idx: np.ndarray  # (J,) actuator ids
    default_q: np.ndarray  # (J,)
    kp: np.ndarray  # (J,)
    kd: np.ndarray  # (J,)
    torque_limit: np.ndarray  # (J,)
    ctrl_low: np.ndarray  # (J,)
    ctrl_high: np.ndarray  # (J,)
    reward_weights: np.ndarray  # (K,) scale * dt of each term, in the task's term order
    sensors: dict[str, np.ndarray]  # sensor name -> sensordata addresses


def task_spec(task: str) -> TaskSpec:
    """Read a task's parameters from a one-world TaskEnv."""
    env = make_env(task, 1)
    b, cfg = env.backend, env.cfg

    def idx(x: Any) -> np.ndarray:
        return np.arange(x.start, x.stop) if isinstance(x, slice) else np.asarray(x)

    sensors = {name: idx(b.sensor_slice(name)) for name in b.names("sensor")}
    spec = TaskSpec(
        task=task,
        cfg=cfg,
        model_path=str(find_asset(cfg.model)),
        keyframe=env.keyframe,
        dt=env.dt,
        max_episode_length=env.max_episode_length,
        q_idx=idx(env.q_idx),
        dq_idx=idx(env.dq_idx),
        act_idx=idx(env.act_idx),
        default_q=env.default_joint_pos.double().numpy(),
        kp=env.kp.double().numpy(),
        kd=env.kd.double().numpy(),
        torque_limit=env.torque_limit.double().numpy(),
        ctrl_low=env.ctrl_low.double().numpy(),
        ctrl_high=env.ctrl_high.double().numpy(),
        reward_weights=np.array([cfg.rewards[n] * env.dt for n in env.reward_terms]),
        sensors=sensors,
    )
    env.close()
    return spec


class _SingleWorldEnv(gym.Env):
    """One MjData stepped with mj_step; subclasses add the task."""

    def __init__(self, spec: TaskSpec):
        self.spec_ = spec  # gym.Env.spec is gymnasium's registration record
        self.cfg = spec.cfg
        self.model = mujoco.MjModel.from_xml_path(spec.model_path)
        self.model.opt.timestep = spec.cfg.physics_dt
        self.data = mujoco.MjData(self.model)
        key = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_KEY, spec.keyframe)
        mujoco.mj_resetDataKeyframe(self.model, self.data, key)
        self.init_qpos = self.data.qpos.copy()
        self.init_qvel = self.data.qvel.copy()
        self.init_ctrl = self.data.ctrl.copy()
        j = len(spec.q_idx)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (j,), np.float32)
        self.action = np.zeros(j)  # (J,) the last raw action (clipped)
        self.prev_action = np.zeros(j)
        self.t = 0
        self.episode_sums = np.zeros(len(spec.reward_weights))  # (K,) weighted term sums

    def _step_physics(self, action: np.ndarray) -> np.ndarray:
        """Clip, remember and apply a raw action; returns the joint targets (J,)."""
        s = self.spec_
        self.prev_action[:] = self.action
        self.action[:] = action
        self.action.clip(-self.cfg.action_clip, self.cfg.action_clip, out=self.action)
        q_target = s.default_q + self.cfg.action_scale * self.action
        self.data.ctrl[s.act_idx] = q_target
        mujoco.mj_step(self.model, self.data, nstep=self.cfg.decimation)
        self.t += 1
        return q_target

    def _reward(self, terms: list[float]) -> float:
        weighted = self.spec_.reward_weights * terms
        self.episode_sums += weighted
        return float(weighted.sum())

    def _start(self, qpos: np.ndarray, qvel: np.ndarray, q: np.ndarray) -> None:
        """Begin an episode at qpos/qvel with the joint targets holding joints q (J,)."""
        d = self.data
        d.time = 0.0
        d.qpos[:], d.qvel[:] = qpos, qvel
        d.ctrl[:] = self.init_ctrl
        d.ctrl[self.spec_.act_idx] = q
        mujoco.mj_forward(self.model, d)
        self.action[:] = 0.0
        self.prev_action[:] = 0.0
        self.t = 0
        self.episode_sums[:] = 0.0


class QuadrupedWalkSingle(_SingleWorldEnv):
    """quadruped-walk-flat for one world (QuadrupedWalkEnv's terms, in the same order and units)."""

    def __init__(self, spec: TaskSpec):
        super().__init__(spec)
        j = len(spec.q_idx)
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (3 + 3 + 3 + 3 * j + 3,), np.float32)
        self.feet_touch_idx = np.array([spec.sensors[f"{leg}_foot_touch"][0] for leg in ("FL", "FR", "RL", "RR")])
        self.command = np.zeros(3)
        self.command_time = 0.0
        self.prev_dq = np.zeros(j)
        self.air_time = np.zeros(4)
        self.lin_vel_error_sum = 0.0
        self._inv_quat = np.zeros(4)
        self.lin_vel_b = np.zeros(3)
        self.gravity_b = np.zeros(3)
        self._down = np.array([0.0, 0.0, -1.0])

    def _base_frame(self) -> None:
        """Base-frame linear velocity and gravity direction from the free joint.

        MuJoCo's quaternion functions, not robo_rl.deploy's numpy terms: those use np.cross, ~30x
        slower on one state, and the baseline should be as fast as a gymnasium env can reasonably be.
        """
        d = self.data
        mujoco.mju_negQuat(self._inv_quat, d.qpos[3:7])
        mujoco.mju_rotVecQuat(self.lin_vel_b, d.qvel[0:3], self._inv_quat)
        mujoco.mju_rotVecQuat(self.gravity_b, self._down, self._inv_quat)

    def _obs(self) -> np.ndarray:
        """The critic's observation (policy terms, then base_lin_vel) (O_c,) float32."""
        s, d = self.spec_, self.data
        q_rel = d.qpos[s.q_idx] - s.default_q
        parts = (d.qvel[3:6], self.gravity_b, self.command, q_rel, d.qvel[s.dq_idx], self.action, self.lin_vel_b)
        return np.concatenate(parts).astype(np.float32)

    def _resample_command(self) -> None:
        c = self.cfg
        r = self.np_random.random(4)
        lows = (c.lin_vel_x[0], c.lin_vel_y[0], c.ang_vel_z[0])
        highs = (c.lin_vel_x[1], c.lin_vel_y[1], c.ang_vel_z[1])
        if r[3] < c.standing_fraction:
            self.command[:] = 0.0
        else:
            self.command[:] = [lo + x * (hi - lo) for lo, hi, x in zip(lows, highs, r[:3], strict=True)]
        self.command_time = c.command_resample_s

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        s, j = self.spec_, len(self.spec_.q_idx)
        r = self.np_random.random(1 + j + 6)  # yaw, joint scales, base velocity: the task's distribution
        yaw = -math.pi + 2 * math.pi * r[0]
        q = np.clip(s.default_q * (0.5 + r[1 : 1 + j]), s.ctrl_low, s.ctrl_high)
        vel_b = -0.3 + 0.6 * r[1 + j :]
        qpos, qvel = self.init_qpos.copy(), np.zeros_like(self.init_qvel)
        qpos[3:7] = (math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2))
        qpos[s.q_idx] = q
        mujoco.mju_rotVecQuat(qvel[0:3], vel_b[:3], qpos[3:7])
        qvel[3:6] = vel_b[3:]
        self._start(qpos, qvel, q)
        self.prev_dq[:] = 0.0
        self.air_time[:] = 0.0
        self.lin_vel_error_sum = 0.0
        self._resample_command()
        self._base_frame()
        return self._obs(), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        s, c, d, dt = self.spec_, self.cfg, self.data, self.spec_.dt
        self.prev_dq[:] = d.qvel[s.dq_idx]
        q_target = self._step_physics(action)
        self._base_frame()
        q, dq, w = d.qpos[s.q_idx], d.qvel[s.dq_idx], d.qvel[3:6]
        v, g, cmd = self.lin_vel_b, self.gravity_b, self.command

        contact = d.sensordata[self.feet_touch_idx] > c.foot_contact_force  # (4,)
        first_contact = (self.air_time > 0) & contact
        air_at_touchdown = self.air_time * first_contact
        self.air_time += dt
        self.air_time[contact] = 0.0
        ex, ey, ez = cmd[0] - v[0], cmd[1] - v[1], cmd[2] - w[2]  # the command acted on, before resampling
        moving = math.hypot(cmd[0], cmd[1]) > 0.1
        self.lin_vel_error_sum += math.hypot(ex, ey)
        self.command_time -= dt
        if self.command_time <= 0:
            self._resample_command()

        torque = (s.kp * (q_target - q) - s.kd * dq).clip(-s.torque_limit, s.torque_limit)
        dv = dq - self.prev_dq
        rate = self.action - self.prev_action
        inv_sigma2 = 1.0 / c.tracking_sigma**2
        air = float(((air_at_touchdown - c.feet_air_time_threshold) * first_contact).sum()) if moving else 0.0
        reward = self._reward([
            math.exp(-(ex * ex + ey * ey) * inv_sigma2),  # track_lin_vel_xy
            math.exp(-ez * ez * inv_sigma2),  # track_ang_vel_z
            v[2] * v[2],  # lin_vel_z
            w[0] * w[0] + w[1] * w[1],  # ang_vel_xy
            g[0] * g[0] + g[1] * g[1],  # flat_orientation
            float(torque @ torque),  # joint_torques
            float(dv @ dv) / dt**2,  # joint_acc
            float(rate @ rate),  # action_rate
            air,  # feet_air_time
        ])
        terminated = bool(d.qpos[2] < c.min_base_height or g[2] > -c.max_tilt_cos)
        truncated = self.t >= s.max_episode_length and not terminated
        info = {}
        if terminated or truncated:
            info["lin_vel_error"] = self.lin_vel_error_sum / self.t
        return self._obs(), reward, terminated, truncated, info


class ArmReachSingle(_SingleWorldEnv):
    """arm-reach for one world (ArmReachEnv's terms, in the same order and units)."""

    def __init__(self, spec: TaskSpec):
        super().__init__(spec)
        j = len(spec.q_idx)
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (3 * j + 6,), np.float32)
        self.ee_idx = spec.sensors["ee_pos"]
        self.target = np.zeros(3)  # world frame; the base sits at the origin

    def _obs(self) -> np.ndarray:
        s, d = self.spec_, self.data
        parts = (d.qpos[s.q_idx] - s.default_q, d.qvel[s.dq_idx], d.sensordata[self.ee_idx], self.target, self.action)
        return np.concatenate(parts).astype(np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        s, c, j = self.spec_, self.cfg, len(self.spec_.q_idx)
        r = self.np_random.random(j + 3)  # joint noise, target: the task's distribution
        noise = c.init_joint_noise
        q = np.clip(s.default_q - noise + 2 * noise * r[:j], s.ctrl_low, s.ctrl_high)
        low, high = np.array(c.target_low), np.array(c.target_high)
        self.target[:] = low + (high - low) * r[j:]
        self.data.mocap_pos[0] = self.target
        qpos = self.data.qpos.copy()
        qpos[s.q_idx] = q
        self._start(qpos, self.init_qvel, q)
        return self._obs(), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        s, c, d = self.spec_, self.cfg, self.data
        self._step_physics(action)
        dist = float(np.linalg.norm(d.sensordata[self.ee_idx] - self.target))
        dq = d.qvel[s.dq_idx]
        rate = self.action - self.prev_action
        reward = self._reward([dist, 1.0 - math.tanh(dist / c.tanh_std), float(rate @ rate), float(dq @ dq)])
        truncated = self.t >= s.max_episode_length
        info = {"ee_distance_final": dist, "success": dist < c.success_distance} if truncated else {}
        return self._obs(), reward, False, truncated, info


SINGLE_WORLD_ENVS = {"quadruped-walk-flat": QuadrupedWalkSingle, "arm-reach": ArmReachSingle}


def make_single(spec: TaskSpec) -> _SingleWorldEnv:
    return SINGLE_WORLD_ENVS[spec.task](spec)
