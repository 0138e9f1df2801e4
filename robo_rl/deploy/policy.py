"""Load an exported policy, check its contract against the robot, and run it on robot states.

numpy + onnxruntime only.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from robo_rl.core.contract import DeployContract
from robo_rl.deploy.actions import ActionMap
from robo_rl.deploy.hardware import HardwareSpec, check_setpoint_rate
from robo_rl.deploy.observations import IMU_SOURCES, ObservationBuilder, computable_terms
from robo_rl.deploy.operator_commands import OperatorCommands
from robo_rl.deploy.policy_inputs import PolicyInputs
from robo_rl.deploy.robot import RobotState
from robo_rl.terms import ACTION_TERMS, OBSERVATION_TERMS
from robo_rl.terms import validate_contract as validate_terms

# The file format shared with the exporter (robo_rl.export.onnx_export): metadata key and tensor names.
CONTRACT_KEY = "robo_rl.contract"
INPUT_NAME = "obs"
NOISE_NAME = "noise"
"""Second input of a flow policy that samples its initial noise x_0 (contract extra.flow.noise_input_dim wide)."""
OUTPUT_NAMES = ("actions", "joint_targets")


def graph_input_names(contract: DeployContract, noise_dim: int) -> list[str]:
    """The exported graph's inputs, in order: `obs`, `noise` when it takes a flow policy's x_0 (`noise_dim` > 0), then
    the contract's input terms (a VLA's `image:<camera>`, `instruction`)."""
    return [INPUT_NAME, *([NOISE_NAME] if noise_dim else []), *(t.name for t in contract.inputs)]


class OnnxPolicy:
    """An exported policy file and the contract it carries.

    Raises ValueError (one line) if the file is missing, corrupt or truncated, has no contract, a
    malformed one (`DeployContract.validate`), or its inputs and outputs are not the ones the exporter
    writes.
    """

    def __init__(self, path: str | Path):
        import onnxruntime as ort

        p = Path(path)
        if not p.is_file():
            raise ValueError(f"policy file {str(p)!r} does not exist")
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1  # small MLPs: threading only adds latency
        options.inter_op_num_threads = 1
        try:
            self.session = ort.InferenceSession(str(p), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises several types for corrupt files
            reason = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__
            raise ValueError(f"policy file {p} cannot be loaded (corrupt or truncated?): {reason}") from None
        meta = self.session.get_modelmeta().custom_metadata_map
        if CONTRACT_KEY not in meta:
            raise ValueError(f"policy file {p} carries no deploy contract (metadata key {CONTRACT_KEY!r})")
        self.contract = DeployContract.from_json(meta[CONTRACT_KEY])
        validate_terms(self.contract)  # before anything below relies on its fields
        inputs = [i.name for i in self.session.get_inputs()]
        outputs = [o.name for o in self.session.get_outputs()]
        self.noise_dim = int((self.contract.extra.get("flow") or {}).get("noise_input_dim", 0))
        expected = graph_input_names(self.contract, self.noise_dim)
        if inputs != expected or tuple(outputs) != OUTPUT_NAMES:
            raise ValueError(f"policy file {p} has inputs {inputs} and outputs {outputs}; expected {expected} and "
                             f"{list(OUTPUT_NAMES)}")
        chunk = self.contract.action.chunk
        shape = self.session.get_outputs()[0].shape  # [batch, A] or [batch, E, A]
        if (len(shape) == 3) != (chunk > 1) or (chunk > 1 and shape[1] != chunk):
            raise ValueError(f"policy file {p}: output actions of shape {shape} do not match the contract's "
                             f"action.chunk = {chunk}")
        self.rng = np.random.default_rng(0)
        """Draws a flow policy's initial noise (standard normal) for every inference."""
        self._noise = np.empty((1, self.noise_dim), dtype=np.float32)  # one observation's noise, reused every tick
        width = self.session.get_inputs()[0].shape[-1]
        if width != self.contract.obs_dim:
            raise ValueError(
                f"policy file {p}: input width {width} differs from the contract's {self.contract.obs_dim}"
            )
        for graph_input, term in zip(self.session.get_inputs()[len(inputs) - len(self.contract.inputs):],
                                     self.contract.inputs, strict=True):
            shape = [term.params["height"], term.params["width"]] if "height" in term.params else [term.dim]
            if list(graph_input.shape[-len(shape):]) != shape:
                raise ValueError(f"policy file {p}: input {term.name} of shape {graph_input.shape} does not match the "
                                 f"contract's {shape}")
        self.path = p

    def __call__(self, obs: np.ndarray, inputs: Mapping[str, np.ndarray] | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
        """obs (O,) or (B, O) float32 -> (actions (A,) or (B, A), joint_targets (J,) or (B, J), contract joint order).

        `inputs`: the contract's input terms ({name: (B, ...) array}, batched like obs), for a policy that has them
        (a VLA: `robo_rl.deploy.policy_inputs`).

        A policy with contract action.chunk E > 1 returns chunks: (E, A) and (E, J), or (B, E, A) and (B, E, J).

        joint_targets is NaN for the joints of state-dependent action terms (ee_delta, gripper): `PolicyStep`
        computes every target with `robo_rl.deploy.actions.ActionMap` instead.
        """
        batch = obs[None] if obs.ndim == 1 else obs
        feed = {INPUT_NAME: batch.astype(np.float32, copy=False)}
        if self.noise_dim:  # a flow policy's x_0 ~ N(0, I), as in simulation
            noise = self._noise if batch.shape[0] == 1 else np.empty((batch.shape[0], self.noise_dim), np.float32)
            feed[NOISE_NAME] = self.rng.standard_normal(out=noise, dtype=np.float32)
        feed.update(inputs or {})
        actions, targets = self.session.run(list(OUTPUT_NAMES), feed)
        return (actions[0], targets[0]) if obs.ndim == 1 else (actions, targets)


def _renamed(value: Any, rename: Callable[[str], str]) -> Any:
    """A JSON value with the string under every "joint" key renamed (the links of a kinematic chain)."""
    if isinstance(value, dict):
        return {k: rename(v) if k == "joint" and isinstance(v, str) else _renamed(v, rename) for k, v in value.items()}
    if isinstance(value, list):
        return [_renamed(v, rename) for v in value]
    return value


def robot_contract(contract: DeployContract, hw: HardwareSpec) -> DeployContract:
    """The contract with its joints named as the robot names them (hw.model_joint_names -> hw.joint_names): its joint
    list, every action term's joints and the joints of its parameters (an ee_delta chain's links). The contract itself
    when the model and the robot name the joints alike."""
    if hw.model_joint_names is None:
        return contract
    to_robot = dict(zip(hw.model_joint_names, hw.joint_names, strict=True))

    def rename(name: str) -> str:
        return to_robot.get(name, name)

    terms = tuple(dataclasses.replace(t, joints=tuple(map(rename, t.joints)), params=_renamed(t.params, rename))
                  for t in contract.action.terms)
    return dataclasses.replace(contract, joint_names=tuple(map(rename, contract.joint_names)),
                               action=dataclasses.replace(contract.action, terms=terms))


def validate_contract(contract: DeployContract, hw: HardwareSpec) -> None:
    """Refuse to run a policy whose contract is malformed or disagrees with the robot, before anything moves.

    Checks the contract on its own and against the term registry (`robo_rl.terms.validate_contract`), then
    against the hardware: joints (named as the robot or as its model names them: `robot_contract`), robot, rate (and
    one the robot's controller can take: `controller.setpoint_rate_hz`), observation terms computable on this robot
    kind (terms that read the IMU need `kind: legged`), default pose inside the limits, torque limits within the
    robot's, gains (`check_gains`), and action terms the robot can carry out (`check_action_terms`).

    Raises:
        ValueError: one line naming the field (and the joint where there is one).
    """
    validate_terms(contract)
    contract = robot_contract(contract, hw)
    names = contract.joint_names
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"contract lists joint(s) {', '.join(dupes)} more than once")
    missing = [n for n in names if n not in hw.joint_names]
    if missing:
        raise ValueError(f"contract joint(s) {', '.join(missing)} are not on robot {hw.robot!r}")
    if contract.robot != hw.robot:
        raise ValueError(f"policy was trained for robot {contract.robot!r}, hardware file describes {hw.robot!r}")
    if contract.quaternion_order != "wxyz":
        raise ValueError(f"contract quaternion_order {contract.quaternion_order!r} is not supported (wxyz)")
    rate = 1.0 / contract.policy_dt
    if hw.controller.setpoint_rate_hz is not None:
        check_setpoint_rate(hw.controller.setpoint_rate_hz, rate, f"hardware {hw.robot!r} controller.setpoint_rate_hz")
    if not math.isclose(rate, hw.control_rate_hz, rel_tol=1e-6):
        raise ValueError(f"policy runs at {rate:g} Hz but hardware control_rate_hz is {hw.control_rate_hz:g} Hz")
    n = len(names)
    for key in ("default_joint_pos", "kp", "kd", "torque_limits"):
        if len(getattr(contract, key)) != n:
            raise ValueError(f"contract {key} has {len(getattr(contract, key))} entries for {n} joints")
    idx = hw.index_of(names)
    default = np.asarray(contract.default_joint_pos)
    outside = [names[i] for i in np.flatnonzero((default < hw.joint_lower[idx]) | (default > hw.joint_upper[idx]))]
    if outside:
        raise ValueError(f"contract default pose is outside the hardware joint limits for {', '.join(outside)}")
    over = [names[i] for i in np.flatnonzero(np.asarray(contract.torque_limits) > hw.torque_limits[idx] * (1 + 1e-6))]
    if over:
        raise ValueError(f"policy was trained with torque limits above the robot's for {', '.join(over)}")
    check_gains(contract, hw, idx)
    allowed = computable_terms(hw.kind)
    for t in contract.observation:
        record = OBSERVATION_TERMS.get(t.name) if t.name in OBSERVATION_TERMS else None
        if record is not None and set(record.inputs) & set(IMU_SOURCES) and hw.kind != "legged":
            raise ValueError(f"contract observation term {t.name!r} needs an IMU on a floating base, but hardware "
                             f"{hw.robot!r} is kind {hw.kind!r} (is kind wrong in the hardware file?)")
        if t.name not in allowed:
            raise ValueError(f"contract observation term {t.name!r} is not computed by the deploy side on a "
                             f"{hw.kind} robot (computable: {', '.join(allowed)})")
    check_action_terms(contract, hw)
    check_setpoint_path(contract, hw)


def check_setpoint_path(contract: DeployContract, hw: HardwareSpec) -> None:
    """Refuse a policy trained through a setpoint controller (contract extra.setpoint_rate_hz: the task's
    env.setpoint_controller) on a robot whose controller takes no setpoints or takes them at another rate: the arm
    would not follow its targets as it did in training (ValueError, one line)."""
    trained = contract.extra.get("setpoint_rate_hz")
    if trained is None:
        return
    rate = hw.controller.setpoint_rate_hz
    if rate is None or abs(float(rate) - float(trained)) > 1e-6:
        takes = "takes no setpoints" if rate is None else f"takes {float(rate):g} Hz setpoints"
        raise ValueError(f"contract: the policy was trained through {float(trained):g} Hz setpoints "
                         f"(env.setpoint_controller), but the controller of hardware {hw.robot!r} {takes} "
                         f"(controller.setpoint_rate_hz)")


def check_gains(contract: DeployContract, hw: HardwareSpec, idx: np.ndarray) -> None:
    """Refuse training gains the robot's controller cannot honour (ValueError, one line naming the joint).

    `controller.gains: command` (the controller applies each command's gains): the contract's kp, kd are sent, and
    must lie within kp_max, kd_max. `controller.gains: robot` (a Franka's joint impedance tracks the positions with
    its own stiffness): the contract's gains are never sent, so their size does not matter; a joint trained limp
    (kp = 0) cannot be honoured, because the robot holds every position it is sent. idx: (J_c,) robot position of
    each contract joint.
    """
    names = contract.joint_names
    if hw.controller.gains == "robot":
        limp = np.flatnonzero(np.asarray(contract.kp) <= 0)
        if limp.size:
            raise ValueError(f"contract kp for {names[int(limp[0])]} is 0 (trained limp), but the controller of "
                             f"hardware {hw.robot!r} holds every position it is sent with its own stiffness "
                             f"(controller.gains: robot)")
        return
    for key, limit in (("kp", "kp_max"), ("kd", "kd_max")):
        wanted, bound = np.asarray(getattr(contract, key)), getattr(hw, limit)[idx]
        too_high = np.flatnonzero(wanted > bound * (1 + 1e-9))
        if too_high.size:
            i = int(too_high[0])
            raise ValueError(f"contract {key} for {names[i]} = {wanted[i]:g} exceeds the robot's {limit} = "
                             f"{bound[i]:g} (hardware {hw.robot!r})")


def check_action_terms(contract: DeployContract, hw: HardwareSpec) -> None:
    """Refuse action terms this robot cannot carry out (ValueError, one line naming the term).

    A kind may need certain hardware kinds (`robot_kinds` of its record: ee_delta needs a fixed-base arm); the
    joint positions a term names (`fixed_targets`: gripper widths, joint_position offsets) must lie inside the
    robot's joint limits.
    """
    for i, term in enumerate(contract.action.terms):
        at = f"contract action.terms[{i}] ({term.kind})"
        record = ACTION_TERMS.get(term.kind)
        if record.robot_kinds is not None and hw.kind not in record.robot_kinds:
            need = record.robot_kinds_reason or f"needs hardware of kind {' or '.join(record.robot_kinds)}"
            raise ValueError(f"{at}: {need}, but hardware {hw.robot!r} is kind {hw.kind!r}")
        for key, joint, value in record.fixed_targets(term):
            k = int(hw.index_of([joint])[0])
            lo, hi = hw.joint_lower[k], hw.joint_upper[k]
            if not lo - 1e-9 <= value <= hi + 1e-9:
                raise ValueError(f"{at}: params.{key} = {value:g} for {joint} is outside the robot's joint limits "
                                 f"[{lo:g}, {hi:g}]")


class PolicyStep:
    """Runs the policy on a RobotState and returns position targets in the robot's joint order.

    Implements the Controller's PolicyStep protocol (`__call__`, `kp`, `kd`, `reset`).

    Args:
        policy: the loaded ONNX policy.
        hw: the robot (validated against the policy's contract here).
        commands: initial operator inputs by observation term name ({"velocity_command": ...}); the rest
            start neutral. Checked and clamped like every later change (see OperatorCommands).
        warn: receives one line per clamped operator input (default: stderr).

    `commands` (an OperatorCommands) may be changed while running, by whoever drives the robot
    (keyboard, ROS topic, test), through `set_command` or `commands[name] = value`: both check the value.

    Action chunks (contract action.chunk E > 1): the policy runs on every E-th tick and its E actions are
    executed one per tick, open-loop, as in training (`robo_rl.adapters.chunked`); `reset` (a new POLICY phase)
    starts a new chunk. The observation is still built every tick: its histories and `last_obs` stay per tick.
    """

    def __init__(self, policy: OnnxPolicy, hw: HardwareSpec, commands: Mapping[str, object] | None = None,
                 warn: Callable[[str], None] | None = None):
        validate_contract(policy.contract, hw)
        # From here on the policy's contract names the joints as the robot does (model_joint_names mapped), so every
        # part of the deploy core (observations, actions, recording) matches them by the state's names.
        policy.contract = robot_contract(policy.contract, hw)
        self.policy = policy
        self.hw = hw
        self.commands = OperatorCommands(policy.contract, warn)
        self.commands.update(commands or {})
        self.builder = ObservationBuilder(policy.contract, hw)
        self.robot_index = hw.index_of(policy.contract.joint_names)  # (A,) robot position of each policy joint
        n = len(hw.joint_names)
        self.default_q = np.zeros(n)  # (J,) robot order; only policy joints are meaningful
        self.default_q[self.robot_index] = policy.contract.default_joint_pos
        self.kp = np.zeros(n)  # (J,) gains of POLICY commands, robot order
        self.kd = np.zeros(n)
        if hw.controller.gains == "robot":  # the robot's own stiffness tracks the targets (check_gains)
            self.kp[:], self.kd[:] = hw.kp, hw.kd
        else:
            self.kp[self.robot_index] = policy.contract.kp
            self.kd[self.robot_index] = policy.contract.kd
        # Trained through this robot's setpoint stream (checked by validate_contract): the safety filter leaves the
        # targets' step and torque to the stream (SafetyFilter.filter_command).
        self.trained_through_stream = "setpoint_rate_hz" in policy.contract.extra
        self.last_action = np.zeros(policy.contract.action_dim, dtype=np.float32)
        self.action_map = ActionMap(policy.contract)  # every joint target, from actions and the measured joints
        self.last_obs: np.ndarray | None = None  # (O,) input of the latest step, for recording
        self.chunk = policy.contract.action.chunk
        self._chunk: np.ndarray | None = None  # (E, A) the actions being executed
        self._chunk_pos = 0  # next row of _chunk; a new chunk is computed when it reaches E
        self._state_names: tuple[str, ...] | None = None
        self._state_to_robot = np.zeros(0, dtype=np.int64)
        self.inputs = PolicyInputs(policy.contract.inputs, policy.path)
        """A VLA's camera frames and instruction (`set_instruction`); empty for every other policy."""
        self.external: np.ndarray | None = None
        """(A,) raw actions for the next tick from outside the ONNX policy (a learner stepping `RobotEnv`, an
        operator taking over), in the policy's action space; consumed by that tick. The caller then builds each
        observation itself (`observe`), once per tick, so histories advance as in training."""

    def set_command(self, name: str, value: object) -> np.ndarray:
        """Change one operator input; returns the value used (clamped to the trained range, with a warning).

        Raises:
            ValueError: the policy does not take `name`, or `value` is not finite numbers of the right size.
        """
        self.commands[name] = value
        return self.commands[name]

    def set_instruction(self, text: str) -> None:
        """Follow the instruction `text` (a VLA; ValueError, one line, for any other policy or a bad text)."""
        self.inputs.set_instruction(text)

    def reset(self) -> None:
        self.external = None
        self.last_action = np.zeros(self.policy.contract.action_dim, dtype=np.float32)
        self.builder.reset()
        self.action_map.reset()
        self._chunk_pos = self.chunk  # the next tick infers a new chunk

    def observe(self, state: RobotState) -> np.ndarray:
        """The policy's observation (O,) of `state`, built as in training (advances the observation histories;
        kept as `last_obs`). Once per tick: `__call__` calls it, or whoever supplies `external` actions does."""
        obs = self.builder.build(state, commands=self.commands, action=self.last_action)
        self.last_obs = obs
        return obs

    def __call__(self, state: RobotState) -> np.ndarray:
        """Joint position targets (J,) in the robot's order for `state`: the ONNX policy's actions, or the
        `external` actions when someone set them (consumed once)."""
        if self.external is not None:
            actions, self.external = np.asarray(self.external, dtype=np.float32), None
            return self.targets(actions, state)
        obs = self.observe(state)
        if self.chunk == 1:
            actions, _ = self.policy(obs, self.inputs(state.images))
        else:
            if self._chunk is None or self._chunk_pos >= self.chunk:
                self._chunk, _ = self.policy(obs, self.inputs(state.images))  # (E, A)
                self._chunk_pos = 0
            actions = self._chunk[self._chunk_pos]
            self._chunk_pos += 1
        return self.targets(actions, state)

    def targets(self, actions: np.ndarray, state: RobotState) -> np.ndarray:
        """Joint position targets (J,) in the robot's order of raw policy `actions` (A,) at `state`; the joints the
        policy does not drive hold their position. Remembers `actions` as the observation's last action."""
        self.last_action = actions
        targets = self.action_map(actions, state.q[self.builder.policy_index(state.joint_names)])  # (J,) policy order
        if state.joint_names != self._state_names:  # joint order of the state, resolved by name once
            self._state_to_robot = self.hw.index_of(state.joint_names)
            self._state_names = state.joint_names
        q_robot = np.empty(len(self.hw.joint_names))
        q_robot[self._state_to_robot] = state.q  # joints the policy does not drive hold their position
        q_robot[self.robot_index] = targets
        return q_robot  # (J,) robot joint order
