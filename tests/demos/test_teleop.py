"""Teleoperation: device mappings, end-effector control through the safety filter, recording the session."""

from __future__ import annotations

import numpy as np
import pytest

from robo_rl.demos.dataset_reader import DatasetReader
from robo_rl.demos.teleop import TeleopInput, gamepad_input, joy_input, keyboard_input, record_teleop, spacemouse_input
from tests.conftest import REPO


def test_device_mappings():
    k = keyboard_input(["w", "a", "f"], pressed=[" "])
    assert k.velocity.tolist() == [1.0, 1.0, -1.0] and k.toggle_gripper and not k.end_episode
    assert keyboard_input(["w", "s"], pressed=["\n", "q"]).velocity.tolist() == [0.0, 0.0, 0.0]
    assert keyboard_input([], pressed=["\n"]).end_episode and keyboard_input([], pressed=["q"]).quit
    g = gamepad_input({"ABS_Y": -1.0, "ABS_X": 0.05, "ABS_RY": 0.55}, pressed=["BTN_SOUTH"])
    assert g.velocity[0] == 1.0 and g.velocity[1] == 0.0 and np.isclose(g.velocity[2], -0.5) and g.toggle_gripper
    j = joy_input([0.0, 0.8, 0, 0, -1.0], [1, 0, 0, 0, 0, 0, 0, 1], previous=[1])
    assert np.allclose(j.velocity, [(0.8 - 0.1) / 0.9, 0.0, -1.0]) and not j.toggle_gripper and j.end_episode
    s = spacemouse_input(0.5, 1.0, 0.0, [1, 0])
    assert np.allclose(s.velocity, [1.0, -(0.5 - 0.05) / 0.95, 0.0]) and s.toggle_gripper


def test_teleoperating_the_twin_moves_the_hand_and_records_it(tmp_path):
    """+x for 1 s at 0.1 m/s, then -z for 1 s with the gripper closing: the recording shows both (~10 cm each)."""
    script = [TeleopInput(np.array([1.0, 0, 0]))] * 50 + [TeleopInput(np.array([0, 0, -1.0]), toggle_gripper=True)] \
        + [TeleopInput(np.array([0, 0, -1.0]))] * 49 + [TeleopInput(np.zeros(3), end_episode=True)]
    feed = iter(script + [TeleopInput(np.zeros(3))] * 100)
    report = record_teleop(str(REPO / "hardware" / "panda_gripper.yaml"), str(tmp_path / "teleop"),
                           lambda: next(feed), realtime=False, max_ticks=140, cameras=("scene",), image_size=64)
    assert report["dropped"] == 0 and report["episodes"] == 2
    reader = DatasetReader(tmp_path / "teleop")
    assert reader.num_episodes == 2 and reader.episode(0)["action"].shape[0] == 101
    import mujoco

    from robo_rl.terms.kinematics import SerialChain, serial_chain

    model = mujoco.MjModel.from_xml_path(str(REPO / "envs" / "panda_pick.xml"))
    chain = SerialChain(serial_chain(model, "ee"))
    q = reader.episode(0)["observation.state"]
    ee = np.stack([chain.forward(q[t, :7])[0] for t in (0, 50, 100)])
    moved_x, moved_z = ee[1] - ee[0], ee[2] - ee[1]
    assert 0.08 < moved_x[0] < 0.105 and abs(moved_x[1]) < 0.01 and abs(moved_x[2]) < 0.01, moved_x
    assert -0.105 < moved_z[2] < -0.08 and abs(moved_z[0]) < 0.01, moved_z
    finger = reader.episode(0)["action"][:, 7]
    assert finger[10] > 0.03 and finger[90] < 0.005  # open, then closed (rate-limited: 0.1 m/s) after the toggle
    assert reader.episode(0)["observation.images.scene"].shape == (101, 64, 64, 3)


def test_teleop_cameras_on_a_transport_that_brings_no_frames_are_refused_before_connecting(tmp_path):
    """A real transport that lists no `cameras` option: one line naming it, nothing connected, nothing written."""
    from robo_rl.deploy.robot import TRANSPORTS, Transport

    connected = []
    TRANSPORTS.register("frameless", Transport(connect=lambda hw, options: connected.append(hw),
                                               options=frozenset({"domain_id"})))
    try:
        with pytest.raises(ValueError, match=r"^--cameras scene: transport frameless gives no camera frames$"):
            record_teleop(str(REPO / "hardware" / "panda.yaml"), str(tmp_path / "t"), lambda: TeleopInput(np.zeros(3)),
                          transport="frameless", cameras=("scene",))
    finally:
        TRANSPORTS.unregister("frameless")
    assert connected == [] and not (tmp_path / "t").exists()


@pytest.mark.realtime  # key holds and releases are timed
def test_keyboard_device_reads_a_real_terminal():
    """Keys typed into a pseudo-terminal: held keys move, pressed keys are events, once each."""
    import os
    import pty
    import time

    from robo_rl.demos.teleop import KeyboardDevice

    master, slave = pty.openpty()
    with os.fdopen(slave, "r", buffering=1) as stream:
        device = KeyboardDevice(stream)
        try:
            os.write(master, b"wwd ")
            time.sleep(0.05)  # read by the device's thread at once; held for KEY_HOLD_S (0.15 s)
            first = device()
            assert first.velocity.tolist() == [1.0, -1.0, 0.0] and first.toggle_gripper
            assert not device().toggle_gripper  # an event is reported once
            time.sleep(0.3)  # keys not repeated: released
            assert device().velocity.tolist() == [0.0, 0.0, 0.0]
            os.write(master, b"\n")
            time.sleep(0.2)
            assert device().end_episode
        finally:
            device.close()
    os.close(master)


@pytest.mark.realtime  # the twin runs in its own process over DDS, in real time
def test_teleop_over_dds_in_a_policys_terms_trains_bc(tmp_path, dds_domain, cli):
    """`robo-rl record --teleop ... --transport dds --policy X.onnx --cameras scene` against `robo-rl twin --cameras
    scene`: the operator's targets are executed as the policy's own actions, recorded with its observations (deploy
    --record's features) and the robot's camera frames over DDS, and BC for that policy trains on the recording
    without conversion."""
    from robo_rl.deploy.actions import ActionMap
    from robo_rl.deploy.policy import OnnxPolicy
    from tests.dds_support import relaxed_hardware, start_twin, stop_process

    hardware = relaxed_hardware(tmp_path, "panda")
    twin = start_twin(hardware, dds_domain, "--cameras", "scene", "--image-size", "64", "--camera-rate", "25",
                      log=tmp_path / "twin.log")
    script = [TeleopInput(np.array([1.0, 0, 0]))] * 40 + [TeleopInput(np.zeros(3), end_episode=True)] \
        + [TeleopInput(np.array([0, 0, -1.0]))] * 40
    feed = iter(script + [TeleopInput(np.zeros(3))] * 1000)
    try:
        report = record_teleop(hardware, str(tmp_path / "teleop"), lambda: next(feed), max_ticks=81, transport="dds",
                               domain_id=dds_domain, policy=str(REPO / "policies" / "panda_reach.onnx"),
                               cameras=("scene",), image_size=48)
    finally:
        stop_process(twin)
    assert report["episodes"] == 2 and report["dropped"] == 0, report
    reader = DatasetReader(tmp_path / "teleop")
    assert {"observation.policy", "action", "command.joint_position"} <= set(reader.features)
    assert reader.features["observation.policy"]["shape"] == [27] and reader.features["action"]["shape"] == [7]
    ep = reader.episode(0)
    assert ep["action"].shape == (41, 7) and np.abs(ep["action"]).max() > 0.05  # the hand moved: actions non-zero
    # the twin's 64 x 64 frames over DDS, fitted to the 48 asked for; the arm moved in the picture
    images = ep["observation.images.scene"]
    assert images.shape == (41, 48, 48, 3) and images.dtype == np.uint8
    assert np.abs(images[-1].astype(int) - images[0].astype(int)).mean() > 0.5
    # the recorded actions are the ones executed: the policy's action terms give the recorded joint targets
    contract = OnnxPolicy(REPO / "policies" / "panda_reach.onnx").contract
    actions = ActionMap(contract)
    for t in (5, 20, 40):  # panda.yaml's joints are the contract's, in its order
        targets = actions(ep["action"][t], ep["observation.state"][t])
        np.testing.assert_allclose(targets, ep["command.joint_position"][t], atol=1e-5)
    bc = cli("train", "--task", "arm-reach", "--algo", "bc", "--dataset", str(tmp_path / "teleop"), "--max-iterations",
             "2", "--set", f"runner.log_dir={tmp_path / 'runs'}", "--set", "runner.eval_episodes=0", "--run-name", "bc")
    assert bc.returncode == 0, bc.stderr[-2000:]
