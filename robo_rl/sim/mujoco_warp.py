"""Batched MuJoCo on MuJoCo Warp: N worlds of one model as Warp arrays that torch reads and writes in place.

The same protocol as `mujoco_cpu` (`robo_rl.sim.backend.PhysicsBackend`), so tasks and algorithms do
not change with the backend:

- **State, zero-copy.** `state` is one (N, S) float32 torch tensor on `device` in MuJoCo's
  `mjSTATE_FULLPHYSICS` layout (time, qpos, qvel, act), the layout of the CPU backend's float64 rows.
  Warp's `time`, `qpos`, `qvel` and `act` arrays are strided views of its columns
  (`wp.from_torch`), and `ctrl`, `sensordata`, `mocap_pos` are torch views of Warp's own arrays
  (`wp.to_torch`): a task's writes reach the physics, and stepping writes what the task reads, with
  no copy and no host round trip.
- **Stepping.** `step(n)` runs n `mujoco_warp.step` calls; on a CUDA device the n steps are captured
  once per n as a CUDA graph and replayed (Warp's CPU device cannot capture, so it steps plainly).
  Warp runs on torch's current CUDA stream, so torch ops and physics stay ordered without syncs.
- **Sensors** lag the state by one physics step, as on the CPU backend (`mujoco_warp.step`, like
  `mj_step`, evaluates sensors before it integrates). Reset worlds get theirs recomputed.
- **Per-world model fields.** A field is shared by all worlds until `set_model_field` first writes
  it; the model is then put on the device again with that field batched (`put_model(batch_sizes=)`),
  once, at start-up, and later writes go straight into the (N, ...) array.
- **Buffers.** Contacts (`nconmax`) and constraints (`njmax`) are allocated per world from the task's
  sizes. MuJoCo Warp flags each world that overflows them; `step` raises `WarpBufferOverflow` naming
  the worlds, the buffer and the setting to raise (checked after every step on the CPU device, every
  `overflow_check_interval` steps on a GPU, where reading the flags costs a synchronisation).
- **Rendering.** `render_cameras` uses MuJoCo Warp's batch ray-tracing renderer; `render` (video of
  one world) copies that world to a host `MjData` and draws it with MuJoCo's OpenGL renderer.

Warp's kernels compile on first use and are cached under `.cache/warp/` of a source checkout
(ignored by git), or `$ROBO_RL_WARP_CACHE`, so later runs load them in seconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from robo_rl.core.config import ConfigError
from robo_rl.sim.mjmodel import (
    FULL_PHYSICS,
    ModelNames,
    check_field,
    configure_warp,
    default_state,
    load_model,
    mujoco,
    state_slices,
)

try:
    import warp as wp
except ImportError as exc:  # pragma: no cover - exercised where the gpu extra is absent
    raise ImportError(
        "the mujoco_warp backend needs the `gpu` extra: pip install 'robo_rl[gpu]' "
        "(mujoco-warp and warp-lang; the mujoco_cpu backend works without them)"
    ) from exc

WARP_CACHE = configure_warp(wp)  # before MuJoCo Warp compiles anything
import mujoco_warp as mjw  # noqa: E402

from robo_rl.sim.render import video_renderer  # noqa: E402

# Overflows that lose contacts or constraints (the results are wrong); solver iteration limits are not.
_FATAL_OVERFLOWS = {
    mjw.OverflowType.NEFC: "constraints exceed njmax",
    mjw.OverflowType.NJMAX_NNZ: "constraint Jacobian non-zeros exceed njmax_nnz",
    mjw.OverflowType.BROADPHASE: "broadphase collision pairs exceed the contact buffer (nconmax)",
    mjw.OverflowType.NARROWPHASE: "contacts exceed the contact buffer (nconmax)",
    mjw.OverflowType.CCD: "convex collision contacts exceed the contact buffer (nconmax)",
    mjw.OverflowType.HFIELD: "height-field contacts of a geom pair exceed MuJoCo Warp's per-pair limit",
    mjw.OverflowType.NVMAX: "awake degrees of freedom exceed nvmax",
    mjw.OverflowType.CONTACT_MATCH: "contact matching buffer overflowed",
}
_FATAL_MASK = int(sum(int(k) for k in _FATAL_OVERFLOWS))


class WarpBufferOverflow(RuntimeError):
    """A world needed more contacts or constraints than its buffers hold (results would be wrong)."""


def warp_device(device: str | torch.device) -> Any:
    """The Warp device of a torch device name (`cpu`, `cuda`, `cuda:N`); ConfigError when it is absent."""
    name = str(device)
    if name == "cuda":
        name = "cuda:0"
    try:
        return wp.get_device(name)
    except (RuntimeError, ValueError) as exc:
        available = ", ".join(str(d) for d in wp.get_devices())
        raise ConfigError(f"config error: sim.device = {str(device)!r}: Warp has no such device here; "
                          f"devices: {available}") from exc


class MujocoWarpBackend(ModelNames):
    """N worlds of one MJCF model on MuJoCo Warp (see the module docstring).

    Args:
        model: the MjModel (or a path to its MJCF file); its options (timestep, solver) are read now.
        num_envs: number of worlds N.
        num_threads: ignored (Warp schedules its own kernels); kept for the common signature.
        keyframe: name of the keyframe every world starts from (None: the model's default qpos).
        device: `cpu` (Warp's CPU device) or `cuda:N`.
        nconmax: contacts allocated per world (None: MuJoCo Warp's default for the model).
        njmax: constraint rows allocated per world (None: MuJoCo Warp's default).
        overflow_check_interval: steps between buffer-overflow checks on a GPU (each one synchronises).
    """

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
        overflow_check_interval: int = 100,
    ):
        if num_envs < 1:
            raise ValueError(f"num_envs = {num_envs}: must be >= 1")
        self.model = model if isinstance(model, mujoco.MjModel) else load_model(model)
        self.num_envs = num_envs
        self._wp_device = warp_device(device)
        self.device = torch.device(str(self._wp_device))
        self._cuda = self._wp_device.is_cuda
        self._check_every = overflow_check_interval if self._cuda else 1
        self._buffer_sizes = {"nconmax": nconmax, "njmax": njmax}
        m = self.model
        self.slices = state_slices(m)
        for part in ("history", "plugin"):
            if self.slices[part].stop > self.slices[part].start:
                raise NotImplementedError(f"the mujoco_warp backend does not carry {part} state (delays, plugins)")
        self.nstate = self.slices["act"].stop
        self._scratch = mujoco.MjData(m)  # initial state and host rendering
        key = None if keyframe is None else self.name_id("key", keyframe)
        self._init_state = default_state(m, self._scratch, key)  # (S,) float64
        self.init_state = torch.from_numpy(self._init_state).to(self.device)  # (S,) float64, the model's numbers
        self._init_dev = self.init_state.to(self.device, torch.float32)  # (S,)
        mocap_bodies = np.argsort(m.body_mocapid)[-m.nmocap :] if m.nmocap else np.zeros(0, int)
        self._scratch.mocap_pos[:] = m.body_pos[mocap_bodies]  # markers at their bodies, as on the CPU backend
        self._batched: dict[str, int] = {}  # model fields with per-world values -> N
        self._graphs: dict[int, Any] = {}  # n_substeps -> captured CUDA graph
        self._renderers: dict[tuple[int, int], mujoco.Renderer] = {}
        self._cameras: dict[tuple[str, int, int], tuple[Any, Any, torch.Tensor]] = {}
        self._calls = 0
        self._stream = wp.stream_from_torch(torch.cuda.current_stream(self.device)) if self._cuda else None

        with self._scope():
            self._m = self._put_model()
            self._d = mjw.put_data(m, self._scratch, nworld=num_envs, **self._sizes())
            self.state = torch.zeros(num_envs, self.nstate, device=self.device)  # (N, S) float32
            self.state[:] = self._init_dev
            self._bind_state()
            self.ctrl = wp.to_torch(self._d.ctrl)  # (N, U) float32
            self.sensordata = wp.to_torch(self._d.sensordata)  # (N, D)
            self.mocap_pos = wp.to_torch(self._d.mocap_pos)  # (N, M, 3)
            self._warmstart = wp.to_torch(self._d.qacc_warmstart)  # (N, nv)
            self._overflow = wp.to_torch(self._d.overflow)  # (N,) int32 flags, sticky
        self.time = self.state[:, self.slices["time"].start]  # (N,)
        self.qpos = self.state[:, self.slices["qpos"]]  # (N, nq) view
        self.qvel = self.state[:, self.slices["qvel"]]  # (N, nv) view
        self.act = self.state[:, self.slices["act"]]  # (N, na) view
        self._forward_all()

    # ------------------------------------------------------------------ set-up
    def _scope(self) -> Any:
        """Warp's device, and on a GPU torch's current stream, for everything launched inside."""
        if self._stream is not None:
            return wp.ScopedStream(self._stream)
        return wp.ScopedDevice(self._wp_device)

    def _sizes(self) -> dict[str, int]:
        return {k: v for k, v in self._buffer_sizes.items() if v is not None}

    def _put_model(self) -> Any:
        """The device model, with the fields in `_batched` holding one row per world."""
        m = mjw.put_model(self.model, batch_sizes=dict(self._batched) or None)
        m.opt.warn_overflow = 0  # this backend reports overflows itself (WarpBufferOverflow), once, clearly
        return m

    def _bind_state(self) -> None:
        """Point Warp's time, qpos, qvel and act arrays at the columns of `state` (strided views, no copy)."""
        for name in ("time", "qpos", "qvel", "act"):
            cols = self.slices[name]
            if cols.stop == cols.start:
                continue  # e.g. no actuator activations: Warp keeps its empty array
            view = self.state[:, cols.start] if name == "time" else self.state[:, cols]
            setattr(self._d, name, wp.from_torch(view))

    # ------------------------------------------------------------------ stepping
    def step(self, n_substeps: int = 1) -> None:
        """Advance all worlds by `n_substeps` physics steps with the current `ctrl`."""
        if n_substeps < 1:
            raise ValueError(f"n_substeps = {n_substeps}: must be >= 1")
        with self._scope():
            if self._cuda:
                graph = self._graphs.get(n_substeps)
                if graph is None:
                    with wp.ScopedCapture(stream=self._stream) as capture:
                        for _ in range(n_substeps):
                            mjw.step(self._m, self._d)
                    graph = self._graphs[n_substeps] = capture.graph
                wp.capture_launch(graph)
            else:
                for _ in range(n_substeps):
                    mjw.step(self._m, self._d)
        self._calls += 1
        if self._calls % self._check_every == 0:
            self.check_overflow()

    def check_overflow(self) -> None:
        """Raise WarpBufferOverflow if any world lost contacts or constraints since the last check."""
        fatal = self._overflow & _FATAL_MASK  # (N,)
        worlds = fatal.nonzero().squeeze(-1).tolist()
        if not worlds:
            return
        flags = int(np.bitwise_or.reduce(fatal[worlds].cpu().numpy()))
        what = "; ".join(text for bit, text in _FATAL_OVERFLOWS.items() if flags & int(bit))
        shown = ", ".join(map(str, worlds[:8])) + (", ..." if len(worlds) > 8 else "")
        sizes = f"nconmax={self._d.naconmax // self.num_envs}, njmax={self._d.njmax}"
        self._overflow.zero_()
        raise WarpBufferOverflow(
            f"MuJoCo Warp buffers overflowed in {len(worlds)} world(s) [{shown}]: {what} ({sizes} per world); "
            "raise sim.nconmax / sim.njmax"
        )

    def reset(
        self,
        ids: torch.Tensor | np.ndarray,
        qpos: torch.Tensor | np.ndarray | None = None,
        qvel: torch.Tensor | np.ndarray | None = None,
    ) -> None:
        """Reset worlds `ids` (K,) to the initial state, optionally with new qpos (K, nq) / qvel (K, nv)."""
        idx = torch.as_tensor(ids, dtype=torch.long).to(self.device)
        if idx.numel() == 0:
            return
        self.state[idx] = self._init_dev
        if qpos is not None:
            self.state[idx, self.slices["qpos"]] = torch.as_tensor(qpos).to(self.device, torch.float32)
        if qvel is not None:
            self.state[idx, self.slices["qvel"]] = torch.as_tensor(qvel).to(self.device, torch.float32)
        self._warmstart[idx] = 0.0  # the solver's warm start belongs to the state the world left
        self._forward_worlds(idx)

    def _forward_worlds(self, idx: torch.Tensor) -> None:
        """Recompute the sensors of worlds `idx` at their current state; the others keep their (lagged) values.

        `mujoco_warp.forward` runs over every world: one batched launch costs about what a batch of a
        few worlds would, and the other worlds' sensors are put back.
        """
        if idx.numel() == self.num_envs:
            self._forward_all()
            return
        before = self.sensordata.clone()  # (N, D)
        self._forward_all()
        keep = torch.ones(self.num_envs, dtype=torch.bool, device=self.device)
        keep[idx] = False
        self.sensordata[keep] = before[keep]

    def _forward_all(self) -> None:
        with self._scope():
            mjw.forward(self._m, self._d)

    # ------------------------------------------------------------------ per-world parameters
    def model_field(self, field: str) -> torch.Tensor:
        """(N, *shape) float64 copy of `model.<field>` in every world (per-world values after randomisation)."""
        rows = self._field_rows(field)  # (B, *shape)
        return rows.expand(self.num_envs, *rows.shape[1:]).to(torch.float64).clone()

    def set_model_field(
        self, field: str, ids: Sequence[int] | torch.Tensor, values: np.ndarray | torch.Tensor
    ) -> None:
        """Set `model.<field>` for each world in ids; values has shape (len(ids), *field.shape).

        The first write to a field batches it (one row per world, start-up cost only). Size-changing
        fields are not allowed: worlds share one structure.
        """
        rows = self._field_rows(field)
        shape = tuple(getattr(self.model, field).shape)
        idx = torch.as_tensor(ids, dtype=torch.long).reshape(-1).to(self.device)
        vals = torch.as_tensor(values)
        if tuple(vals.shape) != (len(idx), *shape):
            raise ValueError(f"model field {field!r}: values have shape {tuple(vals.shape)}, expected "
                             f"{(len(idx), *shape)}")
        if field not in self._batched:
            self._batch_field(field)
            rows = self._field_rows(field)
        rows[idx] = vals.to(self.device, rows.dtype)

    def _field_rows(self, field: str) -> torch.Tensor:
        """A torch view (B, *MjModel shape) of the device model's field; B = 1 (shared) or N (batched)."""
        check_field(self.model, field)
        arr = getattr(self._m, field, None)
        if not isinstance(arr, wp.array):
            raise ValueError(f"model field {field!r} is not on the MuJoCo Warp model")
        rows = wp.to_torch(arr)
        return rows.reshape(rows.shape[0], *getattr(self.model, field).shape)

    def _batch_field(self, field: str) -> None:
        """Put the model again with `field` per world, keeping the per-world values set so far."""
        kept = {name: self._field_rows(name).clone() for name in self._batched}
        self._batched[field] = self.num_envs
        try:
            with self._scope():
                self._m = self._put_model()
        except ValueError as exc:
            del self._batched[field]
            raise ValueError(f"model field {field!r} cannot vary per world on MuJoCo Warp: {exc}") from None
        for name, rows in kept.items():
            self._field_rows(name).copy_(rows)
        self._graphs.clear()  # captured graphs point at the old model's arrays

    # ------------------------------------------------------------------ rendering
    def _to_host(self, world: int) -> mujoco.MjData:
        """The scratch MjData at world `world`'s state and markers (drawn with the nominal model's colours)."""
        d = self._scratch
        mujoco.mj_setState(self.model, d, self.state[world].double().cpu().numpy(), FULL_PHYSICS)
        d.mocap_pos[:] = self.mocap_pos[world].cpu().numpy()
        mujoco.mj_forward(self.model, d)
        return d

    def render(self, world: int, *, camera: str | int = -1, width: int = 320, height: int = 240) -> np.ndarray:
        """Offscreen RGB frame (H, W, 3) uint8 of one world (MuJoCo's OpenGL renderer, on the host)."""
        key = (width, height)
        if key not in self._renderers:
            self._renderers[key] = video_renderer(self.model, width, height)
        r = self._renderers[key]
        cam = self.name_id("camera", camera) if isinstance(camera, str) else camera
        r.update_scene(self._to_host(world), camera=cam)
        return r.render()

    def render_cameras(
        self, camera: str, width: int, height: int, ids: torch.Tensor | np.ndarray | None = None
    ) -> torch.Tensor:
        """Images of `camera` in worlds `ids` (K,) (None: all N) as a (K, 3, H, W) uint8 RGB tensor on `device`.

        MuJoCo Warp's batch renderer ray-traces every world in one launch (a render context per
        (camera, width, height), made on first use). The result is a view the next call overwrites
        when `ids` is None, else a gathered copy.
        """
        key = (camera, width, height)
        if key not in self._cameras:
            cam = self.name_id("camera", camera)
            with self._scope():
                rc = mjw.create_render_context(self.model, nworld=self.num_envs, cam_res=(width, height),
                                               render_rgb=True, render_depth=False, cam_active=[cam],
                                               use_textures=True, use_shadows=False)
                rgb = wp.zeros((self.num_envs, height, width), dtype=wp.vec3f)
            out = torch.empty(self.num_envs, 3, height, width, dtype=torch.uint8, device=self.device)
            self._cameras[key] = (rc, rgb, out)
        rc, rgb, out = self._cameras[key]
        with self._scope():
            mjw.refit_bvh(self._m, self._d, rc)
            mjw.render(self._m, self._d, rc)
            mjw.get_rgb(rc, 0, rgb)
        pixels = wp.to_torch(rgb)  # (N, H, W, 3) float in [0, 1]
        out.copy_(pixels.mul(255.0).round_().clamp_(0, 255).permute(0, 3, 1, 2))
        if ids is None:
            return out
        return out[torch.as_tensor(ids, dtype=torch.long).to(self.device)]

    def close(self) -> None:
        for r in self._renderers.values():
            r.close()
        self._renderers.clear()
        self._cameras.clear()
        self._graphs.clear()
