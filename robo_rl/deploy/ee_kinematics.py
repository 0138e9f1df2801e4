"""The end-effector position from the joints, for a robot that does not report it (franka_ros2 publishes no
`ee_position`).

`EndEffectorKinematics` is the forward kinematics of the arm's chain from its base to the site of the model's
`ee_pos` sensor, the point the twin reports and training observed; the chain is read once from the robot's MJCF (the
hardware file's `transport.sim.model`) with mujoco, every tick runs in numpy (`robo_rl.terms.kinematics.SerialChain`).
`KinematicRobot` wraps any robot so that every state it reads carries ee_pos when the robot reports none;
`PolicyRuntime.attach` wraps the robot of every transport this way when the policy observes `ee_pos`
(`make_ee_kinematics`), as it wraps a legged robot in `robo_rl.deploy.estimation.EstimatingRobot`.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from robo_rl.core.assets import find_asset
from robo_rl.deploy.hardware import HardwareSpec
from robo_rl.deploy.robot import RobotInterface, RobotState, RobotWrapper
from robo_rl.deploy.safety import name_index
from robo_rl.terms.kinematics import SerialChain, serial_chain

EE_SENSOR = "ee_pos"
"""The model's framepos sensor of the end effector: the twin reports it as ee_pos, training observed it."""


def read_ee_chain(model_path: str | Path) -> dict[str, Any]:
    """The kinematic chain (robo_rl.terms.kinematics format) from the robot's base to the site of the model's
    `ee_pos` sensor.

    Raises:
        ImportError: mujoco is not installed.
        ValueError: one line: the model has no `ee_pos` framepos sensor on a site, or the chain is not serial hinges.
    """
    from robo_rl.core.headless_gl import choose_headless_gl

    choose_headless_gl()  # before this process's first mujoco import: a twin's cameras may render later
    import mujoco  # read once at start; the ticks run in numpy

    model = mujoco.MjModel.from_xml_path(str(model_path))
    sensor = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SENSOR, EE_SENSOR)
    if (sensor < 0 or model.sensor_type[sensor] != mujoco.mjtSensor.mjSENS_FRAMEPOS
            or model.sensor_objtype[sensor] != mujoco.mjtObj.mjOBJ_SITE):
        raise ValueError(f"{model_path} has no framepos sensor {EE_SENSOR!r} on a site: the end effector the policy "
                         "observes is not defined for the forward kinematics")
    site = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_SITE, int(model.sensor_objid[sensor]))
    return serial_chain(model, site)


class EndEffectorKinematics:
    """ee_pos (3,) in the robot's base frame from a state's joint positions, matched by name, numpy only.

    Args:
        chain: the chain from the base to the end-effector site (`read_ee_chain`), joints named as the model does.
        hw: the robot: the chain's joints are mapped onto its names (model_joint_names).
    """

    def __init__(self, chain: dict[str, Any], hw: HardwareSpec):
        self.chain = SerialChain(chain)
        self.joint_names = hw.robot_names(self.chain.joint_names)  # (K,) as the robot reports them
        missing = [n for n in self.joint_names if n not in hw.joint_names]
        if missing:
            raise ValueError(f"the end-effector chain moves joint(s) {', '.join(missing)}, not joints of hardware "
                             f"{hw.robot!r} (model_joint_names maps the model's names onto the robot's)")
        self._index: tuple[tuple[str, ...], np.ndarray | None] | None = None  # (state order, gather)

    def position(self, names: tuple[str, ...], q: np.ndarray) -> np.ndarray:
        """(3,) end-effector position for joint positions q (J,) given in the order `names`; ValueError when a chain
        joint is missing."""
        if self._index is None or self._index[0] != names:
            self._index = (names, name_index(names, self.joint_names))
        gather = self._index[1]
        q = np.asarray(q, dtype=np.float64)
        return self.chain.forward(q if gather is None else q[gather])[0]


def make_ee_kinematics(hw: HardwareSpec, observes_ee: bool, warn: Callable[[str], None] | None = None
                       ) -> EndEffectorKinematics | None:
    """The forward kinematics that fills ee_pos, or None when the policy does not observe it (`observes_ee`), the
    robot is not an arm, or the hardware file names no model (transport.sim.model): the robot must report ee_pos then.

    Without mujoco (a robot-side install needs none) it is off: None, and one line to `warn`.

    Raises:
        ValueError: one line: the model lacks the `ee_pos` sensor, or its chain moves joints the robot lacks.
    """
    model = (hw.transport.get("sim") or {}).get("model")
    if not observes_ee or hw.kind != "arm" or model is None:
        return None
    path = find_asset(model, what=f"model of {hw.robot!r} (end-effector forward kinematics)")
    try:
        chain = read_ee_chain(path)
    except ImportError:
        if warn is not None:
            warn(f"end-effector forward kinematics off: it reads the arm from {model} with mujoco, which is not "
                 "installed (pip install mujoco); the robot must report ee_position")
        return None
    return EndEffectorKinematics(chain, hw)


class KinematicRobot(RobotWrapper):
    """A robot whose states carry the forward kinematics' ee_pos when the robot itself reports none.

    A state whose joints cannot be mapped passes through unchanged (the safety filter damps such a state). Thread-safe
    (the control thread and a reset module read the state).

    Args:
        robot: the robot as connected.
        kinematics: the end effector's forward kinematics.
    """

    def __init__(self, robot: RobotInterface, kinematics: EndEffectorKinematics):
        super().__init__(robot)
        self.kinematics = kinematics
        self._lock = threading.Lock()

    def read_state(self) -> RobotState:
        state = self.robot.read_state()
        if state.ee_pos is not None:
            return state
        try:
            with self._lock:
                ee = self.kinematics.position(tuple(state.joint_names), state.q)
        except (ValueError, IndexError):
            return state
        return dataclasses.replace(state, ee_pos=ee)

