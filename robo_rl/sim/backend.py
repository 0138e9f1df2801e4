"""The physics backend protocol every task runs on, and the registry a backend is chosen from by name.

A backend owns N worlds of one MuJoCo model. Tasks see only what is listed here: batched state as
torch tensors on `device` (views that change in place), names resolved once to indices, stepping,
per-world resets, per-world model fields (domain randomisation) and rendering. `mujoco_cpu` (float64,
threads over `mujoco.rollout`) and `mujoco_warp` (float32 Warp arrays on a CPU or CUDA device, shared
with torch) implement it, so no task changes when the backend does. Both keep a world's state in
MuJoCo's `mjSTATE_FULLPHYSICS` layout, so checkpoints and initial states carry over between them.

`BACKENDS` maps a name (the config's `sim.backend`) to a factory with the backend constructor's signature:
a backend class registered by a user's script or test, or a `LazyBackend` for the built-in ones, whose module
is imported only when chosen (`mujoco_warp` imports Warp, an optional dependency).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import torch

from robo_rl.core.registry import Registry


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


@dataclass(frozen=True)
class LazyBackend:
    """A backend class imported from `module` when a backend is first made (heavy or optional dependencies)."""

    module: str
    cls: str

    def __call__(self, *args: Any, **kwargs: Any) -> PhysicsBackend:
        # importlib: the module (and its optional dependency, e.g. warp) loads only when this backend is chosen
        return getattr(importlib.import_module(self.module), self.cls)(*args, **kwargs)


BACKENDS: Registry[Callable[..., PhysicsBackend]] = Registry("physics backend", field="sim.backend")
"""Backend name (the config's `sim.backend`) -> factory `(model, num_envs, *, num_threads, keyframe, device, nconmax,
njmax) -> PhysicsBackend` (a backend class, or a `LazyBackend`)."""
BACKENDS.register("mujoco_cpu", LazyBackend("robo_rl.sim.mujoco_cpu", "MujocoCpuBackend"), default=True)
BACKENDS.register("mujoco_warp", LazyBackend("robo_rl.sim.mujoco_warp", "MujocoWarpBackend"))


def make_backend(name: str, model: Any, num_envs: int, *, num_threads: int = 0, keyframe: str | None = None,
                 device: str = "cpu", nconmax: int | None = None, njmax: int | None = None) -> PhysicsBackend:
    """Build backend `name` over `model` (an MjModel) with `num_envs` worlds starting at `keyframe`.

    device: where state lives and physics runs (`mujoco_cpu`: only "cpu"). nconmax / njmax: contacts and
    constraint rows allocated per world by backends with fixed buffers (`mujoco_warp`; None: its default).

    Raises:
        ConfigError: `name` is not a registered backend (one line listing them).
    """
    return BACKENDS.get(name)(model, num_envs, num_threads=num_threads, keyframe=keyframe, device=device,
                               nconmax=nconmax, njmax=njmax)
