"""DdsOperatorLink: the operator's topics over DDS (e-stop, operator words, cmd_vel, target_pose in;
diagnostics, episode events, observation, policy step and action out)."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import numpy as np

from robo_rl.deploy import ros_interface as names
from robo_rl.deploy import ros_messages as rm
from robo_rl.deploy.dds_settings import DdsSettings
from robo_rl.deploy.robot import JointCommand
from robo_rl.deploy.transports.dds import dds_types as dt
from robo_rl.deploy.transports.dds.endpoint import DdsEndpoint


class OperatorHandler:
    """What the operator link calls (PolicyRuntime implements it)."""

    def estop_message(self, pressed: bool, received: float | None = None) -> None: ...

    def request(self, word: str) -> None: ...

    def set_velocity_command(self, command: np.ndarray, received: float) -> None: ...

    def set_target(self, position: np.ndarray) -> None: ...


class DdsOperatorLink:
    """The operator's topics over DDS: e-stop, operator requests, cmd_vel, target_pose in; diagnostics,
    episode events, observation and action out (names from ros_interface, resolved in the namespace).

    Every e-stop message is handed over at once on the listener thread (True latches ESTOP; with an e-stop deadline
    each one, either value, is also a heartbeat); operator words are queued for the caller (`requests()`), because
    some (reset) take seconds.
    """

    def __init__(self, endpoint: DdsEndpoint, settings: DdsSettings, handler: OperatorHandler):
        self.endpoint = endpoint
        self.handler = handler
        self.types = dt.dds_message_types()
        self._queue: list[str] = []
        self._lock = threading.Lock()
        self.rejected = 0
        t = settings.topic
        self.hint = f"or publish it on {t(names.OPERATOR)}"
        endpoint.reader(t(names.ESTOP), dt.Bool, names.ESTOP.qos, self._on_estop)
        endpoint.reader(t(names.OPERATOR), dt.String, names.OPERATOR.qos, self._on_operator)
        endpoint.reader(t(names.CMD_VEL), dt.Twist, names.CMD_VEL.qos, self._on_cmd_vel)
        endpoint.reader(t(names.TARGET_POSE), dt.PoseStamped, names.TARGET_POSE.qos, self._on_target)
        self._diagnostics = endpoint.writer(t(names.DIAGNOSTICS), dt.DiagnosticArray, names.DIAGNOSTICS.qos)
        self._events = endpoint.writer(t(names.EPISODE_EVENTS), dt.String, names.EPISODE_EVENTS.qos)
        self._observation = endpoint.writer(t(names.OBSERVATION), dt.Float32MultiArray, names.OBSERVATION.qos)
        self._action = endpoint.writer(t(names.ACTION), dt.Float64MultiArray, names.ACTION.qos)
        self._step = endpoint.writer(t(names.POLICY_STEP), dt.Float32MultiArray, names.POLICY_STEP.qos)

    def _on_estop(self, msg: dt.Bool, received: float) -> None:
        self.handler.estop_message(bool(msg.data), received)

    def _on_operator(self, msg: dt.String, received: float) -> None:
        with self._lock:
            self._queue.append(str(msg.data).strip())

    def _on_cmd_vel(self, msg: dt.Twist, received: float) -> None:
        self.handler.set_velocity_command(rm.velocity_command(msg), received)

    def _on_target(self, msg: dt.PoseStamped, received: float) -> None:
        self.handler.set_target(rm.read_point(msg))

    def requests(self) -> list[str]:
        """Operator words received since the last call, oldest first."""
        with self._lock:
            out, self._queue = self._queue, []
        return out

    def publish_diagnostics(self, stamp: float, level: str, message: str, values: Mapping[str, object]) -> None:
        if self.endpoint.closed:  # the transport is gone (its writers with it): nothing more is published
            return
        self._diagnostics.write(rm.diagnostic_array_message(self.types, stamp, names.POLICY_NODE, level, message,
                                                            values))

    def publish_event(self, text: str) -> None:
        if self.endpoint.closed:
            return
        self._events.write(rm.string_message(self.types, text))

    def publish_record(self, observation: np.ndarray | None, action: np.ndarray, command: JointCommand,
                       outcome: Any | None = None) -> None:
        """A POLICY tick's observation, raw actions (with `outcome`, the RewardStep scored this tick, on policy_step)
        and command."""
        if self.endpoint.closed:
            return
        if observation is not None:
            self._observation.write(rm.multi_array_message(self.types, observation, ("obs",), float32=True))
            self._step.write(rm.policy_step_message(self.types, observation, action, outcome))
        rows = np.stack([command.q, command.dq, command.kp, command.kd, command.tau])  # (5, J)
        self._action.write(rm.multi_array_message(self.types, rows, ("command", "joints")))
