"""Benchmark the reward classifier: held-out accuracy on arm-pick-place-vision frames.

1. Records `--episodes` episodes of the task's scripted expert in simulation with its 64x64 `scene` camera and the
   per-frame success flag (`robo-rl record --task arm-pick-place-vision --expert --cameras scene`); `--noise` adds
   Gaussian noise to the executed actions, so trajectories differ and some episodes fail.
2. Trains and exports with `robo-rl reward-classifier train` (episodes split by episode, 20 % held out).
3. Reports the held-out accuracy (labelled frames; the 0.2 s margin before each first success is left out), the
   accuracy with the margin frames counted as negatives, the error rates, the ONNX parity, the robot side's
   inference time per frame (onnxruntime, one thread, preprocessing included), and what the `classifier` reward module
   (threshold and debounce from the file) does on each held-out episode run frame by frame: whether it fires, and
   whether before or how long after the recorded first success.

    OMP_NUM_THREADS=1 PYTHONPATH=. python scripts/bench_reward_classifier.py     # ~4 min on 2 shared cores
    PYTHONPATH=. python scripts/bench_reward_classifier.py --smoke
"""

from __future__ import annotations

import os

os.environ.setdefault("MUJOCO_GL", "egl")  # the camera renders headless (before mujoco is imported)

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from robo_rl.sim import set_training_process_defaults  # noqa: E402

set_training_process_defaults()  # before torch is imported, as the CLI does for recording

from robo_rl.cli.main import main as robo_rl  # noqa: E402
from robo_rl.demos.dataset_reader import DatasetReader  # noqa: E402
from robo_rl.deploy.reward_modules import ClassifierReward  # noqa: E402
from robo_rl.deploy.robot import RobotState  # noqa: E402
from robo_rl.deploy.success_classifier import OnnxClassifier  # noqa: E402

TASK = "arm-pick-place-vision"
GOAL = 0.95


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--episodes", type=int, default=40, help="expert episodes recorded (8 s, 400 frames each)")
    p.add_argument("--noise", type=float, default=0.1, help="std of the noise on the executed actions")
    p.add_argument("--steps", type=int, default=1500, help="gradient steps of the classifier")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--keep", metavar="DIR", help="keep the dataset and the model in DIR (default: a temporary folder)")
    p.add_argument("--smoke", action="store_true", help="4 episodes, 20 steps (a smoke run)")
    args = p.parse_args(argv)
    if args.smoke:
        args.episodes, args.steps = 4, 20
    return args


def run(argv: list[str]) -> None:
    """`robo-rl ARGV` in this process; exits with its code if it fails."""
    code = robo_rl(argv)
    if code != 0:
        sys.exit(code)


def inference_ms(model: OnnxClassifier, frames: np.ndarray) -> tuple[float, float]:
    """(median, p99) milliseconds of `model.prob` per frame (H, W, 3) uint8, after a warm-up."""
    for frame in frames[:10]:
        model.prob(frame)
    times = []
    for frame in frames:
        t = time.perf_counter()
        model.prob(frame)
        times.append(time.perf_counter() - t)
    return float(np.median(times) * 1e3), float(np.percentile(times, 99) * 1e3)


def episode_outcomes(model_path: Path, data: Path, episodes: list[int]) -> dict[str, float]:
    """The robot-side module (`classifier:<model>`: threshold and debounce from its spec) run over each episode's frames
    in order, as on the robot: in how many episodes it fires, how many of those before the recorded first success,
    its median delay after the first success, and every episode's offset (frames; negative: early)."""
    module = ClassifierReward.from_file(str(model_path))
    reader = DatasetReader(data)
    fired, early, delays, offsets = 0, 0, [], []
    for e in episodes:
        ep = reader.episode(e)
        flags = ep["next.success"].astype(bool)  # (T,)
        module.reset()
        states = (RobotState(0.0, 0.0, (), np.zeros(0), np.zeros(0), images={"scene": frame})
                  for frame in ep["observation.images.scene"])
        fire = next((t for t, state in enumerate(states) if module(state, {}).success), None)
        if fire is None:
            continue
        fired += 1
        if flags.any():
            offsets.append(fire - int(np.argmax(flags)))
        if not flags.any() or fire < int(np.argmax(flags)):
            early += 1
        else:
            delays.append(fire - int(np.argmax(flags)))
    return {"episodes": len(episodes), "successful": sum(bool(reader.episode(e, images=False)["next.success"].any())
                                                           for e in episodes),
            "fired": fired, "early": early, "delay_median": float(np.median(delays)) if delays else float("nan"),
            "offsets": offsets, "debounce": module.debounce, "fps": reader.fps}


def bench(args: argparse.Namespace, root: Path) -> float:
    """Record, train, report; returns the held-out accuracy."""
    data, model_path = root / "dataset", root / "reward_classifier.onnx"
    started = time.monotonic()
    run(["record", "--task", TASK, "--expert", "--cameras", "scene", "--episodes", str(args.episodes),
         "--num-envs", str(min(8, args.episodes)), "--noise", str(args.noise), "--seed", str(args.seed),
         "--out", str(data)])
    recorded = time.monotonic()
    run(["reward-classifier", "train", "--dataset", str(data), "--out", str(model_path), "--steps", str(args.steps),
         "--seed", str(args.seed)])
    trained = time.monotonic()
    spec = json.loads(model_path.with_suffix(".json").read_text())
    result = spec["extra"]["heldout"]
    model = OnnxClassifier(model_path)
    held = spec["extra"]["heldout_episodes"]
    frames = DatasetReader(data).episode(held[0])["observation.images.scene"]  # (T, H, W, 3)
    median, p99 = inference_ms(model, frames)
    print()
    print(f"{TASK}: {args.episodes} expert episodes (action noise {args.noise:g}), {len(held)} held out; recording "
          f"{recorded - started:.0f} s, training + export {trained - recorded:.0f} s, total {trained - started:.0f} s "
          f"(torch threads: {os.environ.get('OMP_NUM_THREADS', 'default')})")
    print(f"  held-out accuracy {result['accuracy']:.4f} on {int(result['frames'])} labelled frames "
          f"({int(result['positives'])} positive); {result['accuracy_all_frames']:.4f} with the margin frames counted "
          f"as negatives; false positives {result['false_positive_rate']:.4f}, false negatives "
          f"{result['false_negative_rate']:.4f}")
    print(f"  robot side: {median:.3f} ms per frame (median), p99 {p99:.3f} ms (onnxruntime, one thread)")
    o = episode_outcomes(model_path, data, held)
    print(f"  the classifier reward module (debounce {o['debounce']}) over the held-out episodes: fires in "
          f"{o['fired']} of {o['episodes']} ({o['successful']} succeed), {o['early']} before the recorded success, "
          f"the others {o['delay_median']:.0f} frames ({o['delay_median'] / o['fps']:.2f} s) after it (median); "
          f"offsets {o['offsets']} frames at {o['fps']:g} fps")
    return float(result["accuracy"])


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.keep:
        root = Path(args.keep)
        root.mkdir(parents=True, exist_ok=True)
        accuracy = bench(args, root)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            accuracy = bench(args, Path(tmp))
    print()
    print(f"TARGET reward_classifier_accuracy measured={accuracy:.4f} goal=>={GOAL} "
          f"{'PASS' if accuracy >= GOAL else 'FAIL'}")


if __name__ == "__main__":
    main()
