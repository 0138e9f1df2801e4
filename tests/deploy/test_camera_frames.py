"""Camera frames on the wire (robo_rl.deploy.camera_frames): sensor_msgs/CompressedImage bytes against ROS 2's, PNG
exact, frames fitted to the size a reader asks for; and the twin's cameras over DDS into the deploy core's state."""

import numpy as np
import pytest

pytest.importorskip("cv2", reason="camera frames need opencv-python-headless")
rosbags_typesys = pytest.importorskip("rosbags.typesys", reason="needs rosbags (the dev extra)")

from robo_rl.demos.rosbag_format import message_types  # noqa: E402
from robo_rl.deploy import ros_interface as names  # noqa: E402
from robo_rl.deploy.camera_frames import (  # noqa: E402
    compressed_image_message,
    decode_frame,
    encode_frame,
    fit_frame,
    read_compressed_image,
)

RNG = np.random.default_rng(0)
FRAME = RNG.integers(0, 256, size=(48, 64, 3), dtype=np.uint8)


def test_png_is_exact_jpeg_is_close_and_frames_fit_the_size_asked_for():
    assert np.array_equal(decode_frame(encode_frame(FRAME, "png")), FRAME)
    smooth = np.repeat(np.linspace(0, 255, 64, dtype=np.uint8)[None, :, None], 48, axis=0).repeat(3, axis=2)
    assert np.abs(decode_frame(encode_frame(smooth, "jpeg", 95)).astype(int) - smooth).max() <= 8
    fitted = decode_frame(encode_frame(FRAME), size=(32, 32))  # centre 48 x 48, then resized
    assert fitted.shape == (32, 32, 3) and fitted.dtype == np.uint8
    assert fit_frame(FRAME, 48, 64) is FRAME
    with pytest.raises(ValueError, match="^a camera frame of 5 bytes could not be decoded"):
        decode_frame(b"notpn")
    with pytest.raises(ValueError, match="image format 'bmp': allowed values are png, jpeg"):
        encode_frame(FRAME, "bmp")


@pytest.mark.parametrize("store", [rosbags_typesys.Stores.ROS2_HUMBLE, rosbags_typesys.Stores.ROS2_JAZZY],
                         ids=lambda s: s.name)
def test_compressed_image_bytes_equal_ros2_cdr_and_read_back(store):
    pytest.importorskip("cyclonedds", reason="the DDS struct needs cyclonedds")
    from robo_rl.deploy.transports.dds import dds_types as dt

    ts = rosbags_typesys.get_typestore(store)
    theirs = compressed_image_message(message_types(ts), ts.types[names.COMPRESSED_IMAGE], FRAME, 12.5, "scene",
                                      data=lambda b: np.frombuffer(b, np.uint8))
    ours = compressed_image_message(dt.dds_message_types(), dt.CompressedImage, FRAME, 12.5, "scene")
    expected = bytes(ts.serialize_cdr(theirs, names.COMPRESSED_IMAGE))
    assert dt.CompressedImage.__idl_typename__.replace(".", "::") == names.dds_type_name(names.COMPRESSED_IMAGE)
    assert ours.serialize() == expected
    back = dt.CompressedImage.deserialize(expected)
    frame, stamp = read_compressed_image(back)
    assert np.array_equal(frame, FRAME) and stamp == 12.5 and back.format == "png"


@pytest.mark.realtime  # the twin runs in its own process over DDS
def test_the_twins_camera_reaches_the_deploy_core_over_dds(dds_domain, tmp_path):
    """`robo-rl twin --cameras scene` publishes the frames its camera draws; DdsRobot(cameras=...) waits for them and
    hands the state's `images` the newest one at the size asked for; a camera nobody publishes is one line."""
    from robo_rl.deploy.dds_settings import DdsSettings
    from robo_rl.deploy.hardware import load_hardware
    from robo_rl.deploy.transports.dds.dds_robot import DdsRobot
    from tests.dds_support import relaxed_hardware, start_twin, stop_process

    hardware = relaxed_hardware(tmp_path, "panda")
    hw = load_hardware(hardware)
    settings = DdsSettings.from_hardware(hw)
    twin = start_twin(hardware, dds_domain, "--cameras", "scene", "--image-size", "64", "--camera-rate", "20",
                      log=tmp_path / "twin.log")
    robot = DdsRobot(hw, settings, control_dt=0.02, domain_id=dds_domain, cameras=(("scene", 48, 64),))
    try:
        state = robot.wait_for_state(30.0, fresh_within_s=0.4)
        frame = state.images["scene"]
        assert frame.shape == (48, 64, 3) and frame.dtype == np.uint8 and frame.std() > 5  # a drawn scene
        assert robot.frames.topics == {"scene": "rt/scene/image/compressed"}
    finally:
        robot.close()
    lonely = DdsRobot(hw, settings, control_dt=0.02, domain_id=dds_domain, cameras=(("wrist", 64, 64),))
    try:
        with pytest.raises(ValueError, match=r"^no camera frames on rt/wrist/image/compressed \(DDS domain \d+\) "
                                             r"within 1 s; does the camera driver"):
            lonely.wait_for_state(1.0, fresh_within_s=0.4)
    finally:
        lonely.close()
        stop_process(twin)
    assert "cameras rt/scene/image/compressed at 20 Hz" in (tmp_path / "twin.log").read_text()


@pytest.mark.realtime  # the twin runs in its own process over DDS
def test_a_reward_classifier_scores_the_twins_frames_over_dds(dds_domain, tmp_path):
    """`--reward classifier:<model>` on a real transport: the transport is asked for the classifier's camera at the
    classifier's size (reward_cameras), the frames come over DDS, and RobotEnv's steps are scored on them."""
    from robo_rl.adapters.robot_env import RobotEnv
    from robo_rl.deploy.reward_modules import reward_cameras
    from robo_rl.export.classifier_export import export_classifier
    from tests.dds_support import relaxed_hardware, start_twin, stop_process
    from tests.export.test_classifier_export import SPEC, frames, spread_model

    model = tmp_path / "success.onnx"
    export_classifier(spread_model(), SPEC, model, np.ascontiguousarray(frames(8).transpose(0, 3, 1, 2)))
    assert reward_cameras([f"classifier:{model}"]) == (("scene", 32, 32),)
    hardware = relaxed_hardware(tmp_path, "panda")
    twin = start_twin(hardware, dds_domain, "--cameras", "scene", "--image-size", "64", log=tmp_path / "twin.log")
    env = None
    try:
        env = RobotEnv("policies/panda_reach.onnx", hardware, "dds", realtime=True, reset_module="home",
                       rewards=(f"classifier:{model}",), max_episode_steps=5, session={"domain_id": dds_domain})
        env.reset(seed=0)
        probs, done = [], False
        while not done:  # a success (the classifier's debounce of 2 positive frames) ends the episode early
            _, reward, terminated, truncated, info = env.step(np.zeros(7, np.float32))
            probs.append(info["terms"]["classifier_prob"])
            done = terminated or truncated
        assert probs and all(0.0 <= p <= 1.0 for p in probs), probs
        assert info["success"] == (reward > 0)  # the classifier's success reward, scored on the DDS frames
    finally:
        if env is not None:
            env.close()
        stop_process(twin)
