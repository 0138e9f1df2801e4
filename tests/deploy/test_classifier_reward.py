"""The `classifier` reward module (robot side): threshold and debounce, its camera, its spec on the command line,
the classifier file's preprocessing and spec. A stub stands in for the ONNX model (the exported model itself:
tests/export/test_classifier_export.py)."""

import numpy as np
import pytest

from robo_rl.deploy.camera_frames import centre_crop
from robo_rl.deploy.hardware import load_hardware
from robo_rl.deploy.reward_modules import ClassifierReward, debounce_count, make_reward, parse_reward_spec
from robo_rl.deploy.robot import RobotState
from robo_rl.deploy.runtime_config import RuntimeConfig
from robo_rl.deploy.success_classifier import ClassifierSpec, OnnxClassifier, preprocess_frame
from tests.conftest import REPO

PANDA = load_hardware(REPO / "hardware" / "panda.yaml")


def camera_state(frame: np.ndarray | None, camera: str = "scene") -> RobotState:
    images = {} if frame is None else {camera: frame}
    return RobotState(stamp=0.0, received=0.0, joint_names=PANDA.joint_names, q=np.zeros(7), dq=np.zeros(7),
                      images=images)


def frame_of(value: float) -> np.ndarray:
    """A (4, 4, 3) frame that carries the stub's probability in its first pixel (value * 255)."""
    frame = np.zeros((4, 4, 3), np.uint8)
    frame[0, 0, 0] = round(value * 255)
    return frame


def stub_prob(frame: np.ndarray) -> float:
    return frame[0, 0, 0] / 255


def test_debounce_count_resets_on_a_negative_frame():
    counts, count = [], 0
    for positive in (True, True, False, True, True, True):
        count = debounce_count(count, positive)
        counts.append(count)
    assert counts == [1, 2, 0, 1, 2, 3]


def test_success_needs_debounce_consecutive_frames_at_or_above_the_threshold():
    """threshold 0.6 (p == 0.6 counts: >=), debounce 3: one frame below it starts the count again; reward 1 only on
    success; reset forgets the count; the probability is logged with the reward."""
    module = ClassifierReward(stub_prob, "scene", threshold=0.6, debounce=3, success_reward=2.0)
    probs = [0.9, 0.95, 0.2, 0.6, 0.7, 0.99, 0.99]
    steps = [module(camera_state(frame_of(p)), {}) for p in probs]
    assert [s.success for s in steps] == [False, False, False, False, False, True, True]
    assert [s.reward for s in steps] == [0.0] * 5 + [2.0, 2.0]
    assert steps[0].terms["classifier_prob"] == pytest.approx(0.9, abs=1 / 255)
    assert not any(s.failure for s in steps)
    module.reset()
    assert not module(camera_state(frame_of(0.99)), {}).success  # the count starts again after reset
    once = ClassifierReward(stub_prob, "scene", threshold=0.5, debounce=1)
    assert once(camera_state(frame_of(0.5)), {}).success and not once(camera_state(frame_of(0.49)), {}).success


def test_a_state_without_the_camera_is_one_line():
    module = ClassifierReward(stub_prob, "wrist")
    with pytest.raises(ValueError, match=r"^classifier reward: the robot's state carries no frame of camera 'wrist' "
                                         r"\(cameras in the state: scene\)$"):
        module(camera_state(frame_of(0.9)), {})
    with pytest.raises(ValueError, match=r"\(cameras in the state: none\)"):
        module(camera_state(None), {})


@pytest.mark.parametrize(("kwargs", "match"), [
    (dict(threshold=1.0), "classifier threshold = 1.0: a probability strictly between 0 and 1"),
    (dict(threshold=0.0), "classifier threshold = 0.0"),
    (dict(debounce=0), "classifier debounce = 0: an integer >= 1"),
])
def test_bad_settings_are_one_line(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ClassifierReward(stub_prob, "scene", **kwargs)


def test_reward_specs_name_the_classifier_file_and_its_options():
    assert parse_reward_spec("goal_distance") == ("goal_distance", {})
    assert parse_reward_spec("goal_distance:sigma=0.05,hold_steps=3") == ("goal_distance",
                                                                          {"sigma": "0.05", "hold_steps": "3"})
    sharp = make_reward(["goal_distance:sigma=0.05,threshold=0.02"], load_hardware(REPO / "hardware" / "panda.yaml"))
    g = sharp.modules[0]
    assert (g.sigma, g.threshold, g.hold_steps) == (0.05, 0.02, 5)
    assert parse_reward_spec("classifier:policies/c.onnx") == ("classifier", {"path": "policies/c.onnx"})
    assert parse_reward_spec("classifier:c.onnx,threshold=0.7,debounce=5,camera=wrist") == (
        "classifier", {"path": "c.onnx", "threshold": "0.7", "debounce": "5", "camera": "wrist"})
    for spec, match in (("classifier", "name the model file, classifier:<model.onnx>"),
                        ("classifier:", "name the model file"),
                        ("classifier:c.onnx,speed=3", "option 'speed=3': expected key=value with key one of threshold"),
                        ("classifier:c.onnx,threshold=2", "classifier threshold = 2.0: a probability"),
                        ("classifier:c.onnx,debounce=0", "classifier debounce = 0"),
                        ("operator:x", "operator takes no options"),
                        ("goal_distance:speed=1", "option 'speed=1': expected key=value with key one of sigma, "
                                                  "threshold, hold_steps"),
                        ("goal_distance:sigma=-1", "goal_distance sigma = -1.0: must be a finite number > 0"),
                        ("goal_distance:sigma=x", "goal_distance sigma = 'x': not a number"),
                        ("goal_distance:hold_steps=0", "goal_distance hold_steps = 0: must be >= 1"),
                        ("speed", "reward 'speed': allowed values are goal_distance, velocity_tracking, operator, "
                                  "classifier")):
        with pytest.raises(ValueError, match=match):
            parse_reward_spec(spec)
    RuntimeConfig(policy_path="p.onnx", hardware_config="h.yaml", rewards=("classifier:c.onnx",)).validate()
    with pytest.raises(ValueError, match="rewards: reward 'classifier:': name the model file"):
        RuntimeConfig(policy_path="p.onnx", hardware_config="h.yaml", rewards=("classifier:",)).validate()


def test_a_missing_or_foreign_classifier_file_is_one_line(tmp_path):
    with pytest.raises(ValueError, match="reward classifier file .*nope.onnx"):
        make_reward([f"classifier:{tmp_path / 'nope.onnx'}"], PANDA)
    with pytest.raises(ValueError, match="is not a reward classifier .no metadata key 'robo_rl.reward_classifier'"):
        OnnxClassifier(REPO / "policies" / "panda_reach.onnx")  # a policy, not a classifier
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not onnx")
    with pytest.raises(ValueError, match="cannot be loaded .corrupt or truncated"):
        OnnxClassifier(broken)


def test_preprocessing_keeps_a_frame_of_the_model_size_and_crops_and_resizes_any_other():
    rng = np.random.default_rng(0)
    frame = rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)
    np.testing.assert_array_equal(preprocess_frame(frame, 64, 64), frame.transpose(2, 0, 1))
    wide = np.zeros((480, 640, 3), np.uint8)
    wide[:, 80:560] = 200  # the centred 480 x 480 square: what a square model sees
    out = preprocess_frame(wide, 64, 64)
    assert out.shape == (3, 64, 64) and out.dtype == np.uint8 and (out == 200).all()
    assert centre_crop(np.zeros((100, 50, 3)), 64, 64).shape == (50, 50, 3)
    with pytest.raises(ValueError, match=r"classifier frames must be \(H, W, 3\) uint8 RGB, got float64"):
        preprocess_frame(frame.astype(float), 64, 64)


def test_spec_round_trips_and_refuses_bad_fields():
    spec = ClassifierSpec(camera="scene", height=64, width=64, threshold=0.7, debounce=4, extra={"accuracy": 0.97})
    assert ClassifierSpec.from_json(spec.to_json()) == spec
    for text, match in (('{"camera": "", "height": 64, "width": 64}', "reward classifier camera ''"),
                        ('{"camera": "c", "height": 4, "width": 64}', "reward classifier height = 4"),
                        ('{"camera": "c", "height": 64, "width": 64, "version": 9}', "spec version 9"),
                        ('{"camera": "c", "height": 64, "width": 64, "colour": 1}', "malformed reward classifier spec"),
                        ("{", "malformed reward classifier spec")):
        with pytest.raises(ValueError, match=match):
            ClassifierSpec.from_json(text)
