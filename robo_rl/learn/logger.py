"""TensorBoard scalars and videos, and the progress report: a bar that updates in place on a
terminal (tqdm), plain periodic lines when the output is a file or a pipe (CI logs, `| tee`)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TextIO

import numpy as np

from robo_rl.learn.policy_video import encode_gif

PLAIN_INTERVAL_S = 10.0
"""Without a terminal, a progress line is printed at most this often (always for the first and last iteration)."""


def _fmt_time(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 3600:d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def progress_fields(scalars: dict[str, float]) -> list[str]:
    """`45,000 steps/s`, `return 1.23` and one `<metric> <value>` per task metric."""
    parts = [f"{scalars.get('Perf/steps_per_s', 0):,.0f} steps/s"]
    if "Train/mean_return" in scalars:
        parts.append(f"return {scalars['Train/mean_return']:.3f}")
    parts += [f"{key[8:]} {value:.3f}" for key, value in scalars.items() if key.startswith("Metrics/")]
    return parts


def progress_line(iteration: int, total: int, scalars: dict[str, float], elapsed: float, max_time_s: float) -> str:
    """`it 12/300 | 45,000 steps/s | return 1.23 | <metrics> | elapsed 0:00:31 | ETA 0:12:00`."""
    eta_iter = elapsed / iteration * (total - iteration) if iteration else 0.0
    eta = min(eta_iter, max_time_s - elapsed) if max_time_s > 0 else eta_iter
    parts = [f"it {iteration}/{total}", *progress_fields(scalars)]
    return " | ".join([*parts, f"elapsed {_fmt_time(elapsed)}", f"ETA {_fmt_time(eta)}"])


class TrainLogger:
    """Writes scalars and videos to TensorBoard under `run_dir` and reports progress.

    Args:
        run_dir: the run directory (events files go there).
        total_iterations: for the progress report and ETA.
        max_time_s: wall-clock budget (0: none), for the ETA.
        purge_step: on resume, drop events written after this iteration by the interrupted run
            (also where the progress bar starts).
        print_progress: report progress at all (the final line is always printed).
        stream: where progress goes (default stdout); a terminal gets a bar, anything else plain lines.
    """

    def __init__(
        self,
        run_dir: str | Path,
        total_iterations: int,
        *,
        max_time_s: float = 0.0,
        purge_step: int | None = None,
        print_progress: bool = True,
        stream: TextIO | None = None,
    ):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(run_dir), purge_step=purge_step)
        self.total = total_iterations
        self.max_time_s = max_time_s
        self.print_progress = print_progress
        self.stream = stream if stream is not None else sys.stdout
        self._last_print = -float("inf")
        self.bar = None
        if print_progress and self.stream.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total_iterations, initial=purge_step or 0, file=self.stream, unit="it",
                            dynamic_ncols=True, leave=True)

    def log(self, iteration: int, scalars: dict[str, float], elapsed: float, final: bool) -> None:
        for key, value in scalars.items():
            self.writer.add_scalar(key, value, iteration)
        if self.bar is not None:
            self.bar.update(iteration - self.bar.n)
            self.bar.set_postfix_str(" | ".join(progress_fields(scalars)), refresh=True)
            if final:
                self.bar.close()
                self.bar = None
        now = time.monotonic()
        plain_due = self.print_progress and self.bar is None and now - self._last_print >= PLAIN_INTERVAL_S
        if final or plain_due:
            self._last_print = now
            print(progress_line(iteration, self.total, scalars, elapsed, self.max_time_s), file=self.stream, flush=True)

    def video(self, iteration: int, path: Path, frames: list[np.ndarray], fps: float) -> None:
        """Report the MP4 written at `path` and show its frames as an animated image in TensorBoard."""
        from tensorboard.compat.proto.summary_pb2 import Summary

        gif = encode_gif(frames, fps)
        h, w = frames[0].shape[:2]
        image = Summary.Image(height=h, width=w, colorspace=3, encoded_image_string=gif)
        # What SummaryWriter.add_video writes, without its moviepy dependency: an image summary holding a GIF.
        summary = Summary(value=[Summary.Value(tag="Video/eval", image=image)])
        self.writer._get_file_writer().add_summary(summary, iteration)
        self.writer.flush()
        self._write_line(f"evaluation video: {path}")

    def _write_line(self, text: str) -> None:
        if self.bar is not None:
            self.bar.write(text, file=self.stream)
        else:
            print(text, file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        self.writer.close()
