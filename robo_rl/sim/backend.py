"""The physics backend protocol every task runs on, and the one place a backend is chosen by name.

A backend owns N worlds of one MuJoCo model. Tasks see only what is listed here: batched state as
torch tensors on `device` (views that change in place), names resolved once to indices, stepping,
per-world resets, per-world model fields (domain randomisation) and rendering. `mujoco_cpu` (float64,
threads over `mujoco.rollout`) and `mujoco_warp` (float32 Warp arrays on a CPU or CUDA device, shared
with torch) implement it, so no task changes when the backend does. Both keep a world's state in
MuJoCo's `mjSTATE_FULLPHYSICS` layout, so checkpoints and initial states carry over between them.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import torch

BACKENDS: dict[str, str] = {
    "mujoco_cpu": "robo_rl.sim.mujoco_cpu:MujocoCpuBackend",
    "mujoco_warp": "robo_rl.sim.mujoco_warp:MujocoWarpBackend",
}
"""Backend name (the config's `sim.backend`) -> "module:class"; imported only when chosen."""


@runtime_checkable
class PhysicsBackend(Protocol):
    """N worlds of one model. Shapes: N worlds, S state size, U actuators, D sensor values, M mocap bodies."""

    model: Any
    """The nominal MjModel (shared constants: names, sizes, default parameters)."""
    num_envs: int
    device: torch.device
    nstate: int
    slices: dict[str, slice]
    """Column ranges of time, qpos, qvel, act, ... inside a row of `state`."""
    init_state: torch.Tensor
    """(S,) the state every world starts from (keyframe or model default)."""
    state: torch.Tensor  # (N, S) float64 (cpu) or float32 (warp), in place
    qpos: torch.Tensor  # (N, nq) view of state
    qvel: torch.Tensor  # (N, nv) view of state
    ctrl: torch.Tensor  # (N, U)
    sensordata: torch.Tensor  # (N, D)
    mocap_pos: torch.Tensor  # (N, M, 3)

    def name_id(self, kind: str, name: str) -> int: ...
    def names(self, kind: str) -> list[str]: ...
    def joint_qpos_index(self, names: Sequence[str]) -> torch.Tensor: ...
    def joint_qvel_index(self, names: Sequence[str]) -> torch.Tensor: ...
    def actuator_index(self, names: Sequence[str]) -> torch.Tensor: ...
    def sensor_slice(self, name: str) -> slice: ...
    def step(self, n_substeps: int = 1) -> None: ...
    def reset(self, ids: torch.Tensor, qpos: torch.Tensor | None = None, qvel: torch.Tensor | None = None) -> None: ...
    def model_field(self, field: str) -> torch.Tensor: ...
    def set_model_field(self, field: str, ids: torch.Tensor, values: torch.Tensor) -> None: ...
    def render(self, world: int, *, camera: str | int = -1, width: int = 320, height: int = 240) -> Any: ...
    def render_cameras(self, camera: str, width: int, height: int, ids: torch.Tensor | None = None) -> torch.Tensor:
        """(K, 3, H, W) uint8 images of `camera` in worlds `ids` (None: all); a view the next call overwrites."""
        ...

    def close(self) -> None: ...


def backend_class(name: str) -> type:
    """The class of backend `name`; ValueError listing the valid names otherwise."""
    if name not in BACKENDS:
        raise ValueError(f"unknown physics backend {name!r}; valid backends: {', '.join(BACKENDS)}")
    module, cls = BACKENDS[name].split(":")
    return getattr(importlib.import_module(module), cls)


def make_backend(name: str, model: Any, num_envs: int, *, num_threads: int = 0, keyframe: str | None = None,
                 device: str = "cpu", nconmax: int | None = None, njmax: int | None = None) -> PhysicsBackend:
    """Build backend `name` over `model` (an MjModel) with `num_envs` worlds starting at `keyframe`.

    device: where state lives and physics runs (`mujoco_cpu`: only "cpu"). nconmax / njmax: contacts and
    constraint rows allocated per world by backends with fixed buffers (`mujoco_warp`; None: its default).
    """
    return backend_class(name)(model, num_envs, num_threads=num_threads, keyframe=keyframe, device=device,
                               nconmax=nconmax, njmax=njmax)
