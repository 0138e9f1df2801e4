"""The graph inputs of a policy beyond its observation vector (contract `inputs`): camera frames and the instruction.

A VLA's exported graph takes, besides `obs`, one uint8 (B, 3, H, W) RGB input per camera (`image:<camera>`) and the
sentence embedding of its instruction (`instruction`, (B, E) float32). `PolicyInputs` makes them each tick: the
frame of each camera from the robot's state (`RobotState.images`, (H, W, 3) uint8) as the contract says
(`frame_to_input`), and the embedding of the operator's instruction text, encoded once per instruction by the
encoder graph written beside the policy (`robo_rl.deploy.instruction`).

numpy + onnxruntime (+ tokenizers for an instruction) only.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from robo_rl.core.contract import IMAGE_PREFIX, INSTRUCTION, ObsTerm


def frame_to_input(frame: np.ndarray, term: ObsTerm) -> np.ndarray:
    """A camera frame (H, W, 3) uint8 RGB -> the graph's (3, h, w) uint8 for the input term `image:<camera>`.

    The contract's resize rule: `none` takes frames of exactly h x w; `area` also takes k h x k w frames (one
    integer k for both sides) and averages each k x k block (rounded half up).

    Raises:
        ValueError: not uint8 RGB, or a size the rule does not take (one line naming the camera and both sizes).
    """
    h, w, rule = term.params["height"], term.params["width"], term.params["resize"]
    camera = term.name[len(IMAGE_PREFIX):]
    if frame.dtype != np.uint8 or frame.ndim != 3 or frame.shape[2] != 3:
        raise ValueError(f"camera {camera!r}: frames must be (H, W, 3) uint8 RGB, got {frame.dtype} of shape "
                         f"{tuple(frame.shape)}")
    fh, fw = frame.shape[:2]
    if (fh, fw) == (h, w):
        return np.ascontiguousarray(frame.transpose(2, 0, 1))
    k = fh // h
    if rule == "area" and k >= 1 and (fh, fw) == (k * h, k * w):
        blocks = frame.reshape(h, k, w, k, 3).mean(axis=(1, 3))  # (h, w, 3)
        return np.ascontiguousarray(np.floor(blocks + 0.5).astype(np.uint8).transpose(2, 0, 1))
    takes = f"{h}x{w}" if rule == "none" else f"{h}x{w} or a whole multiple of it"
    raise ValueError(f"camera {camera!r} sends {fh}x{fw} frames; the policy takes {takes} (contract inputs "
                     f"{term.name}, resize {rule})")


class PolicyInputs:
    """The contract's input terms for one tick: camera frames from the state, the instruction's embedding.

    Args:
        terms: the contract's `inputs`.
        policy_path: the policy file; the instruction encoder (`params.encoder`) is looked up beside it.

    Raises:
        ValueError: the instruction encoder or its tokenizer is missing or broken, or its embedding size differs from
            the contract's (one line).
    """

    def __init__(self, terms: tuple[ObsTerm, ...], policy_path: Path):
        self.images = tuple(t for t in terms if t.name.startswith(IMAGE_PREFIX))
        self.cameras = tuple(t.name[len(IMAGE_PREFIX):] for t in self.images)
        """Camera names the robot's state must carry frames of."""
        self.instruction_term = next((t for t in terms if t.name == INSTRUCTION), None)
        self.encoder = None
        if self.instruction_term is not None:
            from robo_rl.deploy.instruction import InstructionEncoder  # needs tokenizers: only for a policy with text

            self.encoder = InstructionEncoder(policy_path.parent / self.instruction_term.params["encoder"])
            if self.encoder.dim != self.instruction_term.dim:
                raise ValueError(f"instruction encoder {self.encoder.path.name} gives {self.encoder.dim} numbers; the "
                                 f"policy takes {self.instruction_term.dim} (contract inputs instruction)")
        self.instruction: str | None = None
        self._embedding: np.ndarray | None = None  # (E,) float32 of `instruction`

    @property
    def needs_instruction(self) -> bool:
        return self.instruction_term is not None

    def set_instruction(self, text: str) -> None:
        """Follow `text` from now on (encoded once, here).

        Raises:
            ValueError: the policy takes no instruction, or the text is empty or too long (one line).
        """
        if self.encoder is None:
            raise ValueError("this policy takes no instruction (its contract has no `instruction` input)")
        embedding = self.encoder(text)  # refuses empty and over-long texts
        self.instruction, self._embedding = text, embedding

    def check_cameras(self, images: Mapping[str, np.ndarray]) -> None:
        """Refuse a robot whose state lacks a camera the policy reads or sends frames of a size it does not take
        (ValueError, one line), before anything moves."""
        for term, camera in zip(self.images, self.cameras, strict=True):
            frame_to_input(self._frame(images, term, camera), term)

    @staticmethod
    def _frame(images: Mapping[str, np.ndarray], term: ObsTerm, camera: str) -> np.ndarray:
        frame = images.get(camera)
        if frame is None:
            raise ValueError(f"the robot's state carries no frame of camera {camera!r} (the policy reads "
                             f"{term.name}; cameras in the state: {', '.join(images) or 'none'})")
        return frame

    def __call__(self, images: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """{input name: (1, ...) array} for the camera frames `images` ({camera: (H, W, 3) uint8}).

        Raises:
            ValueError: a camera's frame is missing or of the wrong size, or no instruction was set (one line).
        """
        feed = {}
        for term, camera in zip(self.images, self.cameras, strict=True):
            feed[term.name] = frame_to_input(self._frame(images, term, camera), term)[None]
        if self.instruction_term is not None:
            if self._embedding is None:
                raise ValueError("this policy follows an instruction and none was given (--instruction TEXT)")
            feed[INSTRUCTION] = self._embedding[None]
        return feed
