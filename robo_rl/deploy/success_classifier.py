"""A reward classifier's ONNX file, its preprocessing, and running it on camera frames.

`robo-rl reward-classifier train` (robo_rl.learn.reward_classifier, robo_rl.export.classifier_export) writes a graph

    input:  image        (B, 3, H, W) uint8 RGB (normalised inside the graph: x / 127.5 - 1)
    output: success_prob (B,) float32, the probability that the frame shows the task done

with a `ClassifierSpec` (camera, H, W, threshold, debounce, how it was trained) as JSON in the model's metadata_props
(key `robo_rl.reward_classifier`) and beside it as `<name>.json`. `preprocess_frame` is the one preprocessing of both
sides: the training frames go through it as the robot's do (a frame of another size or aspect ratio is centre-cropped
to the model's aspect ratio and resized with OpenCV's area interpolation).

numpy + onnxruntime (+ opencv-python-headless when frames need resizing) only.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from robo_rl.deploy.camera_frames import fit_frame

CLASSIFIER_KEY = "robo_rl.reward_classifier"
"""metadata_props key of the ClassifierSpec JSON."""
CLASSIFIER_INPUT = "image"
CLASSIFIER_OUTPUT = "success_prob"
SPEC_VERSION = 1


@dataclass(frozen=True, kw_only=True)
class ClassifierSpec:
    """What a reward classifier takes and how its output is read (written by training, read by the robot)."""

    camera: str
    """The camera whose frames it classifies (RobotState.images key; the dataset's observation.images.<camera>)."""
    height: int
    """H of the graph's input; frames of another size are resized (`preprocess_frame`)."""
    width: int
    """W of the graph's input."""
    threshold: float = 0.5
    """A frame is positive when success_prob >= threshold."""
    debounce: int = 10
    """Success once this many consecutive frames are positive (the reward module's default)."""
    normalization: str = "x / 127.5 - 1 inside the graph (input uint8 RGB)"
    """How pixel values are normalised: inside the graph, so the robot feeds uint8."""
    resize: str = "centre crop to the aspect ratio, then cv2.INTER_AREA"
    """How frames of another size become H x W (`preprocess_frame`)."""
    version: int = SPEC_VERSION
    """Schema version of this spec."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Training provenance: dataset, label rule, held-out accuracy, ... (informative; the robot ignores it)."""

    def validate(self) -> None:
        """ValueError (one line) naming a bad field."""
        if self.version != SPEC_VERSION:
            raise ValueError(f"reward classifier spec version {self.version!r}: this robot side reads {SPEC_VERSION}")
        if not isinstance(self.camera, str) or not self.camera:
            raise ValueError(f"reward classifier camera {self.camera!r}: expected a camera name")
        for name in ("height", "width"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 8:
                raise ValueError(f"reward classifier {name} = {value!r}: an integer >= 8 (pixels)")
        check_threshold(self.threshold)
        check_debounce(self.debounce)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ClassifierSpec:
        """Parse and validate; ValueError (one line) for a malformed spec."""
        try:
            raw = json.loads(text)
            spec = cls(**raw)
        except (json.JSONDecodeError, TypeError) as exc:
            raise ValueError(f"malformed reward classifier spec: {exc}") from None
        spec.validate()
        return spec


def check_threshold(value: float) -> float:
    """`value` as a float if 0 < value < 1, else ValueError (one line)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < value < 1.0:
        raise ValueError(f"classifier threshold = {value!r}: a probability strictly between 0 and 1")
    return float(value)


def check_debounce(value: int) -> int:
    """`value` if it is an integer >= 1, else ValueError (one line)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"classifier debounce = {value!r}: an integer >= 1 (consecutive positive frames)")
    return value


def preprocess_frame(frame: np.ndarray, height: int, width: int) -> np.ndarray:
    """A camera frame (H, W, 3) uint8 RGB -> the classifier's input (3, height, width) uint8.

    A frame of exactly height x width is only transposed; any other is centre-cropped to the aspect ratio and resized
    with cv2.INTER_AREA (opencv-python-headless).

    Raises:
        ValueError: not (H, W, 3) uint8, or opencv missing for a frame that needs resizing (one line).
    """
    if frame.dtype != np.uint8 or frame.ndim != 3 or frame.shape[2] != 3:
        raise ValueError(f"classifier frames must be (H, W, 3) uint8 RGB, got {frame.dtype} of shape "
                         f"{tuple(frame.shape)}")
    if frame.shape[:2] != (height, width):
        frame = fit_frame(frame, height, width)  # (height, width, 3)
    return np.ascontiguousarray(frame.transpose(2, 0, 1))  # (3, height, width)


class OnnxClassifier:
    """A reward classifier file: `prob(frame) -> float` on one camera frame (H, W, 3) uint8.

    Raises ValueError (one line) if the file is missing, corrupt, carries no spec, or its input and output are not
    the ones training writes.
    """

    def __init__(self, path: str | Path):
        import onnxruntime as ort

        p = Path(path)
        if not p.is_file():
            raise ValueError(f"reward classifier file {str(p)!r} does not exist")
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1  # one small frame per tick: threads only add latency
        options.inter_op_num_threads = 1
        try:
            self.session = ort.InferenceSession(str(p), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises several types for corrupt files
            reason = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__
            raise ValueError(f"reward classifier file {p} cannot be loaded (corrupt or truncated?): {reason}") from None
        meta = self.session.get_modelmeta().custom_metadata_map
        if CLASSIFIER_KEY not in meta:
            raise ValueError(f"{p} is not a reward classifier (no metadata key {CLASSIFIER_KEY!r}); train one with "
                             "`robo-rl reward-classifier train`")
        self.spec = ClassifierSpec.from_json(meta[CLASSIFIER_KEY])
        inputs = [i.name for i in self.session.get_inputs()]
        outputs = [o.name for o in self.session.get_outputs()]
        if inputs != [CLASSIFIER_INPUT] or outputs != [CLASSIFIER_OUTPUT]:
            raise ValueError(f"reward classifier file {p} has inputs {inputs} and outputs {outputs}; expected "
                             f"[{CLASSIFIER_INPUT!r}] and [{CLASSIFIER_OUTPUT!r}]")
        self.path = p

    def prob(self, frame: np.ndarray) -> float:
        """Success probability of one frame (H, W, 3) uint8 RGB."""
        image = preprocess_frame(frame, self.spec.height, self.spec.width)[None]  # (1, 3, H, W)
        (out,) = self.session.run([CLASSIFIER_OUTPUT], {CLASSIFIER_INPUT: image})
        return float(out[0])
