"""Input drift (tasks/data/drift.py): the population stability index against hand-computed values,
and the warning line."""

import math

import numpy as np
import pytest

from tasks.data.drift import drift_line, feature_drift, psi

REFERENCE = np.arange(1000.0)  # deciles at 99.9, 199.8, ...: a tenth in each bin


def test_the_same_distribution_has_no_drift():
    assert psi(REFERENCE, REFERENCE) == pytest.approx(0.0, abs=1e-12)


def test_a_live_window_in_the_top_decile_by_hand():
    # q = 1 in the top bin, floored 1e-4 in the nine others; p = 0.1 everywhere
    by_hand = 9 * (1e-4 - 0.1) * math.log(1e-4 / 0.1) + (1 - 0.1) * math.log(1 / 0.1)
    assert psi(REFERENCE, np.full(50, 995.0)) == pytest.approx(by_hand, rel=1e-12)
    half = np.r_[np.arange(0.0, 500.0), np.arange(0.0, 500.0)]  # the lower five bins, each twice as full
    assert psi(REFERENCE, half) == pytest.approx(5 * 0.1 * math.log(2) + 5 * (1e-4 - 0.1) * math.log(1e-3),
                                                 rel=1e-9)


def test_too_few_values_claim_no_drift_and_nan_is_dropped():
    assert math.isnan(psi(REFERENCE, np.arange(5.0)))
    assert psi(np.r_[REFERENCE, np.nan], np.r_[REFERENCE, np.inf]) == pytest.approx(0.0, abs=1e-12)


def test_per_feature_and_the_line_names_the_large_shifts():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 4, 2))
    x[200:, :, 1] += 2.0  # the second feature moves by two standard deviations in the live bars
    drift = feature_drift(x, ["ewm_40_xs", "vol_20"], slice(0, 200), slice(200, None))
    assert drift["ewm_40_xs"] < 0.1 < 0.25 < drift["vol_20"]
    line = drift_line(drift, 100)
    assert line.startswith("input drift over 100 live bars against the training window: large shift in vol_20")
    assert "no feature above" in drift_line({"ewm_40_xs": 0.01}, 5)
