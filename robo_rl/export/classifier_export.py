"""Export a reward classifier to ONNX with its spec, after checking onnxruntime against torch.

The graph and its spec are described in `robo_rl.deploy.success_classifier` (the robot side that reads them). The
spec goes into the model's metadata_props and beside it as `<name>.json`; both files are written atomically, the
JSON first, and a failure (parity, a full disk, a kill) leaves neither.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

from robo_rl.core.files import write_with_companion
from robo_rl.deploy.success_classifier import CLASSIFIER_INPUT, CLASSIFIER_KEY, CLASSIFIER_OUTPUT, ClassifierSpec
from robo_rl.export import OPSET
from robo_rl.learn.checkpoint import check_output_file

CLASSIFIER_PARITY_TOLERANCE = 1e-5
"""Largest |onnxruntime - torch| of the success probability (float32 in [0, 1]) the export accepts."""


def check_classifier_output(out: str | Path) -> Path:
    """`out` as a Path if it ends in .onnx and it and its .json can be written; ConfigError / ValueError otherwise."""
    out = Path(out)
    if out.suffix != ".onnx":
        raise ValueError(f"output {str(out)!r} must end in .onnx")
    check_output_file(out, "--out")
    check_output_file(out.with_suffix(".json"), "--out (its spec .json)")
    return out


def classifier_onnx_bytes(model: nn.Module, example: torch.Tensor, spec: ClassifierSpec) -> bytes:
    """`model` (uint8 images (B, 3, H, W) -> probabilities (B,)) as ONNX (pinned opset, dynamic batch), with `spec`
    in its metadata."""
    model.eval()
    program = torch.onnx.export(
        model, (example,), None, input_names=[CLASSIFIER_INPUT], output_names=[CLASSIFIER_OUTPUT],
        opset_version=OPSET, dynamic_shapes=({0: torch.export.Dim("batch")},), dynamo=True, verbose=False,
    )
    proto = program.model_proto
    del proto.metadata_props[:]
    entry = proto.metadata_props.add()
    entry.key, entry.value = CLASSIFIER_KEY, spec.to_json()
    proto.producer_name = "robo_rl"
    return proto.SerializeToString()


def classifier_parity_error(model_bytes: bytes, model: nn.Module, images: np.ndarray) -> float:
    """Max |onnxruntime - torch| of the success probabilities of images (M, 3, H, W) uint8."""
    import onnxruntime as ort

    session = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
    (got,) = session.run([CLASSIFIER_OUTPUT], {CLASSIFIER_INPUT: images})
    model.eval()
    with torch.no_grad():
        want = model(torch.from_numpy(images)).numpy()
    if got.shape != want.shape:
        return float("inf")
    return float(np.abs(got - want).max())


def export_classifier(model: nn.Module, spec: ClassifierSpec, out: str | Path, parity_images: np.ndarray) -> float:
    """Write `model` to `out` (.onnx) and its spec to `out`.json once onnxruntime matches torch on `parity_images`
    (M, 3, H, W) uint8 (held-out frames) within CLASSIFIER_PARITY_TOLERANCE. Returns the parity error.

    Raises:
        ValueError: a bad output name, or the parity check failed (one line); nothing is written.
    """
    out = check_classifier_output(out)
    spec.validate()
    if parity_images.ndim != 4 or parity_images.shape[1:] != (3, spec.height, spec.width):
        raise ValueError(f"parity images of shape {parity_images.shape}: expected (M, 3, {spec.height}, {spec.width})")
    data = classifier_onnx_bytes(model, torch.from_numpy(parity_images[:2]), spec)
    error = classifier_parity_error(data, model, parity_images)
    if not error <= CLASSIFIER_PARITY_TOLERANCE:
        raise ValueError(f"parity check failed: onnxruntime and torch differ by {error:.2e} "
                         f"(> {CLASSIFIER_PARITY_TOLERANCE:g}); nothing written")
    write_with_companion(out, data, out.with_suffix(".json"), spec.to_json().encode())
    return error
