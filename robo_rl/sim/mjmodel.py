"""What every MuJoCo backend shares: the headless GL choice, the state layout, and names resolved once.

Importing this module picks a headless `MUJOCO_GL` (egl, else osmesa) before `mujoco` loads, so any
backend can render off-screen. `ModelNames` resolves joints, actuators, sensors and other objects of
the nominal `MjModel` to indices; `state_slices` and `default_state` fix the layout and content of a
world's state row (MuJoCo's `mjSTATE_FULLPHYSICS`), which both backends share, so checkpoints and
initial states are the same whichever backend steps them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from robo_rl.core.headless_gl import choose_headless_gl

choose_headless_gl()
import mujoco  # noqa: E402  (MUJOCO_GL must be set before the import)

FULL_PHYSICS = mujoco.mjtState.mjSTATE_FULLPHYSICS

OBJ_TYPES = {
    "joint": mujoco.mjtObj.mjOBJ_JOINT,
    "body": mujoco.mjtObj.mjOBJ_BODY,
    "site": mujoco.mjtObj.mjOBJ_SITE,
    "sensor": mujoco.mjtObj.mjOBJ_SENSOR,
    "actuator": mujoco.mjtObj.mjOBJ_ACTUATOR,
    "geom": mujoco.mjtObj.mjOBJ_GEOM,
    "camera": mujoco.mjtObj.mjOBJ_CAMERA,
    "key": mujoco.mjtObj.mjOBJ_KEY,
}


_REPO = Path(__file__).resolve().parents[2]


def configure_warp(wp: Any, user: str = "") -> Path:
    """Point Warp's kernel cache at `.cache/warp/` of a source checkout (ignored by git), `$ROBO_RL_WARP_CACHE`,
    or ~/.cache/robo_rl_warp, and silence its banner and per-module lines; returns the cache folder.

    `user` names a subfolder for another MuJoCo Warp build (mjlab's), whose kernels would otherwise share the
    folder with ours. Call it before anything compiles a kernel: Warp reads the folder when it initialises.
    """
    cache = Path(os.environ.get("ROBO_RL_WARP_CACHE") or (
        _REPO / ".cache" / "warp" if (_REPO / "pyproject.toml").is_file() else Path.home() / ".cache" / "robo_rl_warp"))
    cache = cache / user if user else cache
    wp.config.kernel_cache_dir = str(cache)
    wp.config.quiet = True  # no start-up banner
    if hasattr(wp, "LOG_WARNING"):
        wp.config.log_level = wp.LOG_WARNING  # no line per kernel module loaded
    return cache


def state_slices(model: mujoco.MjModel) -> dict[str, slice]:
    """Column ranges of each component inside an mjSTATE_FULLPHYSICS state vector."""
    parts = [
        ("time", mujoco.mjtState.mjSTATE_TIME),
        ("qpos", mujoco.mjtState.mjSTATE_QPOS),
        ("qvel", mujoco.mjtState.mjSTATE_QVEL),
        ("act", mujoco.mjtState.mjSTATE_ACT),
        ("history", mujoco.mjtState.mjSTATE_HISTORY),
        ("plugin", mujoco.mjtState.mjSTATE_PLUGIN),
    ]
    out, start = {}, 0
    for name, flag in parts:
        if int(flag) & int(FULL_PHYSICS) == 0:
            continue
        size = mujoco.mj_stateSize(model, flag)
        out[name] = slice(start, start + size)
        start += size
    if start != mujoco.mj_stateSize(model, FULL_PHYSICS):
        raise RuntimeError("unexpected mjSTATE_FULLPHYSICS layout in this MuJoCo version")
    return out


def load_model(path: str | Path) -> mujoco.MjModel:
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"MJCF file {str(p)!r} does not exist")
    return mujoco.MjModel.from_xml_path(str(p))


def default_state(model: mujoco.MjModel, data: mujoco.MjData, keyframe_id: int | None) -> np.ndarray:
    """(S,) float64 full-physics state of `model` at keyframe `keyframe_id` (None: the model's defaults).

    `data` is scratch; it is left at that state, with the keyframe's ctrl.
    """
    mujoco.mj_resetData(model, data)
    if keyframe_id is not None:
        mujoco.mj_resetDataKeyframe(model, data, keyframe_id)
    out = np.empty(mujoco.mj_stateSize(model, FULL_PHYSICS))
    mujoco.mj_getState(model, data, out, FULL_PHYSICS)
    return out


class ModelNames:
    """Names of the nominal model (`self.model`) resolved to ids and addresses, once, at task build time."""

    model: mujoco.MjModel

    def name_id(self, kind: str, name: str) -> int:
        """Id of a named object; ValueError listing the valid names when it does not exist."""
        if kind not in OBJ_TYPES:
            raise ValueError(f"object kind {kind!r}: allowed kinds are {', '.join(OBJ_TYPES)}")
        i = mujoco.mj_name2id(self.model, OBJ_TYPES[kind], name)
        if i < 0:
            raise ValueError(f"{kind} {name!r} is not in the model; {kind}s: {', '.join(self.names(kind))}")
        return i

    def names(self, kind: str) -> list[str]:
        count = {
            "joint": self.model.njnt,
            "body": self.model.nbody,
            "site": self.model.nsite,
            "sensor": self.model.nsensor,
            "actuator": self.model.nu,
            "geom": self.model.ngeom,
            "camera": self.model.ncam,
            "key": self.model.nkey,
        }[kind]
        return [mujoco.mj_id2name(self.model, OBJ_TYPES[kind], i) or "" for i in range(count)]

    def joint_qpos_index(self, names: Sequence[str]) -> torch.Tensor:
        """qpos addresses of 1-DoF joints (hinge/slide), in the given order."""
        return torch.tensor([int(self.model.jnt_qposadr[self.name_id("joint", n)]) for n in names])

    def joint_qvel_index(self, names: Sequence[str]) -> torch.Tensor:
        return torch.tensor([int(self.model.jnt_dofadr[self.name_id("joint", n)]) for n in names])

    def actuator_index(self, names: Sequence[str]) -> torch.Tensor:
        return torch.tensor([self.name_id("actuator", n) for n in names])

    def sensor_slice(self, name: str) -> slice:
        i = self.name_id("sensor", name)
        adr, dim = int(self.model.sensor_adr[i]), int(self.model.sensor_dim[i])
        return slice(adr, adr + dim)


def check_field(model: mujoco.MjModel, field: str) -> None:
    if not isinstance(getattr(model, field, None), np.ndarray):
        raise ValueError(f"MjModel has no array field {field!r}")


def as_numpy(x: torch.Tensor | np.ndarray, dtype: type = np.float64) -> np.ndarray:
    """A numpy array of `dtype` (a view of a CPU tensor that already has it)."""
    return np.asarray(x.numpy(force=True) if isinstance(x, torch.Tensor) else x, dtype=dtype)
