"""Reward classifier export: onnxruntime equals torch (graph and robot-side module), the spec travels in the file,
and a failed export leaves no file."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robo_rl.deploy.hardware import load_hardware
from robo_rl.deploy.reward_modules import make_reward
from robo_rl.deploy.robot import RobotState
from robo_rl.deploy.success_classifier import ClassifierSpec, OnnxClassifier
from robo_rl.export import classifier_export
from robo_rl.export.classifier_export import CLASSIFIER_PARITY_TOLERANCE, classifier_parity_error, export_classifier
from robo_rl.learn.reward_classifier import SuccessClassifier
from tests.conftest import REPO

SPEC = ClassifierSpec(camera="scene", height=32, width=32, threshold=0.55, debounce=2)


def frames(n: int, seed: int = 0) -> np.ndarray:
    """(n, 32, 32, 3) uint8 frames with structure (blocks of colour), not only noise."""
    rng = np.random.default_rng(seed)
    out = rng.integers(0, 60, (n, 32, 32, 3), dtype=np.uint8)
    for k in range(n):
        y, x = rng.integers(0, 24, 2)
        out[k, y:y + 8, x:x + 8] = rng.integers(0, 256, 3)
    return out


def spread_model() -> SuccessClassifier:
    """A classifier whose outputs differ from frame to frame (random weights scaled up), so equality means something."""
    torch.manual_seed(0)
    model = SuccessClassifier()
    with torch.no_grad():
        model.head[-1].weight.mul_(20.0)
    return model.eval()


def test_onnx_probabilities_equal_torch_on_frames(tmp_path):
    """The graph (batch of 64) and the robot side (one frame at a time, through preprocess_frame) both equal torch
    within CLASSIFIER_PARITY_TOLERANCE = 1e-5 (float32 probabilities); the probabilities are spread, not all 0.5."""
    model = spread_model()
    images = frames(64)  # (M, H, W, 3)
    nchw = np.ascontiguousarray(images.transpose(0, 3, 1, 2))  # (M, 3, H, W)
    out = tmp_path / "c.onnx"
    error = export_classifier(model, SPEC, out, nchw)
    assert error <= CLASSIFIER_PARITY_TOLERANCE == 1e-5
    with torch.no_grad():
        want = model(torch.from_numpy(nchw)).numpy()  # (M,)
    assert want.std() > 0.05
    assert classifier_parity_error(out.read_bytes(), model, frames(64, seed=1).transpose(0, 3, 1, 2).copy()) <= 1e-5
    robot = OnnxClassifier(out)
    got = np.array([robot.prob(f) for f in images])
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
    assert robot.spec == SPEC and ClassifierSpec.from_json(out.with_suffix(".json").read_text()) == SPEC


def test_the_reward_module_built_from_the_file_uses_its_settings(tmp_path):
    """`classifier:<file>` takes camera and threshold from the file, an option overrides the debounce; its logged
    probability is torch's."""
    model = spread_model()
    images = frames(8)
    out = tmp_path / "c.onnx"
    export_classifier(model, SPEC, out, np.ascontiguousarray(images.transpose(0, 3, 1, 2)))
    panda = load_hardware(REPO / "hardware" / "panda.yaml")
    (module,) = make_reward([f"classifier:{out},debounce=4"], panda).modules
    assert (module.camera, module.threshold, module.debounce) == ("scene", 0.55, 4)
    state = RobotState(stamp=0.0, received=0.0, joint_names=panda.joint_names, q=np.zeros(7), dq=np.zeros(7),
                       images={"scene": images[3]})
    with torch.no_grad():
        want = float(model(torch.from_numpy(images[3:4].transpose(0, 3, 1, 2).copy()))[0])
    assert module(state, {}).terms["classifier_prob"] == pytest.approx(want, abs=1e-5)


def test_a_failed_parity_check_or_a_bad_name_writes_nothing(tmp_path, monkeypatch):
    model = spread_model()
    images = np.ascontiguousarray(frames(4).transpose(0, 3, 1, 2))
    monkeypatch.setattr(classifier_export, "classifier_parity_error", lambda *args: 1e-3)
    with pytest.raises(ValueError, match=r"parity check failed: onnxruntime and torch differ by 1.00e-03 \(> 1e-05\)"):
        export_classifier(model, SPEC, tmp_path / "c.onnx", images)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match="must end in .onnx"):
        export_classifier(model, SPEC, tmp_path / "c.pt", images)
    with pytest.raises(ValueError, match=r"parity images of shape \(4, 3, 32, 32\): expected \(M, 3, 64, 64\)"):
        export_classifier(model, ClassifierSpec(camera="scene", height=64, width=64), tmp_path / "c.onnx", images)
    assert list(tmp_path.iterdir()) == []
