"""The Franka Hand's own node on DDS as `robo-rl twin` serves it: franka_gripper's goals in, its joint_states out.

franka_gripper takes Move and Grasp goals (robo_rl.deploy.gripper) and reports both fingers at width / 2 on
`<namespace>/joint_states`. `GripperTwin` does the same with the MuJoCo twin's finger joint: a goal's width / 2
becomes the finger's target, moved toward at the goal's speed (half of it per finger); a grasp stops where the object
blocks the finger (the twin's contact) and the twin's finger actuator's force limit stands in for the goal's force.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from robo_rl.deploy import ros_interface as names
from robo_rl.deploy import ros_messages as rm
from robo_rl.deploy.dds_settings import DdsSettings
from robo_rl.deploy.gripper import GripperGoal, read_goal
from robo_rl.deploy.hardware import HardwareSpec
from robo_rl.deploy.robot import JointCommand, RobotInterface, RobotState
from robo_rl.deploy.transports.dds import dds_types as dt
from robo_rl.deploy.transports.dds.endpoint import DdsEndpoint


class GripperTwin:
    """The twin's finger joint behind franka_gripper's topics (hardware `gripper`).

    Args:
        robot: the twin.
        hw: its hardware description (gripper.joint, its limits and hold gains).
        settings: the DDS settings (namespace, gripper namespace).
        endpoint: the participant.
    """

    def __init__(self, robot: RobotInterface, hw: HardwareSpec, settings: DdsSettings, endpoint: DdsEndpoint):
        if hw.gripper is None:
            raise ValueError(f"hardware {hw.robot!r} has no gripper section")
        self.robot = robot
        self.hw = hw
        self.joint = hw.gripper.joint
        k = int(hw.index_of([self.joint])[0])
        self._lo, self._hi, self._kp, self._kd = hw.joint_lower[k], hw.joint_upper[k], hw.kp[k], hw.kd[k]
        self.goals: list[GripperGoal] = []
        self._goal: GripperGoal | None = None
        self._target: float | None = None  # the finger's current target (m): held from the start, like the hand
        self._lock = threading.Lock()
        self.types = dt.dds_message_types()
        self._state = endpoint.writer(settings.gripper_topic("state"), dt.JointState, names.SENSOR_QOS)
        endpoint.reader(settings.gripper_topic("move"), dt.Move_Goal, names.COMMAND_QOS, self._on_goal)
        endpoint.reader(settings.gripper_topic("grasp"), dt.Grasp_Goal, names.COMMAND_QOS, self._on_goal)

    def _on_goal(self, msg: Any, received: float) -> None:
        goal = read_goal(msg)
        with self._lock:
            self._goal = goal
            self.goals.append(goal)

    def step(self, state: RobotState, dt_s: float) -> None:
        """Move the finger's target toward the goal's width / 2 by the goal's speed over dt_s, and hold it there."""
        with self._lock:
            goal = self._goal
            if self._target is None:
                self._target = float(np.asarray(state.q)[state.joint_names.index(self.joint)])
            if goal is not None:
                aim = float(np.clip(goal.width / 2, self._lo, self._hi))
                step = goal.speed / 2 * dt_s
                self._target += float(np.clip(aim - self._target, -step, step))
            target = self._target
        one = np.ones(1)
        self.robot.send_command(JointCommand((self.joint,), target * one, 0 * one, self._kp * one, self._kd * one,
                                             0 * one))

    def publish(self, state: RobotState) -> None:
        """franka_gripper's joint_states: the finger joint (position, velocity), as the hand reports it."""
        k = state.joint_names.index(self.joint)
        self._state.write(rm.joint_state_message(self.types, (self.joint,), np.asarray(state.q)[k:k + 1],
                                                 np.asarray(state.dq)[k:k + 1], None, state.stamp))
