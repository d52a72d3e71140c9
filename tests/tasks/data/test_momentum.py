"""Scale-free features against hand-computed values, and no look-ahead."""

import numpy as np
import pytest

from tasks.data import momentum

CLOSE = np.array([[10.0, 100.0], [11.0, 100.0], [12.1, 90.0], [13.31, 99.0]])


def test_log_returns_by_hand():
    got = momentum.log_returns(CLOSE, 2)
    assert np.isnan(got[:2]).all()
    np.testing.assert_allclose(got[2:], np.log([[1.21, 0.9], [1.21, 0.99]]))


def test_cross_sectional_z_scores_each_bar_across_stocks():
    got = momentum.cross_sectional_z(np.array([[1.0, 2.0, 3.0], [5.0, 5.0, 5.0]]))
    np.testing.assert_allclose(got, [[-np.sqrt(1.5), 0.0, np.sqrt(1.5)], [0.0, 0.0, 0.0]])


def test_realised_vol_is_the_std_of_the_last_one_bar_returns():
    got = momentum.realised_vol(CLOSE, 2)
    r = np.log(CLOSE[1:] / CLOSE[:-1])
    np.testing.assert_allclose(got[3], r[1:3].std(axis=0))
    assert np.isnan(got[:2]).all()


def test_the_exponentially_weighted_return_by_hand():
    # halflife 1: the last 3 one-bar returns weighted 1, 1/2, 1/4 (sum 1.75)
    close = np.exp(np.array([[0.0], [0.1], [0.3], [0.6], [0.6]]))
    got = momentum.ewm_return(close, 1)[:, 0]
    assert np.isnan(got[:3]).all()
    np.testing.assert_allclose(got[3:], [(0.3 + 0.2 / 2 + 0.1 / 4) / 1.75, (0.0 + 0.3 / 2 + 0.2 / 4) / 1.75])


def test_the_trend_sharpe_is_the_trend_over_the_same_horizons_volatility_by_hand():
    # horizon 2: the last 6 one-bar returns weighted 2^(-k/2); the volatility is the (population)
    # sd of the last 2 returns
    close = np.exp(np.array([[0.0], [0.1], [0.3], [0.6], [0.6], [0.7], [0.7]]))
    newest_first = np.array([0.0, 0.1, 0.0, 0.3, 0.2, 0.1])
    weights = 2.0 ** (-np.arange(6) / 2)
    trend = (weights * newest_first).sum() / weights.sum()
    got = momentum.trend_sharpe(close, 2)[:, 0]
    assert np.isnan(got[:6]).all()
    np.testing.assert_allclose(got[6], trend / 0.05)
    # horizon 1: one return has no spread, so there is no volatility to scale the trend by
    assert momentum.trend_sharpe(close, 1)[4, 0] == 0.0


def test_a_flat_stock_has_a_trend_sharpe_of_zero_not_nan_and_its_peers_are_still_ranked():
    rng = np.random.default_rng(1)
    close = 50 * np.exp(np.cumsum(rng.normal(0, 0.02, (200, 3)), axis=0))
    close[:, 1] = 20.0  # never trades away from 20
    got = momentum.feature(close, "sr_40")
    assert (got[120:, 1] == 0.0).all()
    assert np.isfinite(momentum.feature(close, "sr_40_xs")[120:]).all()


@pytest.mark.parametrize("name", momentum.NAMES)
def test_no_feature_reads_a_later_close_and_none_depends_on_the_price_level(name):
    rng = np.random.default_rng(0)
    close = 50 * np.exp(np.cumsum(rng.normal(0, 0.02, (160, 4)), axis=0))
    base = momentum.feature(close, name)
    assert np.isfinite(base[150:]).all()  # every feature has a value before the change below
    future = close.copy()
    future[150:] *= 3.0
    np.testing.assert_array_equal(momentum.feature(future, name)[:150], base[:150])
    np.testing.assert_allclose(momentum.feature(close * [1.0, 100.0, 0.01, 7.0], name), base, rtol=1e-9, atol=1e-12)


def test_unknown_names_are_refused():
    with pytest.raises(ValueError, match="ret_7"):
        momentum.feature(CLOSE, "ret_7")


@pytest.mark.parametrize("n", [1, 2, 7])
@pytest.mark.parametrize("window", [2, 8, 20, 21])
def test_realised_vol_is_each_windows_std_bit_for_bit_in_chunks(monkeypatch, n, window):
    """A panel's window std sums stock by stock in row order, a single column's pairwise: the
    chunked sliding windows give each shape exactly its own numbers."""
    monkeypatch.setattr(momentum, "_CELLS", 64)  # many chunks
    rng = np.random.default_rng(n + window)
    close = 50 * np.exp(np.cumsum(rng.normal(0, 0.02, (300, n)), axis=0))
    ret = momentum.log_returns(close, 1)
    want = np.full(close.shape, np.nan)
    for t in range(window, len(close)):
        want[t] = ret[t - window + 1 : t + 1].std(axis=0)
    np.testing.assert_array_equal(momentum.realised_vol(close, window), want)


def test_ragged_z_equals_scoring_each_bar_on_its_own():
    rng = np.random.default_rng(4)
    values = rng.normal(size=(300, 6))
    values[rng.random(values.shape) < 0.3] = np.nan
    values[:3] = np.nan  # bars with no value at all stay NaN
    want = np.full(values.shape, np.nan)
    for t, row in enumerate(values):
        have = np.isfinite(row)
        if have.any():
            want[t, have] = momentum.cross_sectional_z(row[have][None])[0]
    np.testing.assert_array_equal(momentum.ragged_z(values), want)


@pytest.mark.parametrize("name", momentum.NAMES)
def test_lookback_bars_before_t_are_all_a_value_at_t_reads(name):
    rng = np.random.default_rng(1)
    close = 50 * np.exp(np.cumsum(rng.normal(0, 0.02, (200, 4)), axis=0))
    full, back = momentum.feature(close, name), momentum.lookback(name)
    for t in (back, 150, 199):
        np.testing.assert_array_equal(momentum.feature(close[t - back : t + 1], name)[-1], full[t])
    if not name.endswith("_xs"):  # one bar fewer is not enough
        assert np.isnan(momentum.feature(close[200 - back :], name)[-1]).all()
