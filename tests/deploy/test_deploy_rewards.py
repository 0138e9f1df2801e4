"""Reward modules: their values against hand-computed numbers, success and failure, composition, episode events."""

import json
import math

import numpy as np
import pytest

from robo_rl.deploy.hardware import load_hardware
from robo_rl.deploy.reward_modules import (
    ComposedReward,
    EpisodeTracker,
    GoalDistanceReward,
    JointTargetReward,
    OperatorLabelReward,
    VelocityTrackingReward,
    make_reward,
    reward_velocity_tracking_exp,
)
from robo_rl.deploy.robot import RobotState
from tests.conftest import REPO

PANDA = load_hardware(REPO / "hardware" / "panda.yaml")
GO2 = load_hardware(REPO / "hardware" / "go2.yaml")


def arm_state(ee, q=None) -> RobotState:
    q = np.zeros(7) if q is None else np.asarray(q, float)
    return RobotState(stamp=0.0, received=0.0, joint_names=PANDA.joint_names, q=q, dq=np.zeros(7),
                      ee_pos=np.asarray(ee, float))


def legged_state(v, gyro, quat=(1.0, 0, 0, 0)) -> RobotState:
    return RobotState(stamp=0.0, received=0.0, joint_names=GO2.joint_names, q=np.zeros(12), dq=np.zeros(12),
                      imu_quat=np.asarray(quat, float), imu_gyro=np.asarray(gyro, float),
                      base_lin_vel=np.asarray(v, float))


def test_goal_distance_success_needs_the_threshold_held():
    r = GoalDistanceReward(threshold=0.03, sigma=0.1, hold_steps=3)
    target = {"target_pos": np.array([0.5, 0.0, 0.3])}
    far = r(arm_state([0.5, 0.1, 0.3]), target)
    assert far.reward == pytest.approx(math.exp(-1.0)) and not far.success
    assert far.terms["goal_distance_m"] == pytest.approx(0.1)
    near = [arm_state([0.5, 0.01, 0.3])] * 2 + [arm_state([0.5, 0.05, 0.3])] + [arm_state([0.5, 0.0, 0.3])] * 3
    outcomes = [r(s, target).success for s in near]
    assert outcomes == [False, False, False, False, False, True]  # three in a row, after the one outside
    with pytest.raises(ValueError, match="needs the end-effector position"):
        r(legged_state([0, 0, 0], [0, 0, 0]), target)


def test_joint_target_reward_by_name():
    r = JointTargetReward({"joint4": -1.5, "joint2": 0.2}, PANDA, sigma=0.5, tolerance=0.05)
    q = np.zeros(7)
    q[1], q[3] = 0.2, -1.0
    step = r(arm_state([0, 0, 0], q), {})
    assert step.reward == pytest.approx(math.exp(-0.25 / 0.25)) and not step.success
    q[3] = -1.48
    assert r(arm_state([0, 0, 0], q), {}).success
    with pytest.raises(ValueError, match="joint.s. jointX not in hardware 'panda'"):
        JointTargetReward({"jointX": 0.0}, PANDA)


def test_velocity_tracking_reward_and_fall():
    r = VelocityTrackingReward(sigma=0.25, yaw_weight=0.5, fall_tilt_rad=1.0)
    cmd = {"velocity_command": np.array([0.5, 0.0, 0.2])}
    step = r(legged_state([0.4, 0.1, 0.0], [0.0, 0.0, 0.0]), cmd)
    expected = math.exp(-(0.01 + 0.01) / 0.25) + 0.5 * math.exp(-0.04 / 0.25)
    assert step.reward == pytest.approx(expected) and not step.done
    assert reward_velocity_tracking_exp(np.array([0.5, 0, 0]), np.array([0, 0, 0.2]), cmd["velocity_command"],
                                        sigma=0.25) == pytest.approx(1.5)
    tipped = (math.cos(0.6), math.sin(0.6), 0.0, 0.0)  # rolled 1.2 rad
    assert r(legged_state([0.5, 0, 0], [0, 0, 0.2], tipped), cmd).failure
    with pytest.raises(ValueError, match="needs a base velocity estimate"):
        r(RobotState(0.0, 0.0, GO2.joint_names, np.zeros(12), np.zeros(12)), cmd)


def test_operator_labels_are_consumed_once():
    r = OperatorLabelReward(success_reward=2.0)
    s = arm_state([0, 0, 0])
    assert not r(s, {}).done
    r.label("success")
    first = r(s, {})
    assert first.success and first.reward == 2.0
    assert not r(s, {}).done  # consumed
    r.label("failure")
    assert r(s, {}).failure
    with pytest.raises(ValueError, match="label 'maybe': allowed values are success, failure"):
        r.label("maybe")


def test_composition_sums_and_first_outcome_ends_the_episode():
    goal = GoalDistanceReward(threshold=0.03, hold_steps=1)
    label = OperatorLabelReward()
    composed = ComposedReward([goal, label])
    events = []
    tracker = EpisodeTracker(composed, events.append)
    target = {"target_pos": np.array([0.5, 0.0, 0.3])}
    tracker.start(1.0)
    far = tracker.step(arm_state([0.5, 0.2, 0.3]), target, 1.02)
    assert far.reward == pytest.approx(goal(arm_state([0.5, 0.2, 0.3]), target).reward)  # label adds 0
    label.label("failure")
    at_goal = tracker.step(arm_state([0.5, 0.0, 0.3]), target, 1.04)  # success and failure in the same step
    assert at_goal.success and at_goal.failure and at_goal.reward == pytest.approx(1.0)
    assert tracker.step(arm_state([0.5, 0.0, 0.3]), target, 1.06) is None  # the episode is over
    kinds = [e.kind for e in events]
    assert kinds == ["start", "success"]  # one outcome per episode: success is reported first
    record = json.loads(events[1].to_json())
    assert record["episode"] == 1 and record["return"] == pytest.approx(far.reward + at_goal.reward)
    tracker.start(2.0)
    tracker.intervention("rate_limit", 2.1)
    tracker.intervention("rate_limit", 2.2)  # once per kind and episode
    tracker.intervention("estop", 2.3, ends_episode=True)
    tracker.reset_done(2.5, {"module": "home"})
    assert [e.kind for e in events[2:]] == ["start", "intervention", "intervention", "reset"]
    assert not tracker.active and events[-1].episode == 2
    with pytest.raises(ValueError, match="reward modules named goal_distance more than once"):
        ComposedReward([GoalDistanceReward(), GoalDistanceReward()])
    with pytest.raises(ValueError, match="reward 'speed': allowed values are goal_distance, velocity_tracking"):
        make_reward(["speed"], PANDA)


def test_a_success_whose_reward_goes_on_is_not_terminal():
    """goal_distance pays for staying at the goal: its success stops the episode but is no terminal state (a learner
    bootstraps through it); a classifier's one-off success is terminal, and so is the composition with one."""
    from robo_rl.deploy.reward_modules import ClassifierReward

    goal = GoalDistanceReward(threshold=0.03, hold_steps=1, goal=(0.5, 0.0, 0.4))
    step = goal(arm_state([0.5, 0.0, 0.41]), {})
    assert step.success and step.reward_continues and not step.terminal
    assert not goal(arm_state([0.9, 0.0, 0.4]), {}).terminal  # no success, no failure: nothing ends
    seen = ClassifierReward(lambda frame: 1.0, "scene", debounce=1)
    frame_state = RobotState(stamp=0.0, received=0.0, joint_names=PANDA.joint_names, q=np.zeros(7), dq=np.zeros(7),
                             ee_pos=np.array([0.5, 0.0, 0.41]), images={"scene": np.zeros((8, 8, 3), np.uint8)})
    one_off = seen(frame_state, {})
    assert one_off.success and one_off.terminal
    goal.reset()
    both = ComposedReward([goal, seen])(frame_state, {})
    assert both.success and both.terminal  # one successful module whose reward stops makes the end terminal
    goal.reset()
    assert not ComposedReward([goal])(frame_state, {}).terminal
