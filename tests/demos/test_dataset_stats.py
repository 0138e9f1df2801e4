"""Dataset statistics (robo_rl.demos.dataset_stats): per-episode stats aggregate to the stats of all frames."""

from __future__ import annotations

import numpy as np

from robo_rl.demos.dataset_stats import QUANTILES, aggregate_stats, dataset_stats, feature_stats, stats_columns


def test_aggregated_episode_stats_equal_the_stats_of_all_frames():
    """min, max, mean and std aggregate exactly (std from the second moments); quantiles are count-weighted means."""
    rng = np.random.default_rng(0)
    episodes = [rng.normal(loc=i, scale=1 + i, size=(n, 3)) for i, n in enumerate([7, 20, 13])]  # (T, 3) each
    whole = feature_stats(np.concatenate(episodes))
    agg = aggregate_stats([feature_stats(e) for e in episodes])
    for name in ("min", "max", "mean", "std"):
        np.testing.assert_allclose(agg[name], whole[name], rtol=1e-12, atol=1e-12)
    assert agg["count"].tolist() == [40] and agg["mean"].shape == (3,)
    weights = np.array([7, 20, 13]) / 40
    medians = [np.quantile(e, 0.5, axis=0) for e in episodes]  # (3,) each
    np.testing.assert_allclose(agg["q50"], sum(w * m for w, m in zip(weights, medians, strict=True)))
    assert {f"q{round(q * 100):02d}" for q in QUANTILES} <= set(agg)


def test_image_stats_are_per_channel_in_unit_range_and_round_trip_through_episode_rows():
    """Images (T, H, W, 3) uint8 give LeRobot's (3, 1, 1) per-channel stats in [0, 1]; an episode row's
    `stats/<key>/<name>` columns read back into the same numbers."""
    images = np.zeros((4, 2, 2, 3), np.uint8)
    images[..., 0] = 255  # red channel full, the others dark
    st = feature_stats(images)
    assert st["mean"].shape == (3, 1, 1) and st["mean"].reshape(-1).tolist() == [1.0, 0.0, 0.0]
    row = {"episode_index": 0, **stats_columns("cam", st), **stats_columns("x", feature_stats(np.arange(5.0)))}
    back = dataset_stats([row], ["cam", "x", "absent"])
    assert set(back) == {"cam", "x"}
    np.testing.assert_array_equal(back["cam"]["max"], st["max"])
    assert back["x"]["mean"].tolist() == [2.0] and back["x"]["count"].tolist() == [5]
