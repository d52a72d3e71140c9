"""Turbulence and the volatility proxy against direct, hand-written computations."""

import math

import numpy as np
import pytest

from tasks.data.turbulence import log_returns, turbulence, volatility_proxy

# Two correlated stocks, 9 bars: the covariance's off-diagonal term matters.
CLOSE = np.array([[100, 50], [101, 50.8], [99.5, 49.9], [102, 51.5], [103, 51.7], [101, 50.2],
                  [104, 52.6], [100, 51.9], [102.5, 50.5]], dtype=np.float64)


def mahalanobis(r: np.ndarray, t: int, window: int, stats_from: int | None = None) -> float:
    """(y_t − μ) Σ⁻¹ (y_t − μ)ᵀ with μ, Σ from the ``window`` returns before ``stats_from`` (default t),
    written out for two assets: Σ⁻¹ = [[d, −b], [−c, a]] / (ad − bc)."""
    end = t if stats_from is None else stats_from
    hist = r[end - window : end]
    mu = hist.sum(axis=0) / window
    dev = hist - mu
    a, d = (dev[:, 0] ** 2).sum() / (window - 1), (dev[:, 1] ** 2).sum() / (window - 1)
    b = (dev[:, 0] * dev[:, 1]).sum() / (window - 1)
    x, y = r[t] - mu
    return (d * x * x - 2 * b * x * y + a * y * y) / (a * d - b * b)


def test_log_returns_start_with_nan():
    r = log_returns(CLOSE)
    assert np.isnan(r[0]).all()
    assert math.isclose(r[1, 0], math.log(101 / 100)) and math.isclose(r[8, 1], math.log(50.5 / 51.9))


def test_turbulence_is_the_mahalanobis_distance_to_the_previous_window():
    window = 4
    r = log_returns(CLOSE)
    got = turbulence(CLOSE, window)
    assert np.isnan(got[: window + 1]).all()  # the first return is bar 1, so bar 5 is the first with 4 before it
    for t in range(window + 1, len(CLOSE)):
        assert math.isclose(got[t], mahalanobis(r, t, window), rel_tol=1e-9), t


def test_refreshed_turbulence_keeps_each_blocks_stats_from_before_the_block():
    window, refresh = 3, 2
    r = log_returns(CLOSE)
    got = turbulence(CLOSE, window, refresh)
    assert np.isnan(got[: window + 1]).all()
    for t in range(window + 1, len(CLOSE)):
        block = window + 1 + (t - window - 1) // refresh * refresh
        assert math.isclose(got[t], mahalanobis(r, t, window, stats_from=block), rel_tol=1e-9), t


def test_volatility_proxy_is_the_annualised_sd_of_the_equal_weight_market_in_percent():
    window, per_year = 3, 252.0
    market = [(math.log(CLOSE[t, 0] / CLOSE[t - 1, 0]) + math.log(CLOSE[t, 1] / CLOSE[t - 1, 1])) / 2
              for t in range(1, len(CLOSE))]
    got = volatility_proxy(CLOSE, window, per_year)
    assert np.isnan(got[:window]).all()
    for t in range(window, len(CLOSE)):
        last = market[t - window : t]
        mean = sum(last) / window
        sd = math.sqrt(sum((m - mean) ** 2 for m in last) / (window - 1))
        assert math.isclose(got[t], sd * math.sqrt(per_year) * 100.0, rel_tol=1e-9), t


def test_volatility_proxy_of_too_short_a_history_is_all_nan():
    assert np.isnan(volatility_proxy(CLOSE[:3], window=3, per_year=252.0)).all()


def test_volatility_proxy_starts_as_soon_as_window_returns_exist():
    got = volatility_proxy(CLOSE[:4], window=3, per_year=252.0)  # 3 returns: exactly one window
    assert np.isnan(got[:3]).all() and np.isfinite(got[3])


def panel(bars: int, stocks: int) -> np.ndarray:
    rng = np.random.default_rng(stocks)
    return 30 * np.exp(np.cumsum(rng.normal(0, 0.001, (bars, stocks)), axis=0))


@pytest.mark.parametrize("refresh", [1, 7, 50])
def test_turbulence_in_chunks_and_from_a_later_bar_equals_the_whole(monkeypatch, refresh):
    close = panel(523, 12)
    whole = turbulence(close, 20, refresh)
    monkeypatch.setattr("tasks.data.turbulence.CHUNK", 60)
    np.testing.assert_array_equal(turbulence(close, 20, refresh), whole)
    for first in (0, 21, 100, 522):
        np.testing.assert_array_equal(turbulence(close, 20, refresh, first), whole[first:])


@pytest.mark.parametrize("stocks", [12, 30])
def test_turbulence_of_a_bar_does_not_change_when_later_bars_arrive(stocks):
    """The last refresh block is cut short by the end of the history; BLAS rounds a row of
    ``dev @ inv`` differently with the block's height, so the block is padded to full height."""
    close = panel(1200, stocks)
    whole = turbulence(close, 120, 390)
    for bars in (700, 899, 1000, 1111):  # 1111: 209 rows into a block, an odd height
        np.testing.assert_array_equal(turbulence(close[:bars], 120, 390), whole[:bars])


def test_volatility_proxy_in_chunks_and_from_a_later_bar_equals_the_whole(monkeypatch):
    close = panel(523, 5)
    whole = volatility_proxy(close, 21, 252.0)
    monkeypatch.setattr("tasks.data.turbulence.CHUNK", 40)
    np.testing.assert_array_equal(volatility_proxy(close, 21, 252.0), whole)
    for first in (0, 20, 21, 300, 522):
        np.testing.assert_array_equal(volatility_proxy(close, 21, 252.0, first), whole[first:])
