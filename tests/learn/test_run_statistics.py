"""Summaries of several runs: the interquartile mean, its bootstrap interval, and when they are given."""

import numpy as np
import pytest

from robo_rl.learn.run_statistics import MIN_RUNS_FOR_IQM, bootstrap_interval, interquartile_mean, summarize


def test_interquartile_mean_drops_a_quarter_at_each_end():
    assert interquartile_mean([3.0]) == 3.0
    assert interquartile_mean([1.0, 2.0, 3.0]) == 2.0  # n // 4 = 0: the plain mean
    assert interquartile_mean([0.0, 1.0, 2.0, 100.0]) == 1.5  # one dropped at each end
    assert interquartile_mean([9.0, -50.0, 1.0, 2.0, 3.0, 4.0, 5.0, 70.0]) == 3.5  # two at each end, any order
    x = np.random.default_rng(0).normal(size=41)
    trimmed = np.sort(x)[10:31]
    assert interquartile_mean(x) == pytest.approx(trimmed.mean())
    with pytest.raises(ValueError, match="no values"):
        interquartile_mean([])


def test_bootstrap_interval_holds_the_statistic_and_narrows_with_more_runs():
    rng = np.random.default_rng(1)
    few, many = rng.normal(0.5, 0.1, 6), rng.normal(0.5, 0.1, 60)
    lo, hi = bootstrap_interval(few)
    assert lo <= interquartile_mean(few) <= hi
    lo2, hi2 = bootstrap_interval(many)
    assert hi2 - lo2 < hi - lo
    assert bootstrap_interval(few, seed=3) == bootstrap_interval(few, seed=3)  # seeded
    assert bootstrap_interval([0.2] * 5) == pytest.approx((0.2, 0.2))
    with pytest.raises(ValueError, match=r"confidence = 1.5: must lie in \(0, 1\)"):
        bootstrap_interval(few, confidence=1.5)


def test_summary_gives_the_iqm_only_from_five_runs():
    two = summarize([0.2, 0.4])
    assert (two.mean, two.low, two.high, two.iqm, two.central) == (pytest.approx(0.3), 0.2, 0.4, None,
                                                                 pytest.approx(0.3))
    assert two.describe(scale=100) == "2 runs [20.0, 40.0]: mean 30.0, range 20.0 to 40.0"
    five = summarize([0.1, 0.5, 0.6, 0.7, 1.0])
    assert MIN_RUNS_FOR_IQM == 5 and five.iqm == pytest.approx(0.6) and five.central == five.iqm
    assert "IQM 60.0 (95 % bootstrap " in five.describe(scale=100)
    with pytest.raises(ValueError, match="no runs"):
        summarize([])
