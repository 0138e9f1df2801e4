"""Batched off-screen camera images of N worlds of one MuJoCo model, headless on the CPU.

`CameraRenderer` owns one OpenGL context (EGL or OSMesa, whichever `MUJOCO_GL` names; the backend
module picks one when none is set) sized for one (camera, width, height). For each world it loads the
physics state into one scratch `MjData`, computes only what a picture needs (`mj_fwdKinematics`:
poses, cameras, lights, tendons, flexes; no dynamics), builds the scene from that world's own model
(so per-world colours and sizes from domain randomisation show), draws it and reads its pixels into
a preallocated staging array. One strided copy at the end turns the bottom-up (N, H, W, 3) staging
array into the top-down (N, 3, H, W) output, so a call allocates nothing.

The defaults of `RenderSettings` were measured with `scripts/bench_render.py` (docs/benchmarks.md,
bench_render): without a GPU, Mesa's llvmpipe does all of OpenGL on the CPU, and at 64x64 a frame's
cost is per drawn triangle and per render pass, hardly per pixel. Against them, at 64 px: shadows
(a 4096 px shadow map per light) ~60x slower, reflections ~1.7x, 4x multisampling ~2.5x, MuJoCo's
28 x 16 facets on round shapes ~4x; the skybox is free and off. Textures, and how finely planes
are gridded (which sets their cost), come from `model` at construction, held by the context;
everything else comes from each world's model at each call.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from robo_rl.sim.mjmodel import mujoco  # chooses a headless MUJOCO_GL before mujoco is imported

MAX_IMAGE_SIZE = 4096
"""Largest width or height accepted (far above what a policy sees; keeps the off-screen buffer sane)."""


@dataclass(frozen=True, kw_only=True)
class RenderSettings:
    """How a `CameraRenderer` draws; the defaults are the fastest measured for small images on the CPU."""

    num_slices: int = 8
    """Facets around capsules, cylinders and spheres (MuJoCo's default 28: ~4x slower at 64 px, same look)."""
    num_stacks: int = 4
    """Facets along capsules and spheres (MuJoCo's default 16)."""
    shadows: bool = False
    """Shadow mapping with the model's shadow map size: a pass per light (MuJoCo's 4096 px: ~60x slower)."""
    reflections: bool = False
    """Reflective materials (the floor's): one mirrored render pass (~1.7x slower)."""
    skybox: bool = False
    """The skybox texture behind the scene (else the background is black); costs nothing measurable."""
    multisamples: int = 0
    """Multisample anti-aliasing samples per pixel (0: none; 4, MuJoCo's default, ~2.5x slower)."""

    def validate(self) -> None:
        """Raise ValueError naming the first field out of range."""
        limits = {"num_slices": (3, 64), "num_stacks": (1, 64), "multisamples": (0, 16)}
        for name, (low, high) in limits.items():
            value = getattr(self, name)
            if not isinstance(value, int) or not low <= value <= high:
                raise ValueError(f"render settings: {name} = {value!r}: must be an integer in {low}..{high}")


_FULL = mujoco.mjtState.mjSTATE_FULLPHYSICS


def check_headless_gl() -> None:
    """Raise a one-line RuntimeError when mujoco chose a windowed OpenGL (glfw) and no display exists.

    MuJoCo picks its OpenGL when it is first imported: a program that imports mujoco before robo_rl,
    without MUJOCO_GL set, gets glfw, which cannot make a context headless (MuJoCo then aborts).
    """
    if mujoco.GLContext.__module__.endswith("glfw") and not os.environ.get("DISPLAY"):
        raise RuntimeError(
            "no headless OpenGL: mujoco was imported before MUJOCO_GL was set, so it chose glfw, which needs a "
            "display; set MUJOCO_GL=egl (or osmesa) in the environment, or import robo_rl.sim.mujoco_cpu before mujoco"
        )


def update_kinematics(model: mujoco.MjModel, data: mujoco.MjData) -> None:
    """What a picture needs from the state: poses, cameras, lights, flexes, tendons (no dynamics).

    `mj_fwdKinematics` (MuJoCo >= 3.4) is these steps in one call; older versions run them one by one.
    """
    if hasattr(mujoco, "mj_fwdKinematics"):
        mujoco.mj_fwdKinematics(model, data)
        return
    for step in (mujoco.mj_kinematics, mujoco.mj_comPos, mujoco.mj_camlight, mujoco.mj_flex, mujoco.mj_tendon):
        step(model, data)


def camera_names(model: mujoco.MjModel) -> list[str]:
    """Names of the model's cameras, in id order."""
    return [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_CAMERA, i) or "" for i in range(model.ncam)]


def render_model(model: mujoco.MjModel, width: int, height: int, settings: RenderSettings) -> mujoco.MjModel:
    """A copy of `model` with the visual settings of `settings` (the given model is untouched).

    Only the rendering context reads these (buffer size, multisampling, shadow map size, tessellation
    of the built-in shapes); the scene contents come from the worlds' own models at each call.
    """
    m = copy.copy(model)
    m.vis.global_.offwidth = width
    m.vis.global_.offheight = height
    m.vis.quality.offsamples = settings.multisamples
    if not settings.shadows:
        m.vis.quality.shadowsize = 0  # no shadow map texture at all
    m.vis.quality.numslices = settings.num_slices
    m.vis.quality.numstacks = settings.num_stacks
    return m


VIDEO_SHADOW_SIZE = 1024
"""Shadow map side (px) for video frames: MuJoCo's usual 4096 costs ~2.5x the frame time of a 320x240 frame on the
CPU, with no visible difference at that size."""


def video_renderer(model: mujoco.MjModel, width: int, height: int) -> mujoco.Renderer:
    """A `mujoco.Renderer` for video frames: the model's look (shadows, reflections, skybox), without multisample
    anti-aliasing and with a shadow map of at most VIDEO_SHADOW_SIZE.

    On this CPU (EGL's software rasteriser) a 320x240 frame takes ~50 ms instead of ~200 ms with MuJoCo's
    defaults (4x MSAA, 4096 px shadow map): a training run's evaluation video of 150 frames, 8 s instead of 30.
    Only the rendering context reads these settings; the model is restored before this returns.
    """
    quality = model.vis.quality
    saved = quality.offsamples, quality.shadowsize
    quality.offsamples, quality.shadowsize = 0, min(quality.shadowsize, VIDEO_SHADOW_SIZE)
    try:
        return mujoco.Renderer(model, height=height, width=width)
    finally:
        quality.offsamples, quality.shadowsize = saved


class CameraRenderer:
    """RGB images of one fixed camera for many worlds of one model, as (K, 3, H, W) uint8 tensors.

    Args:
        model: the model all worlds share (per-world copies may differ in parameters, not in sizes).
        camera: name of a camera in the model.
        width: image width W in pixels.
        height: image height H in pixels.
        max_worlds: how many worlds one call renders at most (the output buffer is allocated once).
        settings: drawing quality (default: the fastest measured for small images).

    Raises:
        ValueError: unknown camera (the message lists the model's cameras), a size outside
            1..MAX_IMAGE_SIZE, max_worlds < 1, or settings out of range.
        RuntimeError: no headless OpenGL in this process (`check_headless_gl`).
    """

    def __init__(
        self,
        model: mujoco.MjModel,
        camera: str,
        width: int,
        height: int,
        *,
        max_worlds: int,
        settings: RenderSettings | None = None,
    ):
        cam_id = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, camera)
        if cam_id < 0:
            raise ValueError(f"camera {camera!r} is not in the model; cameras: {', '.join(camera_names(model))}")
        for field, value in (("width", width), ("height", height)):
            if not isinstance(value, int) or not 1 <= value <= MAX_IMAGE_SIZE:
                raise ValueError(f"{field} = {value}: must be an integer in 1..{MAX_IMAGE_SIZE}")
        if max_worlds < 1:
            raise ValueError(f"max_worlds = {max_worlds}: must be >= 1")
        settings = settings or RenderSettings()
        settings.validate()
        check_headless_gl()
        self.camera, self.width, self.height = camera, width, height
        self._gl = mujoco.GLContext(width, height)
        self._gl.make_current()
        context_model = render_model(model, width, height, settings)
        self._context = mujoco.MjrContext(context_model, mujoco.mjtFontScale.mjFONTSCALE_100)
        mujoco.mjr_setBuffer(mujoco.mjtFramebuffer.mjFB_OFFSCREEN, self._context)
        self._scene = mujoco.MjvScene(model, maxgeom=model.ngeom + model.nsite + 1000)  # + decorations
        self._scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = settings.shadows
        self._scene.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = settings.reflections
        self._scene.flags[mujoco.mjtRndFlag.mjRND_SKYBOX] = settings.skybox
        self._option = mujoco.MjvOption()
        self._camera = mujoco.MjvCamera()
        self._camera.type = mujoco.mjtCamera.mjCAMERA_FIXED
        self._camera.fixedcamid = cam_id
        self._rect = mujoco.MjrRect(0, 0, width, height)
        self._data = mujoco.MjData(model)  # scratch: one world at a time
        self._staging = np.empty((max_worlds, height, width, 3), np.uint8)  # (N, H, W, 3), rows bottom-up
        self._out = torch.empty((max_worlds, 3, height, width), dtype=torch.uint8)  # (N, 3, H, W)

    def render(
        self,
        models: Sequence[mujoco.MjModel],
        states: np.ndarray,
        mocap_pos: np.ndarray,
        ids: Sequence[int] | np.ndarray | None = None,
    ) -> torch.Tensor:
        """Images of worlds `ids` (K,) (None: all) as a (K, 3, H, W) uint8 RGB tensor, rows top-down.

        Args:
            models: each world's model (N,); entries may be the shared model or private copies.
            states: each world's mjSTATE_FULLPHYSICS state (N, S) float64.
            mocap_pos: each world's mocap body positions (N, M, 3).
            ids: the worlds to render, in output order; at most `max_worlds` of them.

        Returns:
            A view of this renderer's output buffer: the next call overwrites it (clone to keep it).
        """
        idx = range(len(states)) if ids is None else np.asarray(ids, dtype=np.int64).tolist()
        k = len(idx)
        if k > len(self._staging):
            raise ValueError(f"{k} worlds requested: this renderer holds at most max_worlds = {len(self._staging)}")
        self._gl.make_current()  # another renderer (e.g. a video's) may have taken the thread's context
        d = self._data
        for row, i in enumerate(idx):
            m = models[i]
            mujoco.mj_setState(m, d, states[i], _FULL)
            d.mocap_pos[:] = mocap_pos[i]
            update_kinematics(m, d)
            mujoco.mjv_updateScene(m, d, self._option, None, self._camera, mujoco.mjtCatBit.mjCAT_ALL, self._scene)
            mujoco.mjr_render(self._rect, self._scene, self._context)
            mujoco.mjr_readPixels(self._staging[row], None, self._rect, self._context)
        out = self._out[:k]
        # OpenGL's rows run bottom-up: flip them and move channels first in one copy.
        np.copyto(out.numpy(), self._staging[:k, ::-1].transpose(0, 3, 1, 2))
        return out

    def close(self) -> None:
        """Free the OpenGL context (the renderer cannot be used afterwards)."""
        if self._context is None:
            return
        self._gl.make_current()
        self._context.free()
        self._context = None
        self._gl.free()
