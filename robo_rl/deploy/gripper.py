"""The Franka Hand through franka_gripper: the policy's gripper joint target becomes Move and Grasp goals.

franka_gripper is not a joint controller: it takes goals (franka_msgs/action/Move: width, speed; Grasp: width,
epsilon {inner, outer}, speed, force) and moves the fingers itself. The policy, trained with a finger joint whose
target the `gripper` action term moves toward `closed` (action > 0) or `open` at the hand's speed, drives that joint
like any other; `GripperCommander` turns the target's course into goals, binary as the term is: when the target turns
to close, one Grasp to the closed width (stopping on the object, which counts as grasped within the tolerances), when
it turns to open, one Move to the open width (the joint's limits). Between turns no goal is sent: franka_gripper
executes one goal at a time. `goal_message` / `read_goal` build and read the goal messages by their ROS field names
in any binding (`GripperTypes`: the Cyclone DDS structs, rosbags', rclpy's). `split` takes the gripper's joint out of
a command for the arm's controller. numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from robo_rl.deploy.hardware import GripperConfig, HardwareSpec
from robo_rl.deploy.robot import JointCommand
from robo_rl.deploy.ros_commands import command_subset

DEADBAND_M = 1e-5
"""A target change below this (m) is no change of course."""


@dataclass(frozen=True)
class GripperTypes:
    """The goal message classes of one binding (constructed with keyword arguments)."""

    Move_Goal: Any
    Grasp_Goal: Any
    GraspEpsilon: Any


@dataclass(frozen=True)
class GripperGoal:
    """One goal for franka_gripper: `move` (width, speed) or `grasp` (all fields). Widths in m between the fingers."""

    kind: str
    width: float
    speed: float
    force: float = 0.0
    epsilon_inner: float = 0.0
    epsilon_outer: float = 0.0


def goal_message(types: GripperTypes, goal: GripperGoal) -> Any:
    """franka_msgs/action/Move_Goal or Grasp_Goal of `goal`."""
    if goal.kind == "move":
        return types.Move_Goal(width=float(goal.width), speed=float(goal.speed))
    if goal.kind == "grasp":
        epsilon = types.GraspEpsilon(inner=float(goal.epsilon_inner), outer=float(goal.epsilon_outer))
        return types.Grasp_Goal(width=float(goal.width), epsilon=epsilon, speed=float(goal.speed),
                                force=float(goal.force))
    raise ValueError(f"gripper goal kind {goal.kind!r}: allowed values are move, grasp")


def read_goal(msg: Any) -> GripperGoal:
    """The GripperGoal of a Move_Goal or Grasp_Goal message (a Grasp_Goal has an epsilon)."""
    if hasattr(msg, "epsilon"):
        return GripperGoal("grasp", float(msg.width), float(msg.speed), float(msg.force), float(msg.epsilon.inner),
                           float(msg.epsilon.outer))
    return GripperGoal("move", float(msg.width), float(msg.speed))


class GripperCommander:
    """Tick by tick, the policy's target for the gripper joint (one finger, m) -> the goal to send now, or None.

    A goal is sent when the target turns: to closing (a Grasp to twice the joint's lower limit) or to opening (a Move
    to twice its upper limit); while it keeps its course, or stands still, nothing more is sent.

    Args:
        config: the hardware file's gripper section (speed, force, tolerances, the joint's name).
        lower, upper: the gripper joint's limits (m): closed and open.
    """

    def __init__(self, config: GripperConfig, lower: float, upper: float):
        self.config = config
        self.joint = config.joint
        self.closed_width = 2.0 * float(lower)
        self.open_width = 2.0 * float(upper)
        self.last_target: float | None = None
        self.last_goal: GripperGoal | None = None

    @classmethod
    def for_hardware(cls, hw: HardwareSpec) -> GripperCommander:
        """The commander of the hardware file's gripper (ValueError, one line, without one)."""
        if hw.gripper is None:
            raise ValueError(f"hardware {hw.robot!r} has no gripper section")
        k = int(hw.index_of([hw.gripper.joint])[0])
        return cls(hw.gripper, hw.joint_lower[k], hw.joint_upper[k])

    def split(self, command: JointCommand) -> tuple[GripperGoal | None, JointCommand]:
        """(the goal the gripper joint's target in `command` calls for now, or None; `command` without that joint):
        what a transport sends the gripper node and the arm's controller. A command without the joint: (None, it)."""
        if self.joint not in command.joint_names:
            return None, command
        k = command.joint_names.index(self.joint)
        keep = np.delete(np.arange(len(command.joint_names)), k)
        return self.update(command.q[k]), command_subset(command, keep)

    def update(self, target: float) -> GripperGoal | None:
        """The goal the target `target` (m) calls for now, or None (also for a non-finite target)."""
        target = float(target)
        if target != target or abs(target) == float("inf"):
            return None
        last, self.last_target = self.last_target, target
        if last is None or abs(target - last) < DEADBAND_M:
            return None
        c = self.config
        if target < last:
            goal = GripperGoal("grasp", self.closed_width, c.speed, c.force, c.epsilon_inner, c.epsilon_outer)
        else:
            goal = GripperGoal("move", self.open_width, c.speed)
        if self.last_goal is not None and self.last_goal.kind == goal.kind:
            return None
        self.last_goal = goal
        return goal
