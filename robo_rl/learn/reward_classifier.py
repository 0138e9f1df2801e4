"""A reward classifier: a small CNN that says whether a camera frame shows the task done, trained on a dataset.

Labels (`success_labels`), from a per-frame success flag of the dataset (`next.success` by default, any feature whose
value > 0.5 means success; a LeRobot HIL-SERL recording's sparse `next.reward` also works):
- an episode that never reports success (a failed one) gives negatives only;
- in an episode that does, the frames from its first success on are positive and the frames before it negative,
  except the `margin` frames just before the first success, which are left out of training and of the accuracy:
  there the object is being set down, a centimetre from placed (a pixel at 64 x 64), and an operator presses the
  success key a moment late. A flag that flickers off after the first success (a released cube settling) does not
  make frames negative again.
A recording whose success flag comes only with the episode's end (an operator's key) gives few positives per episode:
hold the success state a while, or record with a per-frame flag (the simulated expert's `next.success`).

Network (`SuccessClassifier`): the `cnn` image encoder of robo_rl.learn.networks.vision (3 stride-2 convolutions,
GroupNorm, SiLU; uint8 in, normalised inside) with narrow channels, its tokens mean- and max-pooled, then an MLP to one
logit: a cube on its marker anywhere in the image looks alike. Training: AdamW on binary cross-entropy, each batch
shifted at random by up to `shift` pixels (DrQ's `random_shift`), episodes split into train and held out (`split`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from robo_rl.core.config import ConfigError, _f
from robo_rl.deploy.success_classifier import ClassifierSpec, preprocess_frame
from robo_rl.learn.networks.vision import SmallCnnEncoder, random_shift

IGNORED = -1
"""Label of a frame in the margin before the first success: in neither class."""


@dataclass(frozen=True, kw_only=True)
class ClassifierTrainConfig:
    """`robo-rl reward-classifier train` settings."""

    camera: str = "scene"
    """Camera whose frames are classified: the dataset feature observation.images.<camera>."""
    label_key: str = "next.success"
    """Per-frame success flag of the dataset (bool, or a number where > 0.5 means success)."""
    margin_s: float = _f(0.2, ge=0.0)
    """Seconds of frames just before an episode's first success left out (the switch is not visible to the pixel)."""
    heldout: float = _f(0.2, gt=0.0, le=0.9)
    """Fraction of the episodes held out (at least one, at most all but one): the accuracy is measured on them, never
    trained on."""
    image_size: int | None = None
    """Side of the square input (pixels); None: the dataset camera's own height and width (no resizing)."""
    channels: tuple[int, ...] = (16, 32, 32)
    """Output channels of the encoder's stride-2 layers (each divisible by 8)."""
    token_dim: int = _f(32, ge=1)
    """Width of the encoder's tokens."""
    hidden: int = _f(64, ge=1)
    """Width of the head's hidden layer."""
    steps: int = _f(1500, ge=1)
    """Gradient steps."""
    batch_size: int = _f(64, ge=1)
    """Frames per gradient step."""
    learning_rate: float = _f(1e-3, gt=0.0)
    """AdamW learning rate (cosine-decayed to 10 % of it)."""
    weight_decay: float = _f(1e-4, ge=0.0)
    """AdamW weight decay."""
    shift: int = _f(4, ge=0)
    """Random-shift augmentation: largest shift in pixels (0: none)."""
    threshold: float = _f(0.5, gt=0.0, le=0.999)
    """Probability from which a frame counts as positive (accuracy, and the robot's default)."""
    debounce: int = _f(10, ge=1)
    """Consecutive positive frames the robot's `classifier` reward module needs for success (its default): as long as
    the margin at 50 Hz, since the classifier never learned the margin's frames and may call them positive."""
    seed: int = 0
    """Seeds the split, the initialisation, the batches and the shifts."""

    def validate(self) -> None:
        """ConfigError (one line) for what the field metadata cannot say (`robo_rl.core.config.build` checks it)."""
        if self.image_size is not None and self.image_size < 16:
            raise ConfigError(f"config error: image_size = {self.image_size}: at least 16 pixels")
        if not self.channels or any(c < 8 or c % 8 for c in self.channels):
            raise ConfigError(f"config error: channels = {list(self.channels)}: positive multiples of 8")


# ---------------------------------------------------------------------------------------------- labels
def success_labels(success: np.ndarray, margin: int) -> np.ndarray:
    """Per-frame labels of one episode from its success flags (T,) bool: 1 from the first success on, 0 before it,
    IGNORED for the `margin` frames just before it; all 0 when the episode never succeeds. Returns (T,) int8."""
    success = np.asarray(success, dtype=bool).reshape(-1)
    labels = np.zeros(len(success), dtype=np.int8)
    if success.any():
        first = int(np.argmax(success))
        labels[first:] = 1
        labels[max(first - margin, 0):first] = IGNORED
    return labels


def split_episodes(num_episodes: int, heldout: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train, held-out) episode indices: a seeded permutation, round(heldout * E) held out (>= 1, <= E - 1)."""
    if num_episodes < 2:
        raise ValueError(f"the dataset has {num_episodes} episode(s); at least 2 are needed (one is held out)")
    k = min(max(1, round(heldout * num_episodes)), num_episodes - 1)
    order = np.random.default_rng(seed).permutation(num_episodes)
    return np.sort(order[k:]), np.sort(order[:k])


@dataclass
class LabelledFrames:
    """Frames of a dataset with their labels, flat over (episode, step)."""

    images: np.ndarray
    """(M, 3, H, W) uint8 RGB, as the classifier takes them."""
    labels: np.ndarray
    """(M,) int8: 1 success, 0 not, IGNORED (margin)."""
    episode: np.ndarray
    """(M,) int64 episode index of each frame."""

    def select(self, episodes: np.ndarray, *, labelled: bool = True) -> LabelledFrames:
        """The frames of `episodes` (only the labelled ones unless `labelled` is False)."""
        keep = np.isin(self.episode, episodes) & ((self.labels != IGNORED) if labelled else True)
        return LabelledFrames(self.images[keep], self.labels[keep], self.episode[keep])


def load_labelled_frames(dataset: str | Path, camera: str, label_key: str, margin_s: float,
                         image_size: int | None) -> LabelledFrames:
    """Every frame of `camera` in a LeRobot v3.0 dataset with its label (`success_labels`).

    Raises:
        ValueError: no such camera, no such label feature, or no episode that succeeds (one line).
    """
    from robo_rl.demos.dataset_reader import DatasetReader  # pyarrow, PyAV (the demos extra)

    reader = DatasetReader(dataset)
    key = f"observation.images.{camera}"
    if key not in reader.video_keys:
        cams = ", ".join(k.removeprefix("observation.images.") for k in reader.video_keys) or "none"
        raise ValueError(f"dataset {dataset} has no camera {camera!r} (cameras: {cams}); record it with --cameras "
                         f"{camera} or pick one with --camera")
    if label_key not in reader.features:
        raise ValueError(f"dataset {dataset} has no success labels ({label_key!r}); record them (the simulated "
                         "expert writes next.success) or name the feature with --label-key")
    height, width = reader.features[key]["shape"][:2]
    size = (image_size, image_size) if image_size else (height, width)
    margin = round(margin_s * reader.fps)
    images, labels, episode = [], [], []
    for i in range(reader.num_episodes):
        ep = reader.episode(i)
        flags = np.asarray(ep[label_key], dtype=np.float64).reshape(len(ep[key]), -1)[:, 0] > 0.5  # (T,)
        images.append(np.stack([preprocess_frame(f, *size) for f in ep[key]]))  # (T, 3, H, W)
        labels.append(success_labels(flags, margin))
        episode.append(np.full(len(flags), i))
    frames = LabelledFrames(np.concatenate(images), np.concatenate(labels), np.concatenate(episode))
    if not (frames.labels == 1).any():
        raise ValueError(f"dataset {dataset}: no episode reaches success ({label_key} never true): nothing to learn")
    if not (frames.labels == 0).any():
        raise ValueError(f"dataset {dataset}: every labelled frame is a success ({label_key}): nothing to learn")
    return frames


# ---------------------------------------------------------------------------------------------- network
class SuccessClassifier(nn.Module):
    """uint8 images (N, 3, H, W) -> success probability (N,): the `cnn` encoder, pooled tokens, an MLP head."""

    def __init__(self, channels: tuple[int, ...] = (16, 32, 32), token_dim: int = 32, hidden: int = 64):
        super().__init__()
        self.encoder = SmallCnnEncoder(token_dim, channels)
        self.head = nn.Sequential(nn.Linear(2 * token_dim, hidden), nn.SiLU(), nn.Linear(hidden, 1))

    def logits(self, images: Tensor) -> Tensor:
        tokens = self.encoder(images)  # (N, T, C)
        pooled = torch.cat([tokens.mean(1), tokens.amax(1)], dim=-1)  # (N, 2C)
        return self.head(pooled).squeeze(-1)  # (N,)

    def forward(self, images: Tensor) -> Tensor:
        return torch.sigmoid(self.logits(images))  # (N,)


def predict(model: SuccessClassifier, images: np.ndarray, batch: int = 256) -> np.ndarray:
    """Success probabilities (M,) float32 of images (M, 3, H, W) uint8, in eval mode."""
    model.eval()
    with torch.no_grad():
        out = [model(torch.from_numpy(images[i:i + batch])) for i in range(0, len(images), batch)]
    return torch.cat(out).numpy() if out else np.zeros(0, np.float32)


def accuracy(prob: np.ndarray, labels: np.ndarray, threshold: float) -> float:
    """Fraction of frames (M,) whose thresholded probability equals their 0/1 label."""
    return float(np.mean((prob >= threshold) == (labels == 1))) if len(labels) else float("nan")


def train_classifier(frames: LabelledFrames, train_episodes: np.ndarray, cfg: ClassifierTrainConfig,
                     progress: Callable[[int, float], None] | None = None) -> SuccessClassifier:
    """Train a SuccessClassifier on the labelled frames of `train_episodes`; `progress(step, loss)` every 10 %."""
    train = frames.select(train_episodes)
    if len(train.labels) == 0:
        raise ValueError("no labelled frame in the training episodes")
    torch.manual_seed(cfg.seed)
    model = SuccessClassifier(cfg.channels, cfg.token_dim, cfg.hidden)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.learning_rate, weight_decay=cfg.weight_decay)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(s / cfg.steps, 1.0))))
    images = torch.from_numpy(train.images)  # (M, 3, H, W) uint8
    targets = torch.from_numpy(train.labels.astype(np.float32))  # (M,)
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    model.train()
    for step in range(1, cfg.steps + 1):
        idx = torch.randint(0, len(targets), (cfg.batch_size,), generator=gen)  # (B,)
        batch = random_shift(images[idx], cfg.shift, gen)  # (B, 3, H, W)
        loss = nn.functional.binary_cross_entropy_with_logits(model.logits(batch), targets[idx])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
        if progress is not None and (step % max(1, cfg.steps // 10) == 0 or step == cfg.steps):
            progress(step, loss.item())
    model.eval()
    return model


def evaluate(model: SuccessClassifier, frames: LabelledFrames, episodes: np.ndarray, threshold: float
             ) -> dict[str, float]:
    """Accuracy on the labelled frames of `episodes` (the margin left out), and on all of them with the margin
    counted as negatives; false positive and false negative rates; frame counts."""
    labelled = frames.select(episodes)
    everything = frames.select(episodes, labelled=False)
    prob = predict(model, everything.images)
    labels = everything.labels
    keep = labels != IGNORED
    positive = prob >= threshold
    return {
        "accuracy": accuracy(prob[keep], labels[keep], threshold),
        "accuracy_all_frames": accuracy(prob, np.where(labels == IGNORED, 0, labels), threshold),
        "false_positive_rate": float(np.mean(positive[labels == 0])) if (labels == 0).any() else float("nan"),
        "false_negative_rate": float(np.mean(~positive[labels == 1])) if (labels == 1).any() else float("nan"),
        "frames": float(len(labelled.labels)),
        "positives": float((labelled.labels == 1).sum()),
    }


def classifier_spec(cfg: ClassifierTrainConfig, frames: LabelledFrames, extra: dict[str, Any]) -> ClassifierSpec:
    """The spec written with the model: its input size (the frames'), threshold, debounce, provenance."""
    _, _, height, width = frames.images.shape
    return ClassifierSpec(camera=cfg.camera, height=int(height), width=int(width), threshold=cfg.threshold,
                          debounce=cfg.debounce, extra={"label_key": cfg.label_key, "margin_s": cfg.margin_s,
                                                        "trained": time.strftime("%Y-%m-%dT%H:%M:%S"), **extra})
