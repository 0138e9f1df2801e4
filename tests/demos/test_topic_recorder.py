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
    assert rec.last_error.startswith("policy_step of 30 values ('obs+action',): expected 27 observation + 7 action")
    rec.close()
    ep = DatasetReader(tmp_path / "ros").episode(0)
    np.testing.assert_allclose(ep["observation.policy"][-1], obs, atol=1e-6)
    np.testing.assert_allclose(ep["action"][-1], act, atol=1e-6)
    np.testing.assert_allclose(ep["command.joint_position"][-1], q + 0.1, atol=1e-6)
    bc = cli("train", "--task", "arm-reach", "--algo", "bc", "--dataset", str(tmp_path / "ros"), "--max-iterations",
             "2", "--set", f"runner.log_dir={tmp_path / 'runs'}", "--set", "runner.eval_episodes=0", "--run-name", "bc")
    assert bc.returncode == 0, bc.stderr[-2000:]
