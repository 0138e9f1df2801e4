"""Summaries of a few training runs (seeds) of one method, as the benchmarks report them.

Few runs make a mean fragile: `summarize` gives the mean, the range and, from five runs on, the interquartile mean
(IQM: the mean of the sorted values left after dropping the lowest and the highest quarter, floor(n / 4) at each
end, as rliable computes it for Agarwal et al. 2021, "Deep RL at the edge of the statistical precipice") and a
percentile bootstrap interval of it. numpy only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

MIN_RUNS_FOR_IQM = 5
"""Below this many runs the IQM and its interval say nothing the range does not: they are left out."""


def interquartile_mean(values: Sequence[float]) -> float:
    """The mean of `values` without the floor(n / 4) lowest and floor(n / 4) highest (scipy's trim_mean(x, 0.25)).

    Raises:
        ValueError: no values.
    """
    x = np.sort(np.asarray(values, dtype=np.float64))
    if x.size == 0:
        raise ValueError("interquartile_mean of no values")
    cut = x.size // 4
    return float(x[cut:x.size - cut].mean())


def bootstrap_interval(values: Sequence[float], statistic=interquartile_mean, *, confidence: float = 0.95,
                       resamples: int = 2000, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval (low, high) of `statistic` over `values`, resampled with replacement.

    Raises:
        ValueError: no values, or `confidence` outside (0, 1).
    """
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        raise ValueError("bootstrap_interval of no values")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence = {confidence!r}: must lie in (0, 1)")
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, x.size, size=(resamples, x.size))  # (R, n)
    stats = np.array([statistic(x[row]) for row in draws])
    tail = (1.0 - confidence) / 2.0
    return float(np.quantile(stats, tail)), float(np.quantile(stats, 1.0 - tail))


@dataclass(frozen=True)
class RunSummary:
    """Several runs' values of one metric."""

    values: tuple[float, ...]
    mean: float
    low: float
    high: float
    iqm: float | None
    """None below MIN_RUNS_FOR_IQM runs."""
    iqm_interval: tuple[float, float] | None

    @property
    def central(self) -> float:
        """What a target is judged on: the IQM from MIN_RUNS_FOR_IQM runs on, else the mean."""
        return self.mean if self.iqm is None else self.iqm

    def describe(self, scale: float = 1.0, digits: int = 1) -> str:
        """One line: the runs' values, mean and range, and the IQM with its 95 % interval where there is one."""
        f = f"{{:.{digits}f}}"
        runs = ", ".join(f.format(scale * v) for v in self.values)
        text = (f"{len(self.values)} runs [{runs}]: mean {f.format(scale * self.mean)}, range "
                f"{f.format(scale * self.low)} to {f.format(scale * self.high)}")
        if self.iqm is not None and self.iqm_interval is not None:
            lo, hi = self.iqm_interval
            text += (f", IQM {f.format(scale * self.iqm)} (95 % bootstrap {f.format(scale * lo)} to "
                     f"{f.format(scale * hi)})")
        return text


def summarize(values: Sequence[float]) -> RunSummary:
    """Mean and range of `values` (one per run), and from MIN_RUNS_FOR_IQM runs on the IQM and its bootstrap
    interval.

    Raises:
        ValueError: no values.
    """
    x = tuple(float(v) for v in values)
    if not x:
        raise ValueError("summarize: no runs")
    enough = len(x) >= MIN_RUNS_FOR_IQM
    return RunSummary(values=x, mean=float(np.mean(x)), low=min(x), high=max(x),
                      iqm=interquartile_mean(x) if enough else None,
                      iqm_interval=bootstrap_interval(x) if enough else None)
