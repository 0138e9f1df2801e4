"""TensorBoard scalars and a one-line progress report per iteration."""

from __future__ import annotations

import sys
from pathlib import Path


def _fmt_time(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 3600:d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def progress_line(iteration: int, total: int, scalars: dict[str, float], elapsed: float, max_time_s: float) -> str:
    """`it 12/300 | 45,000 steps/s | return 1.23 | <metrics> | elapsed 0:00:31 | ETA 0:12:00`."""
    eta_iter = elapsed / iteration * (total - iteration) if iteration else 0.0
    eta = min(eta_iter, max_time_s - elapsed) if max_time_s > 0 else eta_iter
    parts = [f"it {iteration}/{total}", f"{scalars.get('Perf/steps_per_s', 0):,.0f} steps/s"]
    if "Train/mean_return" in scalars:
        parts.append(f"return {scalars['Train/mean_return']:.3f}")
    for key, value in scalars.items():
        if key.startswith("Metrics/"):
            parts.append(f"{key[8:]} {value:.3f}")
    parts += [f"elapsed {_fmt_time(elapsed)}", f"ETA {_fmt_time(eta)}"]
    return " | ".join(parts)


class TrainLogger:
    """Writes scalars to TensorBoard under `run_dir` and prints progress lines.

    Args:
        run_dir: the run directory (events files go there).
        total_iterations: for the progress line and ETA.
        max_time_s: wall-clock budget (0: none), for the ETA.
        purge_step: on resume, drop events written after this iteration by the interrupted run.
        print_progress: print one line per iteration.
    """

    def __init__(
        self,
        run_dir: str | Path,
        total_iterations: int,
        *,
        max_time_s: float = 0.0,
        purge_step: int | None = None,
        print_progress: bool = True,
    ):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(run_dir), purge_step=purge_step)
        self.total = total_iterations
        self.max_time_s = max_time_s
        self.print_progress = print_progress

    def log(self, iteration: int, scalars: dict[str, float], elapsed: float, final: bool) -> None:
        for key, value in scalars.items():
            self.writer.add_scalar(key, value, iteration)
        if self.print_progress or final:
            line = progress_line(iteration, self.total, scalars, elapsed, self.max_time_s)
            print(line, file=sys.stdout, flush=True)

    def video(self, iteration: int, path: Path) -> None:
        print(f"evaluation video: {path}", flush=True)

    def close(self) -> None:
        self.writer.close()
