"""The builder that assembles a policy input from a RobotState, term by term from the term registry.

Each observation term's numpy function (`robo_rl.terms`) runs on the sources this robot provides: its joints
(matched by name), IMU, end-effector and object positions, the operator's commands and the previous action. A
parity test feeds the same physics states to the sim's torch functions and these, and requires equal
observations. Inputs are single states (no batch dimension); quaternions are (w, x, y, z).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from robo_rl.core.contract import DeployContract
from robo_rl.deploy.hardware import HardwareSpec
from robo_rl.deploy.robot import RobotState
from robo_rl.terms import OBSERVATION_TERMS

_BASE_ORIGIN = np.zeros(3)  # positions are reported in the robot base frame already

COMMON_SOURCES = ("joint_pos", "joint_vel", "default_joint_pos", "action", "base_pos")
"""Sources every robot provides (see `robo_rl.terms.SOURCES`)."""
IMU_SOURCES = ("base_quat", "base_ang_vel_b", "base_lin_vel_b")
"""Sources of a floating base with an IMU (a `legged` robot)."""
KIND_SOURCES = {
    "legged": IMU_SOURCES + ("velocity_command",),
    "arm": ("ee_pos", "target_pos", "object_pos"),
}
"""Further sources a robot of each hardware kind provides (state fields and operator commands)."""


def robot_sources(kind: str) -> tuple[str, ...]:
    """Sources the deploy side has on a robot of hardware `kind`."""
    return COMMON_SOURCES + KIND_SOURCES.get(kind, KIND_SOURCES["arm"])


def computable_terms(kind: str) -> tuple[str, ...]:
    """Observation terms the deploy side computes on a robot of `kind`: those with a numpy function whose
    inputs the robot provides."""
    have = set(robot_sources(kind))
    return tuple(name for name, r in OBSERVATION_TERMS.items() if r.numpy is not None and have.issuperset(r.inputs))


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
        self.joint_names = hw.robot_names(contract.joint_names)  # (J,) policy order, as the robot names them
        self._names: tuple[str, ...] | None = None
        self._index: np.ndarray | None = None  # state index of each policy joint
        # Past values of terms with history > 1, (history - 1, dim) oldest first; None until the first build.
        self._past: dict[str, np.ndarray] | None = None
        # The contract's term names and registry records, resolved once (not on every control tick).
        self._wanted = tuple(t.name for t in contract.observation)
        self._records = {n: OBSERVATION_TERMS.get(n) for n in self._wanted if n in OBSERVATION_TERMS}

    def reset(self) -> None:
        """Forget the observation history: the next `build` fills it with its own values (as a sim reset does)."""
        self._past = None

    def policy_index(self, state_names: tuple[str, ...]) -> np.ndarray:
        """For each policy joint, its position in `state_names`; ValueError naming missing joints."""
        if state_names != self._names:
            lookup = {n: i for i, n in enumerate(state_names)}
            missing = [n for n in self.joint_names if n not in lookup]
            if missing:
                raise ValueError(f"robot state lacks joint(s) {', '.join(missing)} that the policy needs")
            self._index = np.array([lookup[n] for n in self.joint_names], dtype=np.int64)
            self._names = state_names
        return self._index

    def sources(
        self, state: RobotState, *, commands: Mapping[str, np.ndarray], action: np.ndarray
    ) -> dict[str, np.ndarray]:
        """Every source this state, these commands and the previous action provide (`robo_rl.terms.SOURCES`)."""
        idx = self.policy_index(state.joint_names)
        out = {"joint_pos": state.q[idx], "joint_vel": state.dq[idx], "default_joint_pos": self.default_q,
               "action": action, "base_pos": _BASE_ORIGIN}
        optional = {
            "base_quat": None if state.imu_quat is None else to_wxyz(state.imu_quat, self.hw.quaternion_order),
            "base_ang_vel_b": state.imu_gyro,
            "base_lin_vel_b": state.base_lin_vel,
            "ee_pos": state.ee_pos,
            "object_pos": state.object_pos,
        }
        out.update({k: v for k, v in optional.items() if v is not None})
        out.update(commands)
        return out

    def terms(
        self, state: RobotState, *, commands: Mapping[str, np.ndarray], action: np.ndarray,
        names: Iterable[str] | None = None,
    ) -> dict[str, np.ndarray]:
        """Observation terms (default: every registered one) that this state and these commands provide, unscaled.

        Args:
            state: the robot's reading.
            commands: operator inputs by term name, e.g. {"velocity_command": (3,)} or {"target_pos": (3,)}.
            action: the previous policy action (A,).
            names: the terms wanted; those that cannot be computed here are left out.
        """
        sources = self.sources(state, commands=commands, action=action)
        out = {}
        for name in OBSERVATION_TERMS.names() if names is None else names:
            record = self._records.get(name) or (OBSERVATION_TERMS.get(name) if name in OBSERVATION_TERMS else None)
            if record is not None and record.numpy is not None and all(k in sources for k in record.inputs):
                out[name] = record.numpy(*(sources[k] for k in record.inputs))
        return out

    def build(self, state: RobotState, *, commands: Mapping[str, np.ndarray], action: np.ndarray) -> np.ndarray:
        """Policy input (O,) float32: terms in contract order, scaled and clipped like in training.

        A term with history h contributes its last h values, oldest first, as the sim side stacks them;
        call once per control step (each call advances the history) and `reset` when a new episode starts.
        """
        values = self.terms(state, commands=commands, action=action, names=self._wanted)
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
