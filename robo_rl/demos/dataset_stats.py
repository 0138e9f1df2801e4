"""Feature statistics of LeRobot v3.0 datasets (LeRobot's `compute_stats`): per episode, and aggregated. numpy only.

Per feature: min, max, mean, std, count and the quantiles q01 q10 q50 q90 q99 over its frames; images per
channel in [0, 1], LeRobot's (3, 1, 1) layout. Each episode's stats are stored in its meta/episodes row
(columns `stats/<feature>/<name>`); meta/stats.json aggregates them over the committed episodes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

QUANTILES = (0.01, 0.10, 0.50, 0.90, 0.99)
IMAGE_SAMPLES = 64
"""Frames per episode and camera that image stats are computed from (evenly spaced)."""


def feature_stats(values: np.ndarray) -> dict[str, np.ndarray]:
    """min, max, mean, std, count and quantiles over axis 0 of (T, ...) values (images: per channel in [0, 1])."""
    x = values.astype(np.float64)
    if x.ndim == 4:  # (T, H, W, 3) images -> per channel, LeRobot's (3, 1, 1) layout
        x = x.reshape(-1, 3) / 255.0
        shape = (3, 1, 1)
    else:
        x = x.reshape(len(x), -1)  # (T, D)
        shape = x.shape[1:]
    out = {"min": x.min(0), "max": x.max(0), "mean": x.mean(0), "std": x.std(0)}
    for q in QUANTILES:
        out[f"q{round(q * 100):02d}"] = np.quantile(x, q, axis=0)
    out = {k: v.reshape(shape) for k, v in out.items()}
    out["count"] = np.array([len(values)])
    return out


def aggregate_stats(parts: Sequence[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Dataset stats from per-episode stats: exact min/max/mean/std; quantiles count-weighted means (as LeRobot)."""
    counts = np.array([float(p["count"][0]) for p in parts])
    w = counts / counts.sum()
    means = np.stack([p["mean"] for p in parts])
    mean = np.tensordot(w, means, axes=1)
    second = np.tensordot(w, np.stack([p["std"] ** 2 + p["mean"] ** 2 for p in parts]), axes=1)
    out = {
        "min": np.min(np.stack([p["min"] for p in parts]), 0),
        "max": np.max(np.stack([p["max"] for p in parts]), 0),
        "mean": mean,
        "std": np.sqrt(np.maximum(second - mean**2, 0.0)),
        "count": np.array([int(counts.sum())]),
    }
    for q in QUANTILES:
        key = f"q{round(q * 100):02d}"
        out[key] = np.tensordot(w, np.stack([p[key] for p in parts]), axes=1)
    return out


def stats_to_json(stats: dict[str, dict[str, np.ndarray]]) -> dict[str, dict[str, list]]:
    """{feature: {stat: array}} as plain lists (meta/stats.json)."""
    return {k: {s: v.tolist() for s, v in st.items()} for k, st in stats.items()}


def stats_columns(key: str, stats: Mapping[str, np.ndarray]) -> dict[str, list]:
    """One feature's episode stats as meta/episodes columns `stats/<key>/<name>` (images (3, 1, 1), as LeRobot
    normalises (C, H, W))."""
    return {f"stats/{key}/{name}": v.tolist() for name, v in stats.items()}


def episode_stats(episode: Mapping[str, Any], keys: Sequence[str]) -> dict[str, dict[str, np.ndarray]]:
    """The stats of features `keys` stored in one meta/episodes row ({} for a feature without any)."""
    out = {}
    for key in keys:
        prefix = f"stats/{key}/"
        out[key] = {name[len(prefix):]: np.asarray(v) for name, v in episode.items() if name.startswith(prefix)}
    return out


def dataset_stats(episodes: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> dict[str, dict[str, np.ndarray]]:
    """meta/stats.json of committed `episodes` (at least one): their stats aggregated, per feature that has any."""
    per_episode = [episode_stats(ep, keys) for ep in episodes]
    return {k: aggregate_stats([p[k] for p in per_episode]) for k in keys if per_episode[0][k]}
