"""The ROS 2 recorder node's logic with real ROS 2 message classes (rosbags'): newest values at a fixed rate."""

from __future__ import annotations

import json

import numpy as np
import pytest

from robo_rl.demos.dataset_reader import DatasetReader
from robo_rl.demos.dataset_writer import DatasetWriter
from robo_rl.demos.recorder import robot_features
from robo_rl.demos.rosbag_format import message_types
from robo_rl.demos.topic_recorder import TopicRecorder
from robo_rl.deploy import ros_commands as rc
from robo_rl.deploy import ros_messages as rm
from robo_rl.deploy.hardware import load_hardware
from robo_rl.deploy.robot import JointCommand
from tests.conftest import REPO

rosbags_typesys = pytest.importorskip("rosbags.typesys")
PANDA = load_hardware(REPO / "hardware" / "panda.yaml")
TYPES = message_types(rosbags_typesys.get_typestore(rosbags_typesys.Stores.ROS2_HUMBLE))


def joint_state(q: np.ndarray, order: list[int]):
    names = [PANDA.joint_names[i] for i in order] + ["extra_joint"]
    return rm.joint_state_message(TYPES, names, np.append(q[order], 9.0), np.append(q[order] * 0.1, 9.0),
                                  np.zeros(len(names)), 0.0)


def command(q: np.ndarray):
    n = len(q)
    cmd = JointCommand(PANDA.joint_names, q, np.zeros(n), np.array(PANDA.kp), np.array(PANDA.kd), np.zeros(n))
    return rc.encode_command(TYPES, "pd_targets", cmd, 0.02)


def test_frames_hold_the_newest_values_by_name_and_episodes_follow_events(tmp_path):
    writer = DatasetWriter(tmp_path / "ros", fps=50, features=robot_features(PANDA.joint_names, {"front": (8, 8)}, 50))
    rec = TopicRecorder(writer, PANDA, "pd_targets", ["front"], task="ros demo")
    assert not rec.tick()  # not recording before a start event
    rec.on_event(json.dumps({"kind": "start", "episode": 1, "time": 0.0}))
    q = np.linspace(-1, 1, 7)
    rec.on_joint_state(joint_state(q, [3, 0, 6, 1, 5, 2, 4]))  # shuffled joint order plus an extra joint
    assert not rec.tick()  # no command and no image yet: no frame
    rec.on_command(command(q + 0.1))
    rec.on_image("front", np.full((8, 8, 3), 7, np.uint8))
    for _ in range(3):
        assert rec.tick()  # held values, one frame per tick
    rec.on_joint_state(joint_state(q + 0.5, list(range(7))))
    assert rec.tick()
    rec.on_event(json.dumps({"kind": "success", "episode": 1, "time": 1.0}))
    assert not rec.tick()
    rec.on_event(json.dumps({"kind": "start", "episode": 2, "time": 2.0}))
    assert rec.tick() and rec.tick()
    rec.close()
    assert rec.report() == {"frames": 6, "dropped": 0, "episodes": 2}
    reader = DatasetReader(tmp_path / "ros")
    ep = reader.episode(0)
    assert [e["length"] for e in reader.meta.episodes] == [4, 2]
    assert np.allclose(ep["observation.state"][:3], q, atol=1e-6)  # reordered by name, extra joint ignored
    assert np.allclose(ep["observation.velocity"][0], q * 0.1, atol=1e-6)
    assert np.allclose(ep["observation.state"][3], q + 0.5, atol=1e-6)
    assert np.allclose(ep["action"], q + 0.1, atol=1e-6)
    assert reader.meta.tasks == ["ros demo"]


def test_unknown_joint_is_a_clear_error(tmp_path):
    writer = DatasetWriter(tmp_path / "ros", fps=50, features=robot_features(PANDA.joint_names, {}, 50))
    rec = TopicRecorder(writer, PANDA, "pd_targets", use_events=False)
    bad = rm.joint_state_message(TYPES, ["jointX"], np.zeros(1), np.zeros(1), np.zeros(1), 0.0)
    with pytest.raises(ValueError, match="joint_states: none of panda's joints \\(got jointX\\)"):
        rec.on_joint_state(bad)
    rec.close()


def test_camera_names_come_from_the_whole_topic_path_and_never_collide():
    from robo_rl.demos.topic_recorder import camera_name, camera_names, split_topics

    assert camera_name("/camera/color/image_raw") == "camera_color"
    assert camera_name("/camera/depth/image_rect_raw/compressed") == "camera_depth"
    assert camera_name("wrist_cam/image_raw/compressed") == "wrist_cam"
    assert camera_name("/image") == "image"  # a bare stream name stays the name
    topics = split_topics(" /camera/color/image_raw/compressed, /camera/depth/image_rect_raw/compressed ,")
    assert camera_names(topics) == {"/camera/color/image_raw/compressed": "camera_color",
                                    "/camera/depth/image_rect_raw/compressed": "camera_depth"}  # no collision
    with pytest.raises(ValueError, match=r"camera_topics: '/cam/image_raw' and '/cam/image_raw/compressed' both make "
                                         r"the camera name 'cam'; record one stream per camera"):
        camera_names(["/cam/image_raw", "/cam/image_raw/compressed"])
    assert split_topics("") == []


def test_with_the_policy_its_steps_are_recorded_and_bc_trains_on_them(tmp_path, cli):
    """`policy_path` set: the policy node's ~/policy_step (observation + raw actions of one tick) becomes
    observation.policy and action, the command's targets command.joint_position: deploy --record's features."""
    obs_dim, action_dim = 27, 7  # policies/panda_reach.onnx, the arm-reach task's sizes
    names = [f"obs_{i}" for i in range(obs_dim)]
    writer = DatasetWriter(tmp_path / "ros", fps=50,
                           features=robot_features(PANDA.joint_names, {}, 50, (names, action_dim)))
    rec = TopicRecorder(writer, PANDA, "pd_targets", use_events=False, policy=(obs_dim, action_dim))
    q = np.linspace(-1, 1, 7)
    rec.on_joint_state(joint_state(q, list(range(7))))
    rec.on_command(command(q + 0.1))
    assert not rec.tick()  # no policy step yet: no frame
    rng = np.random.default_rng(0)
    for _ in range(20):
        obs, act = rng.normal(size=obs_dim), rng.uniform(-1, 1, size=action_dim)
        rec.on_policy_step(rm.policy_step_message(TYPES, obs, act))
        assert rec.tick()
    assert not rec.on_policy_step(rm.policy_step_message(TYPES, np.zeros(23), np.zeros(7)))  # another policy's
    assert rec.report()["rejected"] == 1
    assert rec.last_error.startswith("policy_step of 34 values ('obs+action+outcome',): expected 27 observation + 7 "
                                     "action + 4 outcome values")
    rec.close()
    ep = DatasetReader(tmp_path / "ros").episode(0)
    np.testing.assert_allclose(ep["observation.policy"][-1], obs, atol=1e-6)
    np.testing.assert_allclose(ep["action"][-1], act, atol=1e-6)
    np.testing.assert_allclose(ep["command.joint_position"][-1], q + 0.1, atol=1e-6)
    bc = cli("train", "--task", "arm-reach", "--algo", "bc", "--dataset", str(tmp_path / "ros"), "--max-iterations",
             "2", "--set", f"runner.log_dir={tmp_path / 'runs'}", "--set", "runner.eval_episodes=0", "--run-name", "bc")
    assert bc.returncode == 0, bc.stderr[-2000:]


def test_scored_steps_complete_the_frame_before_them_whatever_order_the_end_event_comes_in(tmp_path):
    """The policy node's reward modules (`rewards`): each ~/policy_step carries the outcome its tick scored, the
    outcome of the step before; frames come per step, each written with the next step's outcome."""
    from robo_rl.deploy.reward_modules import RewardStep

    obs_dim, action_dim = 27, 7
    names = [f"obs_{i}" for i in range(obs_dim)]
    writer = DatasetWriter(tmp_path / "ros", fps=50,
                           features=robot_features(PANDA.joint_names, {}, 50, (names, action_dim), scored=True))
    rec = TopicRecorder(writer, PANDA, "pd_targets", policy=(obs_dim, action_dim), scored=True)
    q = np.linspace(-1, 1, 7)
    rec.on_joint_state(joint_state(q, list(range(7))))
    rec.on_command(command(q + 0.1))

    def step(k: int, outcome: RewardStep | None) -> None:
        assert rec.on_policy_step(rm.policy_step_message(TYPES, np.full(obs_dim, k), np.full(action_dim, k / 10),
                                                         outcome))

    rec.on_event(json.dumps({"kind": "start"}))
    step(0, RewardStep(0.05))  # the first step scores the episode's start: no frame before it
    assert not rec.tick()  # scored: the timer makes no frames
    for k in range(1, 6):
        step(k, RewardStep(k / 10))  # completes frame k - 1
    step(6, RewardStep(0.9, success=True, reward_continues=True))  # frame 5 ends the episode
    rec.on_event(json.dumps({"kind": "success"}))
    assert rec.report()["episodes"] == 1 and rec.frames == 6
    rec.on_event(json.dumps({"kind": "start"}))
    step(10, RewardStep(0.0))
    step(11, RewardStep(0.2))
    step(12, None)  # nothing scored: frame 11 waits in vain and is dropped, never guessed
    step(13, RewardStep(0.3))  # completes frame 12
    rec.on_event(json.dumps({"kind": "reset"}))  # the operator's end arrives before the step with the last outcome
    assert rec.report()["episodes"] == 1
    step(14, RewardStep(0.4))  # completes frame 13, then the episode ends
    step(15, RewardStep(0.5))  # not recording: nothing
    rec.close()
    assert rec.report() == {"frames": 9, "dropped": 0, "episodes": 2}
    reader = DatasetReader(tmp_path / "ros")
    first, second = reader.episode(0), reader.episode(1)
    np.testing.assert_allclose(first["observation.policy"][:, 0], np.arange(6))
    np.testing.assert_allclose(first["action"][:, 0], np.arange(6) / 10, atol=1e-6)
    np.testing.assert_allclose(first["next.reward"], [0.1, 0.2, 0.3, 0.4, 0.5, 0.9], atol=1e-6)
    assert first["next.done"].tolist() == [False] * 5 + [True] and first["next.success"].tolist()[-1]
    assert not first["next.terminated"].any()  # goal_distance's success pays on: a truncation
    np.testing.assert_allclose(second["observation.policy"][:, 0], [10, 12, 13])
    np.testing.assert_allclose(second["next.reward"], [0.2, 0.3, 0.4], atol=1e-6)
    assert not second["next.done"].any()
    with pytest.raises(ValueError, match="scored recording needs the policy's sizes"):
        TopicRecorder(writer, PANDA, "pd_targets", scored=True)
