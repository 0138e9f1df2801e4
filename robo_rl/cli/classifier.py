"""`robo-rl reward-classifier train` (arguments in cli/main.py): label a dataset's frames, train, export to ONNX.

Imports torch, pyarrow and PyAV (the train and demos extras) only when it runs.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from robo_rl.core.config import UserError

FLAGS = ("camera", "label_key", "margin_s", "heldout", "image_size", "steps", "batch_size", "learning_rate", "shift",
         "threshold", "debounce", "seed")
"""Command-line flags that set the ClassifierTrainConfig field of the same name."""


def cmd_reward_classifier(args: argparse.Namespace) -> int:
    from robo_rl.core.config import build
    from robo_rl.export.classifier_export import (
        CLASSIFIER_PARITY_TOLERANCE,
        check_classifier_output,
        export_classifier,
    )
    from robo_rl.learn.reward_classifier import (
        ClassifierTrainConfig,
        classifier_spec,
        evaluate,
        load_labelled_frames,
        split_episodes,
        train_classifier,
    )

    cfg = build(ClassifierTrainConfig, {k: getattr(args, k) for k in FLAGS if getattr(args, k) is not None})
    started = time.monotonic()
    try:
        out = check_classifier_output(args.out)  # before any heavy work
        frames = load_labelled_frames(args.dataset, cfg.camera, cfg.label_key, cfg.margin_s, cfg.image_size)
        episodes = int(frames.episode.max()) + 1
        train_eps, heldout_eps = split_episodes(episodes, cfg.heldout, cfg.seed)
    except ValueError as exc:
        raise UserError(f"reward-classifier: {exc}") from None
    train = frames.select(train_eps)
    print(f"{args.dataset}: {episodes} episodes, {len(frames.labels)} frames of {cfg.camera} "
          f"({frames.images.shape[2]}x{frames.images.shape[3]}); training on {len(train_eps)} episodes "
          f"({len(train.labels)} labelled frames, {int(train.labels.sum())} positive), {len(heldout_eps)} held out",
          flush=True)

    def progress(step: int, loss: float) -> None:
        print(f"step {step}/{cfg.steps}: loss {loss:.4f} ({time.monotonic() - started:.0f} s)", flush=True)

    model = train_classifier(frames, train_eps, cfg, progress)
    result = evaluate(model, frames, heldout_eps, cfg.threshold)
    print(held_out_line(result, cfg.threshold), flush=True)
    spec = classifier_spec(cfg, frames, {"dataset": str(Path(args.dataset).resolve()), "train_episodes": len(train_eps),
                                         "heldout_episodes": [int(e) for e in heldout_eps], "heldout": result})
    parity = frames.select(heldout_eps, labelled=False).images[:256]  # (M, 3, H, W) held-out frames
    try:
        error = export_classifier(model, spec, out, parity)
    except ValueError as exc:
        raise UserError(f"reward-classifier: {exc}") from None
    print(f"exported {out}, {out.with_suffix('.json')} (parity onnxruntime vs torch {error:.1e} <= "
          f"{CLASSIFIER_PARITY_TOLERANCE:g} on {len(parity)} held-out frames) in {time.monotonic() - started:.0f} s")
    print(f"on the robot: --reward classifier:{out} (threshold {cfg.threshold:g}, {cfg.debounce} consecutive frames "
          f"of camera {cfg.camera!r})")
    return 0


def held_out_line(result: dict[str, Any], threshold: float) -> str:
    """One line: the held-out accuracy (margin frames left out, and counted as negatives) and the error rates."""
    return (f"held-out accuracy {result['accuracy']:.4f} on {int(result['frames'])} frames "
            f"({int(result['positives'])} positive; {result['accuracy_all_frames']:.4f} with the margin frames counted "
            f"as negatives), false positives {result['false_positive_rate']:.4f}, false negatives "
            f"{result['false_negative_rate']:.4f} at threshold {threshold:g}")
