"""A task's MuJoCo model: its MJCF file checked, loaded (with optional motor lag) and compiled."""

from __future__ import annotations

from typing import Any

from robo_rl.core.assets import find_asset
from robo_rl.core.config import ConfigError
from robo_rl.sim.mujoco_cpu import load_model


def check_model_file(model: str, path: str = "env.model") -> None:
    """ConfigError unless `model` names an existing MJCF file (found by `robo_rl.core.assets.find_asset`)."""
    if not model.strip():
        raise ConfigError(f"config error: {path} = {model!r}: expected the path of an MJCF file")
    try:
        find_asset(model, what="MJCF file")
    except ValueError as exc:
        raise ConfigError(f"config error: {path} = {model!r}: {exc}") from None


def load_mjcf(model: str, *, motor_lag_s: float = 0.0, lag_actuators: tuple[str, ...] = ()) -> Any:
    """The MjModel of a task's MJCF; ConfigError (one line) when it is missing or MuJoCo cannot compile it.

    motor_lag_s > 0 gives the actuators `lag_actuators` a first-order lag (see `add_motor_lag`).
    """
    check_model_file(model)
    try:
        if motor_lag_s <= 0.0:
            return load_model(find_asset(model))
        import mujoco

        spec = mujoco.MjSpec.from_file(str(find_asset(model)))
        add_motor_lag(spec, lag_actuators, motor_lag_s)
        return spec.compile()
    except ValueError as exc:  # mujoco reports XML and compile errors as ValueError
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"config error: env.model = {model!r}: MuJoCo cannot load it: {first}") from None


def add_motor_lag(spec: Any, actuators: tuple[str, ...], motor_lag_s: float) -> None:
    """Give `actuators` of an MjSpec a first-order lag of time constant motor_lag_s (0: none).

    MuJoCo's exact `filterexact` dynamics: the commanded position moves toward ctrl with that time
    constant, integrated every physics step, and the lagged value is part of the state.
    """
    if motor_lag_s <= 0.0:
        return
    import mujoco

    for name in actuators:
        actuator = spec.actuator(name)
        if actuator is None:
            raise ConfigError(f"config error: env.motor_lag_s: the model has no actuator {name!r} to delay")
        actuator.dyntype = mujoco.mjtDyn.mjDYN_FILTEREXACT
        actuator.dynprm[0] = motor_lag_s
