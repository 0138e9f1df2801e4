"""Base linear-velocity estimation on the robot side: the legs in stance and the IMU, fused by a Kalman filter.

A robot reports its joints, its IMU (orientation, angular velocity, accelerometer) and its foot contact forces,
but not how fast its base moves. `BaseVelocityEstimator` estimates that velocity as legged_control's and Unitree's
examples do: a linear Kalman filter on the base velocity v (3,) in the world frame,

- predicted with the accelerometer: v += (R a_imu + g) dt, R the base orientation from the IMU quaternion;
- corrected by every foot in stance (its reported force above a threshold), which does not move on the ground:
  v_i = -R (w x r_i + J_i(q) dq), r_i the foot's position and J_i its translational Jacobian w.r.t. its leg's
  joints, both in the base frame (`LegKinematics`), w the gyro; plus, for a round foot, the velocity of its
  centre as it rolls over its contact point (`kinematic_base_velocity`). A foot that disagrees with the prediction
  beyond a chi-square gate (landing, lifting off, slipping) is ignored.

The estimate is returned in the base frame (R^T v), as `RobotState.base_lin_vel` holds it. `EstimatingRobot` wraps
any robot so that every state it reads carries the estimate; `PolicyRuntime.attach` wraps the robot of every
transport this way when the hardware file configures `estimator.base_velocity` (`make_base_velocity_estimator`).

The legs' kinematic chains are read once from the robot's MJCF (the hardware file's `transport.sim.model`, the
model of its twin) with mujoco; every tick then runs in numpy (`robo_rl.terms.kinematics.SerialChain`).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from robo_rl.core.assets import find_asset
from robo_rl.deploy.hardware import BaseVelocityConfig, HardwareSpec
from robo_rl.deploy.robot import RobotInterface, RobotState, RobotWrapper
from robo_rl.deploy.safety import name_index, quat_wxyz
from robo_rl.terms.kinematics import SerialChain, quat_to_matrix, serial_chain

GRAVITY_W = np.array([0.0, 0.0, -9.81])
"""Gravity in the world frame (m/s^2), z up: what an accelerometer at rest does not read."""
FOOT_SITE = "{foot}_foot_site"
"""The model's site at each foot (the point that rests on the ground in stance)."""


# ---------------------------------------------------------------------------------------------- kinematics
def read_legs(model_path: str | Path, feet: tuple[str, ...]) -> tuple[list[dict[str, Any]], np.ndarray]:
    """Per foot, the kinematic chain (robo_rl.terms.kinematics format) from the base to `<foot>_foot_site`, and the
    foot's radius (F,) (m): that of a sphere geom centred on the site, 0 for a point foot.

    Raises:
        ImportError: mujoco is not installed.
        ValueError: one line: the model lacks a foot site or has a leg that is not a serial hinge chain.
    """
    from robo_rl.core.headless_gl import choose_headless_gl

    choose_headless_gl()  # before this process's first mujoco import: a twin's cameras may render later
    import mujoco  # read once at start; the ticks run in numpy

    model = mujoco.MjModel.from_xml_path(str(model_path))
    sites = [FOOT_SITE.format(foot=foot) for foot in feet]
    ids = [mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SITE, s) for s in sites]
    missing = [s for s, i in zip(sites, ids, strict=True) if i < 0]
    if missing:
        raise ValueError(f"the base velocity estimator needs the foot site(s) {', '.join(missing)} in {model_path} "
                         "(one <foot>_foot_site per entry of the hardware file's feet)")
    radii = np.zeros(len(feet))  # (F,)
    for f, site in enumerate(ids):
        body = model.site_bodyid[site]
        for g in range(model.ngeom):
            if (model.geom_bodyid[g] == body and model.geom_type[g] == mujoco.mjtGeom.mjGEOM_SPHERE
                    and np.allclose(model.geom_pos[g], model.site_pos[site])):
                radii[f] = max(radii[f], float(model.geom_size[g, 0]))
    return [serial_chain(model, site) for site in sites], radii


class LegKinematics:
    """Position (3,) and Jacobian (6, K) of each foot in the base frame, numpy only.

    Args:
        feet: the feet, in the robot's foot_force order.
        chains: per foot, the chain from the base to its foot site (`read_legs`), all with K joints.
        radii: (F,) foot radii (m); 0 for point feet.
    """

    def __init__(self, feet: tuple[str, ...], chains: list[dict[str, Any]], radii: np.ndarray | None = None):
        if len(chains) != len(feet):
            raise ValueError(f"{len(chains)} leg chains for {len(feet)} feet")
        self.feet = feet
        self.radii = np.zeros(len(feet)) if radii is None else np.asarray(radii, dtype=np.float64)  # (F,)
        self.chains = [SerialChain(c) for c in chains]
        sizes = {c.num_joints for c in self.chains}
        if len(sizes) != 1:
            raise ValueError(f"the legs have different numbers of joints ({sorted(sizes)}); one size is supported")
        self.joint_names = tuple(n for c in self.chains for n in c.joint_names)  # (F * K,) foot by foot
        self._index: tuple[tuple[str, ...], np.ndarray | None] | None = None  # (state order, gather)

    @property
    def joints_per_leg(self) -> int:
        return self.chains[0].num_joints

    def leg_joints(self, names: tuple[str, ...], values: np.ndarray) -> np.ndarray:
        """(F, K) of `values` (J,) given in the order `names` (a state's joint order), foot by foot."""
        if self._index is None or self._index[0] != names:
            self._index = (names, name_index(names, self.joint_names))
        gather = self._index[1]
        picked = values if gather is None else values[gather]
        return np.asarray(picked, dtype=np.float64).reshape(len(self.feet), self.joints_per_leg)  # (F, K)

    def foot_jacobians(self, q_legs: np.ndarray, feet: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Foot positions (M, 3) and Jacobians (M, 6, K: translational rows, then rotational) in the base frame at
        joints q_legs (F, K), for the M feet `feet` selects ((F,) bool; None: all)."""
        pos, jac = [], []
        for f in range(len(self.feet)) if feet is None else np.flatnonzero(feet):
            p, _, j = self.chains[f].jacobian(q_legs[f])
            pos.append(p)
            jac.append(j)
        if not pos:
            return np.zeros((0, 3)), np.zeros((0, 6, self.joints_per_leg))
        return np.stack(pos), np.stack(jac)  # (M, 3), (M, 6, K)


def kinematic_base_velocity(foot_pos_b: np.ndarray, foot_jac_b: np.ndarray, dq_legs: np.ndarray, gyro_b: np.ndarray,
                            up_b: np.ndarray, radii: np.ndarray) -> np.ndarray:
    """(F, 3) base velocity in the base frame that each foot implies if its contact point stands still.

    The foot's centre moves at w x r_i + J_i dq_i relative to the world-fixed base velocity; a round foot's centre
    also rolls over its contact point, one radius below it along the world's up: v_centre = w_foot x (radius up).
    Hence v_base = -(w x r_i + J_i dq_i) + w_foot_i x (radius_i up), w_foot_i = w + Jrot_i dq_i.

    Args:
        foot_pos_b: (F, 3) foot centres; foot_jac_b: (F, 6, K) their Jacobians (translational rows first);
            dq_legs: (F, K) leg joint velocities; gyro_b: (3,) base angular velocity; up_b: (3,) the world's up
            direction; radii: (F,) foot radii (m). All in the base frame.
    """
    dq = dq_legs[:, :, None]  # (F, K, 1)
    centre_b = np.cross(gyro_b, foot_pos_b) + (foot_jac_b[:, :3] @ dq)[..., 0]  # (F, 3)
    spin_b = gyro_b + (foot_jac_b[:, 3:] @ dq)[..., 0]  # (F, 3) foot angular velocity
    roll_b = np.cross(spin_b, radii[:, None] * up_b)  # (F, 3)
    return roll_b - centre_b


def base_rotation(quat: np.ndarray, order: str) -> np.ndarray:
    """(3, 3) rotation base -> world of an IMU quaternion (4,) given in `order` (wxyz or xyzw)."""
    return quat_to_matrix(np.array(quat_wxyz(quat, order)))


# ---------------------------------------------------------------------------------------------- the filter
def kf_predict(v: np.ndarray, p: np.ndarray, acc_w: np.ndarray, dt: float, accel_noise: float
               ) -> tuple[np.ndarray, np.ndarray]:
    """Velocity (3,) and covariance (3, 3) after integrating the world acceleration acc_w (3,) over dt (s)."""
    return v + acc_w * dt, p + (accel_noise**2 * dt) * np.eye(3)


def kf_update(v: np.ndarray, p: np.ndarray, measurements: np.ndarray, noise_std: float, gate: float
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Velocity (3,), covariance (3, 3) and which measurements were used (M,) after direct measurements of v
    (M, 3), each with isotropic noise `noise_std` (m/s), one after the other (the noises are independent); a
    measurement whose innovation's squared Mahalanobis distance exceeds `gate` is an outlier and is skipped."""
    r = noise_std**2 * np.eye(3)
    used = np.zeros(len(measurements), dtype=bool)
    for i, z in enumerate(measurements):
        s_inv = np.linalg.inv(p + r)  # (3, 3) innovation covariance, inverted
        innovation = z - v
        if innovation @ s_inv @ innovation > gate:
            continue
        gain = p @ s_inv  # (3, 3)
        v = v + gain @ innovation
        p = (np.eye(3) - gain) @ p
        used[i] = True
    return v, 0.5 * (p + p.T), used  # P kept symmetric


class BaseVelocityEstimator:
    """Kalman filter on the base linear velocity (module docstring): `update(state)` -> (3,) base frame.

    State: v (3,), the base velocity in the world frame, with covariance P (3, 3). The noises and the contact
    threshold are `config`'s (hardware `estimator.base_velocity`; its field docstrings give the defaults).

    Args:
        legs: the feet's kinematics (`LegKinematics`), in the robot's foot_force order.
        config: contact threshold (N), accelerometer and leg-velocity noise, outlier gate, first-estimate spread,
            largest dt (`BaseVelocityConfig`).
        quaternion_order: order of the robot's IMU quaternion (the hardware file's).
    """

    def __init__(self, legs: LegKinematics, config: BaseVelocityConfig | None = None, *,
                 quaternion_order: str = "wxyz"):
        self.legs = legs
        self.config = config or BaseVelocityConfig()
        self.quaternion_order = quaternion_order
        self.reset()

    def reset(self) -> None:
        """Forget the estimate: the next update starts afresh from the legs."""
        self.v_w: np.ndarray | None = None  # (3,) world frame
        self.p = np.eye(3)  # (3, 3)
        self.stamp: float | None = None
        self.estimate_b: np.ndarray | None = None  # (3,) the last output
        self.stance = np.zeros(len(self.legs.feet), dtype=bool)  # (F,) feet in stance at the last update
        self.used = np.zeros(len(self.legs.feet), dtype=bool)  # (F,) stance feet the last update used
        self.ignored_s = 0.0  # how long every stance foot has been an outlier (s)

    def contacts(self, foot_force: np.ndarray) -> np.ndarray:
        """(F,) True for the feet in stance: reported force above the threshold."""
        return np.asarray(foot_force, dtype=np.float64) > self.config.contact_threshold_n

    def leg_measurements(self, state: RobotState, rot: np.ndarray, feet: np.ndarray) -> np.ndarray:
        """(M, 3) base velocity in the world frame implied by each foot `feet` ((F,) bool) selects standing still."""
        q_legs = self.legs.leg_joints(state.joint_names, state.q)  # (F, K)
        dq_legs = self.legs.leg_joints(state.joint_names, state.dq)[feet]  # (M, K)
        pos, jac = self.legs.foot_jacobians(q_legs, feet)
        up_b = rot[2]  # the world's z axis in the base frame (R^T e_z)
        v_b = kinematic_base_velocity(pos, jac, dq_legs, np.asarray(state.imu_gyro, dtype=np.float64), up_b,
                                      self.legs.radii[feet])  # (M, 3)
        return v_b @ rot.T  # (M, 3) world

    def _start(self, measured: np.ndarray) -> None:
        """Start from the mean of the stance feet's measurements (M, 3), or at rest, unsure, with none."""
        c = self.config
        if len(measured):
            self.v_w, self.p = measured.mean(axis=0), (c.leg_velocity_noise**2 / len(measured)) * np.eye(3)
        else:
            self.v_w, self.p = np.zeros(3), c.initial_velocity_std**2 * np.eye(3)
        self.ignored_s = 0.0

    def update(self, state: RobotState) -> np.ndarray:
        """The base velocity (3,) in the base frame after this state: the previous estimate again for a state with
        the same stamp; a fresh start for one older than the last (the robot's clock restarted or wrapped).

        Raises:
            ValueError: one line: the state lacks an input (imu_quat, imu_gyro, imu_acc, foot_force), holds a
                non-finite one, or reports a number of foot forces other than the hardware file's feet.
        """
        check_inputs(state, len(self.legs.feet))
        if self.stamp is not None and state.stamp == self.stamp:
            return self.estimate_b.copy()  # the same reading again (a second read in one tick): nothing new
        if self.stamp is not None and state.stamp < self.stamp:
            self.reset()
        c = self.config
        rot = base_rotation(state.imu_quat, self.quaternion_order)
        stance = self.contacts(state.foot_force)
        measured = self.leg_measurements(state, rot, stance)  # (M, 3), M feet in stance
        used = np.zeros(len(measured), dtype=bool)
        if self.v_w is None:  # the first reading
            self._start(measured)
        else:
            dt = float(np.clip(state.stamp - self.stamp, 0.0, c.max_dt_s))
            acc_w = rot @ np.asarray(state.imu_acc, dtype=np.float64) + GRAVITY_W
            self.v_w, self.p = kf_predict(self.v_w, self.p, acc_w, dt, c.accel_noise)
            self.v_w, self.p, used = kf_update(self.v_w, self.p, measured, c.leg_velocity_noise, c.outlier_gate)
            self.ignored_s = self.ignored_s + dt if len(measured) and not used.any() else 0.0
            if self.ignored_s > c.outlier_timeout_s:  # the legs agree among themselves, not with the prediction
                self._start(measured)
        self.used = np.zeros_like(stance)
        self.used[stance] = used
        self.stamp = float(state.stamp)
        self.stance = stance
        self.estimate_b = rot.T @ self.v_w
        return self.estimate_b.copy()


def check_inputs(state: RobotState, num_feet: int) -> None:
    """ValueError (one line) unless `state` carries every input of the estimator, finite, foot forces for each
    foot."""
    names = ("imu_quat", "imu_gyro", "imu_acc", "foot_force")
    missing = [n for n in names if getattr(state, n) is None]
    if missing:
        raise ValueError(f"the base velocity estimator needs {', '.join(missing)}: the robot does not report "
                         f"{'it' if len(missing) == 1 else 'them'}")
    if np.shape(state.foot_force) != (num_feet,):
        raise ValueError(f"foot_force has shape {np.shape(state.foot_force)}; the hardware file lists {num_feet} "
                         "feet")
    bad = [n for n in names + ("q", "dq") if not np.isfinite(getattr(state, n)).all()]
    if bad:
        raise ValueError(f"the base velocity estimator got non-finite {', '.join(bad)}")


# ---------------------------------------------------------------------------------------------- wiring
def make_base_velocity_estimator(hw: HardwareSpec, warn: Callable[[str], None] | None = None
                                 ) -> BaseVelocityEstimator | None:
    """The estimator the hardware file configures (`estimator.base_velocity`), or None when it configures none.

    Without mujoco (a robot-side install needs none) the estimator is off: None, and one line to `warn`; the
    consumers of base_lin_vel (the velocity_tracking reward, a policy observing it) then say what they lack.

    Raises:
        ValueError: one line: no model to read the legs from (transport.sim.model), or the model lacks a foot.
    """
    config = hw.estimator.base_velocity
    if config is None:
        return None
    model = (hw.transport.get("sim") or {}).get("model")
    if model is None:
        raise ValueError(f"hardware {hw.robot!r}: estimator.base_velocity reads the legs from transport.sim.model "
                         "(the robot's MJCF), which is missing")
    path = find_asset(model, what=f"model of {hw.robot!r} (legs of the base velocity estimator)")
    try:
        legs = LegKinematics(hw.feet, *read_legs(path, hw.feet))
    except ImportError:
        if warn is not None:
            warn(f"base velocity estimator off: it reads the legs from {model} with mujoco, which is not installed "
                 "(pip install mujoco); state.base_lin_vel stays empty")
        return None
    name_index(hw.joint_names, legs.joint_names)  # every leg joint is a joint of the robot (ValueError names any)
    return BaseVelocityEstimator(legs, config, quaternion_order=hw.quaternion_order)


class EstimatingRobot(RobotWrapper):
    """A robot whose states carry the estimator's base velocity when the robot itself reports none.

    Every `read_state` feeds the estimator and returns a copy of the state with `base_lin_vel` set. A state the
    estimator cannot use (the robot does not report its IMU accelerometer or foot forces) passes through unchanged:
    the estimate is an input of rewards and observations, which say themselves what they lack; the robot's loop
    goes on. Its reason is kept in `last_error` and given once to `warn`. Thread-safe (the control thread and a
    reset module read the state).

    Args:
        robot: the robot as connected.
        estimator: the base velocity estimator (reset here).
        warn: receives one line the first time a state cannot be used (and again when the reason changes).
    """

    def __init__(self, robot: RobotInterface, estimator: BaseVelocityEstimator,
                 warn: Callable[[str], None] | None = None):
        super().__init__(robot)
        self.estimator = estimator
        self.warn = warn
        self.last_error: str | None = None
        self._lock = threading.Lock()
        estimator.reset()

    def read_state(self) -> RobotState:
        with self._lock:
            state = self.robot.read_state()
            if state.base_lin_vel is not None:
                return state
            try:
                estimate = self.estimator.update(state)
            except ValueError as exc:
                if str(exc) != self.last_error and self.warn is not None:
                    self.warn(f"base velocity estimate unavailable: {exc}")
                self.last_error = str(exc)
                return state
        return dataclasses.replace(state, base_lin_vel=estimate)

