"""Observation terms in numpy, named exactly like the sim-side torch terms in
`robo_rl.tasks.observations`, and the builder that assembles a policy input from a RobotState.

A parity test feeds the same physics states to both sides and requires equal observations.
Inputs are single states (no batch dimension); quaternions are (w, x, y, z).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from robo_rl.core.contract import DeployContract
from robo_rl.deploy.hardware import HardwareSpec
from robo_rl.deploy.robot import RobotState

_BASE_ORIGIN = np.zeros(3)  # positions are reported in the robot base frame already
_DOWN = np.array([0.0, 0.0, -1.0])


def quat_rotate_inverse(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Rotate world-frame v (3,) into the frame of unit quaternion q (4,): R(q)^T v."""
    w, xyz = q[0], q[1:]
    t = 2.0 * np.cross(xyz, v)
    return v - w * t + np.cross(xyz, t)


def base_ang_vel(ang_vel_b: np.ndarray) -> np.ndarray:
    return ang_vel_b


def base_lin_vel(base_quat: np.ndarray, lin_vel_w: np.ndarray) -> np.ndarray:
    return quat_rotate_inverse(base_quat, lin_vel_w)


def projected_gravity(base_quat: np.ndarray) -> np.ndarray:
    return quat_rotate_inverse(base_quat, _DOWN)


def velocity_command(command: np.ndarray) -> np.ndarray:
    return command


def joint_pos_rel(joint_pos: np.ndarray, default_joint_pos: np.ndarray) -> np.ndarray:
    return joint_pos - default_joint_pos


def joint_vel(joint_vel_: np.ndarray) -> np.ndarray:
    return joint_vel_


def last_action(action: np.ndarray) -> np.ndarray:
    return action


def ee_pos(ee_pos_b: np.ndarray, base_pos: np.ndarray) -> np.ndarray:
    return ee_pos_b - base_pos


def target_pos(target_pos_b: np.ndarray, base_pos: np.ndarray) -> np.ndarray:
    return target_pos_b - base_pos


def object_pos(object_pos_b: np.ndarray, base_pos: np.ndarray) -> np.ndarray:
    return object_pos_b - base_pos


def to_wxyz(quat: np.ndarray, order: str) -> np.ndarray:
    """A quaternion in the robot's order ("wxyz" or "xyzw") as (w, x, y, z)."""
    return quat if order == "wxyz" else np.array([quat[3], quat[0], quat[1], quat[2]])


class ObservationBuilder:
    """Builds the policy input (O,) float32 from a RobotState, in contract term order.

    Joints are matched by name: the state's joint order may differ from both the hardware file
    and the policy; the mapping is recomputed whenever the state's name list changes.

    Args:
        contract: the policy's deploy contract.
        hw: the robot's hardware description (quaternion order).
    """

    def __init__(self, contract: DeployContract, hw: HardwareSpec):
        self.contract = contract
        self.hw = hw
        self.default_q = np.asarray(contract.default_joint_pos)  # (J,) policy order
        self._names: tuple[str, ...] | None = None
        self._index: np.ndarray | None = None  # state index of each policy joint
        # Past values of terms with history > 1, (history - 1, dim) oldest first; None until the first build.
        self._past: dict[str, np.ndarray] | None = None

    def reset(self) -> None:
        """Forget the observation history: the next `build` fills it with its own values (as a sim reset does)."""
        self._past = None

    def policy_index(self, state_names: tuple[str, ...]) -> np.ndarray:
        """For each policy joint, its position in `state_names`; ValueError naming missing joints."""
        if state_names != self._names:
            lookup = {n: i for i, n in enumerate(state_names)}
            missing = [n for n in self.contract.joint_names if n not in lookup]
            if missing:
                raise ValueError(f"robot state lacks joint(s) {', '.join(missing)} that the policy needs")
            self._index = np.array([lookup[n] for n in self.contract.joint_names], dtype=np.int64)
            self._names = state_names
        return self._index

    def terms(
        self, state: RobotState, *, commands: Mapping[str, np.ndarray], action: np.ndarray
    ) -> dict[str, np.ndarray]:
        """Every term this state and these commands provide, unscaled.

        Args:
            state: the robot's reading.
            commands: operator inputs by term name, e.g. {"velocity_command": (3,)} or {"target_pos": (3,)}.
            action: the previous policy action (A,).
        """
        idx = self.policy_index(state.joint_names)
        out = {
            "joint_pos_rel": joint_pos_rel(state.q[idx], self.default_q),
            "joint_vel": joint_vel(state.dq[idx]),
            "last_action": last_action(action),
        }
        if state.imu_quat is not None:
            out["projected_gravity"] = projected_gravity(to_wxyz(state.imu_quat, self.hw.quaternion_order))
        if state.imu_gyro is not None:
            out["base_ang_vel"] = base_ang_vel(state.imu_gyro)
        if state.base_lin_vel is not None:
            out["base_lin_vel"] = state.base_lin_vel
        if state.ee_pos is not None:
            out["ee_pos"] = ee_pos(state.ee_pos, _BASE_ORIGIN)
        if state.object_pos is not None:
            out["object_pos"] = object_pos(state.object_pos, _BASE_ORIGIN)
        if "velocity_command" in commands:
            out["velocity_command"] = velocity_command(commands["velocity_command"])
        if "target_pos" in commands:
            out["target_pos"] = target_pos(commands["target_pos"], _BASE_ORIGIN)
        return out

    def build(self, state: RobotState, *, commands: Mapping[str, np.ndarray], action: np.ndarray) -> np.ndarray:
        """Policy input (O,) float32: terms in contract order, scaled and clipped like in training.

        A term with history h contributes its last h values, oldest first, as the sim side stacks them;
        call once per control step (each call advances the history) and `reset` when a new episode starts.
        """
        values = self.terms(state, commands=commands, action=action)
        first = self._past is None
        if first:
            self._past = {}
        parts = []
        for term in self.contract.observation:
            if term.name not in values:
                raise ValueError(f"observation term {term.name!r} cannot be computed from this robot's state")
            v = np.asarray(values[term.name], dtype=np.float32) * np.float32(term.scale)
            if term.clip is not None:
                v = np.clip(v, -term.clip, term.clip)
            if term.history > 1:
                if first:
                    self._past[term.name] = np.repeat(v[None], term.history - 1, axis=0)  # (h - 1, dim)
                past = self._past[term.name]
                parts.append(past.reshape(-1).copy())
                past[:-1] = past[1:]
                past[-1] = v
            parts.append(v)
        return np.concatenate(parts)
