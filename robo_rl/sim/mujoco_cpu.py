"""Batched MuJoCo on CPU threads: N worlds of one model stepped by `mujoco.rollout`.

The physics state of all worlds lives in one float64 array `(N, nstate)` (MuJoCo's
`mjSTATE_FULLPHYSICS` layout: time, qpos, qvel, act, history, plugin state). `qpos`, `qvel`,
`act` are torch views into it and
`ctrl` / `sensordata` are torch views of their own arrays, so reading state costs no copy.

`step(n)` advances every world by n physics steps in one native call on a persistent thread
pool; no Python runs per world. Sensors: `mujoco.rollout` records the sensor values computed at
the start of the last physics step (mj_step evaluates sensors before integrating), so sensordata
lags the state by one physics step. Tasks therefore compute policy observations from the state
itself and use sensors for rewards and metrics, where a lag of one physics step does not matter.
Worlds that are reset get their sensors recomputed for the new state (`mj_forward`).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from robo_rl.sim.mjmodel import FULL_PHYSICS as _FULL  # first: picks a headless MUJOCO_GL, then imports mujoco
from robo_rl.sim.mjmodel import ModelNames, default_state, load_model, mujoco, state_slices
from robo_rl.sim.mjmodel import as_numpy as _np
from robo_rl.sim.mjmodel import check_field as _check_field

import mujoco.rollout  # noqa: E402  isort: skip

from robo_rl.sim.render import CameraRenderer, video_renderer  # noqa: E402  isort: skip

__all__ = ["MujocoCpuBackend", "load_model", "mujoco", "state_slices"]

_INERTIAL_FRAME_FIELDS = ("body_ipos", "body_iquat")
_INLINE_FORWARD_MAX = 32
"""Resets of at most this many worlds recompute sensors on the calling thread instead of the pool."""


class MujocoCpuBackend(ModelNames):
    """N worlds of one MJCF model, stepped in parallel with `mujoco.rollout` on CPU threads.

    Args:
        model: the MjModel (or a path to its MJCF file).
        num_envs: number of worlds N.
        num_threads: worker threads; 0 means one per CPU core.
        keyframe: name of the keyframe every world starts from (None: the model's default qpos).
        device: must be "cpu".
        nconmax, njmax: ignored; MuJoCo's CPU arena grows as a world needs (fixed buffers are mujoco_warp's).
    """

    device = torch.device("cpu")

    def __init__(
        self,
        model: mujoco.MjModel | str | Path,
        num_envs: int,
        *,
        num_threads: int = 0,
        keyframe: str | None = None,
        device: str | torch.device = "cpu",
        nconmax: int | None = None,
        njmax: int | None = None,
    ):
        if str(device) != "cpu":
            raise ValueError(f"sim.device = {str(device)!r}: the mujoco_cpu backend runs on the cpu only "
                             "(sim.backend: mujoco_warp runs on cuda devices)")
        if num_envs < 1:
            raise ValueError(f"num_envs = {num_envs}: must be >= 1")
        self.model = model if isinstance(model, mujoco.MjModel) else load_model(model)
        self.num_envs = num_envs
        self.num_threads = num_threads or os.cpu_count() or 1
        m = self.model
        # One model per world; entries are replaced by private copies only when a world's parameters change.
        self._models: list[mujoco.MjModel] = [m] * num_envs
        self._datas = [mujoco.MjData(m) for _ in range(self.num_threads)]
        self._pool = mujoco.rollout.Rollout(nthread=self.num_threads)
        self._scratch = mujoco.MjData(m)  # initial state and rendering outside the pool
        self._forward_data = mujoco.MjData(m)  # inline forward of reset worlds (mocap left at the default)
        self._renderers: dict[tuple[int, int], mujoco.Renderer] = {}
        self._cameras: dict[tuple[str, int, int], CameraRenderer] = {}  # batched images, per (camera, W, H)

        self.slices = state_slices(m)
        self.nstate = mujoco.mj_stateSize(m, _FULL)
        self._state = np.zeros((num_envs, self.nstate))  # (N, S) float64
        self._ctrl = np.zeros((num_envs, m.nu))  # (N, U)
        self._sensordata = np.zeros((num_envs, m.nsensordata))  # (N, D)
        mocap_bodies = np.argsort(m.body_mocapid)[-m.nmocap :] if m.nmocap else np.zeros(0, int)
        self._mocap_pos = np.repeat(m.body_pos[mocap_bodies][None], num_envs, 0)  # (N, M, 3)
        self._out_state: np.ndarray | None = None  # (N, n, S), allocated per substep count
        self._out_sensor: np.ndarray | None = None  # (N, n, D)

        st = torch.from_numpy(self._state)
        self.state = st  # (N, S)
        self.time = st[:, self.slices["time"].start]  # (N,)
        self.qpos = st[:, self.slices["qpos"]]  # (N, nq) view
        self.qvel = st[:, self.slices["qvel"]]  # (N, nv) view
        self.act = st[:, self.slices["act"]]  # (N, na) view
        # Mocap poses are not part of mjSTATE_FULLPHYSICS: they only place markers (e.g. a reach target)
        # for rendering and sensors of reset worlds, never physics, in the tasks here.
        self.mocap_pos = torch.from_numpy(self._mocap_pos)  # (N, M, 3)
        self.ctrl = torch.from_numpy(self._ctrl)  # (N, U)
        self.sensordata = torch.from_numpy(self._sensordata)  # (N, D)

        self._init_state = self._default_state(keyframe)  # (S,)
        self.init_state = torch.from_numpy(self._init_state)  # (S,) read-only by convention
        self._state[:] = self._init_state
        self._forward_worlds(np.arange(num_envs))

    # ------------------------------------------------------------------ stepping
    def step(self, n_substeps: int = 1) -> None:
        """Advance all worlds by `n_substeps` physics steps with the current `ctrl`."""
        n, s, d = self.num_envs, self.nstate, self.model.nsensordata
        if n_substeps < 1:
            raise ValueError(f"n_substeps = {n_substeps}: must be >= 1")
        if self._out_state is None or self._out_state.shape[1] != n_substeps:
            self._out_state = np.empty((n, n_substeps, s))
            self._out_sensor = np.empty((n, n_substeps, d))
            self._ctrl_seq = np.empty((n, n_substeps, self.model.nu))
        self._ctrl_seq[:] = self._ctrl[:, None, :]  # (N, n, U): held constant over the substeps
        # All arrays are preallocated with exact shapes, so the wrapper's per-call checks are skipped.
        self._pool.rollout(
            self._models,
            self._datas,
            self._state,
            self._ctrl_seq,
            nstep=n_substeps,
            state=self._out_state,
            sensordata=self._out_sensor,
            skip_checks=True,
        )
        self._state[:] = self._out_state[:, -1]
        self._sensordata[:] = self._out_sensor[:, -1]

    def reset(
        self,
        ids: torch.Tensor | np.ndarray,
        qpos: torch.Tensor | np.ndarray | None = None,
        qvel: torch.Tensor | np.ndarray | None = None,
    ) -> None:
        """Reset worlds `ids` (K,) to the initial state, optionally with new qpos (K, nq) / qvel (K, nv)."""
        idx = _np(ids, np.int64)
        if idx.size == 0:
            return
        self._state[idx] = self._init_state
        if qpos is not None:
            self._state[idx, self.slices["qpos"]] = _np(qpos)
        if qvel is not None:
            self._state[idx, self.slices["qvel"]] = _np(qvel)
        self._forward_worlds(idx)

    def _forward_worlds(self, idx: np.ndarray) -> None:
        """Recompute sensors of worlds `idx` at their current state (after resets).

        A few worlds (the usual auto-reset) are computed inline with mj_forward: handing them to the
        pool would cost a thread hand-off and a cold restart of the calling thread, more than the
        physics. Many worlds go to the pool as a one-step rollout, which records the sensors that
        mj_step evaluates before it integrates, i.e. the same values mj_forward gives (the stepped
        state is discarded). Mocap poses are not part of the state: they only place markers here.
        """
        k, m = len(idx), self.model
        if k <= _INLINE_FORWARD_MAX:
            d = self._forward_data
            for i in idx.tolist():
                mujoco.mj_setState(self._models[i], d, self._state[i], _FULL)
                d.ctrl[:] = self._ctrl[i]
                mujoco.mj_forward(self._models[i], d)
                self._sensordata[i] = d.sensordata
            return
        out_state = np.empty((k, 1, self.nstate))
        out_sensor = np.empty((k, 1, m.nsensordata))
        self._pool.rollout(
            [self._models[i] for i in idx.tolist()],
            self._datas,
            self._state[idx],  # (K, S) copy
            self._ctrl[idx][:, None, :],  # (K, 1, U)
            nstep=1,
            state=out_state,
            sensordata=out_sensor,
            skip_checks=True,
        )
        self._sensordata[idx] = out_sensor[:, 0]

    def _default_state(self, keyframe: str | None) -> np.ndarray:
        key = None if keyframe is None else self.name_id("key", keyframe)
        out = default_state(self.model, self._scratch, key)
        if key is not None:
            self._ctrl[:] = self._scratch.ctrl
        return out

    # ------------------------------------------------------------------ per-world parameters
    def world_model(self, i: int) -> mujoco.MjModel:
        """A model private to world i: change its fields for domain randomisation (copied on first use)."""
        if self._models[i] is self.model:
            self._models[i] = copy.copy(self.model)
        return self._models[i]

    def model_field(self, field: str) -> torch.Tensor:
        """(N, *shape) float64 copy of `model.<field>` in every world (per-world values after randomisation)."""
        _check_field(self.model, field)
        return torch.from_numpy(np.stack([getattr(m, field) for m in self._models]).astype(np.float64))

    def set_model_field(
        self, field: str, ids: Sequence[int] | torch.Tensor, values: np.ndarray | torch.Tensor
    ) -> None:
        """Set `model.<field>` for each world in ids; values has shape (len(ids), *field.shape).

        Each changed world gets its own model copy on first use (`world_model`); a few hundred kB per
        world for the robots here. Size-changing fields (e.g. adding geoms) are not allowed: worlds
        share one structure.
        """
        _check_field(self.model, field)
        vals = _np(values)
        shape = getattr(self.model, field).shape
        idx = _np(ids, np.int64).reshape(-1)
        if vals.shape != (len(idx), *shape):
            raise ValueError(f"model field {field!r}: values have shape {vals.shape}, expected {(len(idx), *shape)}")
        for k, i in enumerate(idx.tolist()):
            model = self.world_model(i)
            getattr(model, field)[...] = vals[k]
            if field in _INERTIAL_FRAME_FIELDS:
                # MuJoCo's kinematics skip the inertial frame of bodies compiled "same frame" (zero ipos,
                # identity iquat): with the flag left set, a moved centre of mass would be ignored.
                model.body_sameframe[1:] = 0  # mjSAMEFRAME_NONE: always correct, a few flops slower

    # ------------------------------------------------------------------ rendering
    def render(
        self, world: int, *, camera: str | int = -1, width: int = 320, height: int = 240
    ) -> np.ndarray:
        """Offscreen RGB frame (H, W, 3) uint8 of one world."""
        key = (width, height)
        if key not in self._renderers:
            self._renderers[key] = video_renderer(self.model, width, height)
        r = self._renderers[key]
        d = self._scratch
        mujoco.mj_setState(self._models[world], d, self._state[world], _FULL)
        d.mocap_pos[:] = self._mocap_pos[world]
        mujoco.mj_forward(self._models[world], d)
        cam = self.name_id("camera", camera) if isinstance(camera, str) else camera
        r.update_scene(d, camera=cam)
        return r.render()

    def render_cameras(
        self, camera: str, width: int, height: int, ids: torch.Tensor | np.ndarray | None = None
    ) -> torch.Tensor:
        """Images of `camera` in worlds `ids` (K,) (None: all N) as a (K, 3, H, W) uint8 RGB tensor.

        One `robo_rl.sim.render.CameraRenderer` per (camera, width, height), made on first use. The
        result is a view of its output buffer that the next call with the same key overwrites.
        """
        key = (camera, width, height)
        if key not in self._cameras:
            self._cameras[key] = CameraRenderer(self.model, camera, width, height, max_worlds=self.num_envs)
        return self._cameras[key].render(self._models, self._state, self._mocap_pos, ids)

    def close(self) -> None:
        for r in self._renderers.values():
            r.close()
        self._renderers.clear()
        for c in self._cameras.values():
            c.close()
        self._cameras.clear()
        self._pool.close()

