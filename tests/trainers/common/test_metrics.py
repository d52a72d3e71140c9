import math

import numpy as np
import pytest

from trainers.common.metrics import (
    cumulative_return,
    deflated,
    deflated_sharpe,
    expected_max_sharpe,
    max_drawdown,
    performance,
    periods_per_year,
    sharpe,
    sortino,
)


def test_metrics_on_known_curves():
    flat = np.full(253, 100.0)
    assert sharpe(flat, 252) == 0.0 and max_drawdown(flat) == 0.0
    doubling = 100 * 2 ** (np.arange(253) / 252)
    m = performance(doubling, 252)
    assert math.isclose(m["cumulative_return"], 1.0) and math.isclose(m["annual_return"], 1.0)
    assert m["annual_volatility"] < 1e-9 and m["max_drawdown"] == 0.0
    curve = np.array([100.0, 120.0, 60.0, 90.0])
    assert math.isclose(max_drawdown(curve), -0.5)
    m = performance(curve, 252)
    assert math.isclose(m["calmar"], m["annual_return"] / 0.5)


def test_sharpe_matches_definition():
    rng = np.random.default_rng(0)
    r = rng.normal(0.001, 0.01, 500)
    values = 100 * np.cumprod(np.concatenate(([1.0], 1 + r)))
    assert math.isclose(sharpe(values, 252), r.mean() / r.std(ddof=1) * math.sqrt(252), rel_tol=1e-9)


def test_sortino_by_hand():
    values = np.array([100.0, 110.0, 99.0, 108.9])  # returns +10%, -10%, +10%
    downside = math.sqrt((0.0 + 0.01 + 0.0) / 3)  # only the fall counts, averaged over every bar
    assert sortino(values, 252) == pytest.approx((0.1 / 3) / downside * math.sqrt(252), rel=1e-12)
    # 25.2% a year is 0.1% a bar: excess returns 9.9%, -10.1%, 9.9%
    assert sortino(values, 252, risk_free=0.252) == pytest.approx(
        (0.097 / 3) / math.sqrt(0.101**2 / 3) * math.sqrt(252), rel=1e-12)
    assert sortino(np.array([100.0, 101.0, 102.0]), 252) == 0.0  # no downside


def test_the_risk_free_rate_is_taken_per_bar_from_every_return():
    values = np.array([100.0, 101.0, 100.5, 102.0])
    r = np.array([101 / 100 - 1, 100.5 / 101 - 1, 102 / 100.5 - 1])
    excess = r - 0.0252 / 252
    expected = excess.mean() / excess.std(ddof=1) * math.sqrt(252)
    assert sharpe(values, 252, risk_free=0.0252) == pytest.approx(expected, rel=1e-12)
    assert performance(values, 252, risk_free=0.0252)["sharpe"] == pytest.approx(expected, rel=1e-12)
    assert sharpe(values, 252, risk_free=0.0252) < sharpe(values, 252)


def test_performance_by_hand_on_a_four_bar_curve():
    values = np.array([100.0, 120.0, 60.0, 90.0])
    r = np.array([0.2, -0.5, 0.5])
    m = performance(values, 12)  # monthly bars: 3 bars are a quarter of a year
    assert m["cumulative_return"] == pytest.approx(-0.1)
    assert m["annual_return"] == pytest.approx(0.9 ** 4 - 1)
    assert m["annual_volatility"] == pytest.approx(r.std(ddof=1) * math.sqrt(12))
    assert m["sharpe"] == pytest.approx(r.mean() / r.std(ddof=1) * math.sqrt(12))
    assert m["max_drawdown"] == pytest.approx(-0.5)
    assert m["calmar"] == pytest.approx((0.9 ** 4 - 1) / 0.5)
    assert cumulative_return(values, 12) == pytest.approx(-0.1)
    assert periods_per_year("1d") == 252.0 and periods_per_year("1min") == 252.0 * 390.0


def test_a_wiped_out_account_and_a_flat_one():
    assert performance(np.array([100.0, 50.0, 0.0]), 252)["annual_return"] == -1.0
    flat = performance(np.full(5, 100.0), 252)
    assert flat == {"cumulative_return": 0.0, "annual_return": 0.0, "annual_volatility": 0.0, "sharpe": 0.0,
                    "max_drawdown": 0.0, "calmar": 0.0}


def test_too_short_curves_score_zero_and_two_points_use_one_return():
    assert sharpe(np.array([100.0]), 252) == 0.0 and sharpe(np.array([100.0, 110.0]), 252) == 0.0
    assert sortino(np.array([100.0]), 252) == 0.0
    r = np.array([0.1, -0.05])
    assert sharpe(np.array([100.0, 110.0, 104.5]), 252) == pytest.approx(r.mean() / r.std(ddof=1) * math.sqrt(252))
    three = performance(np.array([100.0, 110.0, 104.5]), 252)  # two returns: a volatility already
    assert three["annual_volatility"] == pytest.approx(r.std(ddof=1) * math.sqrt(252))
    two = performance(np.array([100.0, 110.0]), 252)
    assert two["annual_volatility"] == 0.0 and two["annual_return"] == pytest.approx(1.1**252 - 1)
    one = performance(np.array([100.0]), 252)
    assert one["annual_volatility"] == 0.0 and one["cumulative_return"] == 0.0


def test_annual_return_of_a_losing_and_of_a_recovered_curve():
    assert performance(np.array([1.0, 0.5]), 1.0)["annual_return"] == pytest.approx(-0.5)  # one bar is one year
    with np.errstate(divide="ignore", invalid="ignore"):  # the bar after zero has an infinite return
        touched = performance(np.array([100.0, 0.0, 50.0]), 2.0)  # wiped out, then money came back
    assert touched["annual_return"] == pytest.approx(-0.5) and touched["max_drawdown"] == -1.0


def test_the_deflated_sharpe_ratio_reproduces_bailey_and_lopez_de_prados_example():
    """Their worked example (2014, §4): 100 trials whose annualised Sharpes vary with variance
    1/2, the best at 2.5 over 1,250 daily returns with skewness −3 and kurtosis 10: SR₀ is
    0.1132 a day and the deflated Sharpe ratio 0.9004 (0.9002 here, from the rounded inputs)."""
    z = np.random.default_rng(0).standard_normal(100)
    trials = (z - z.mean()) / z.std(ddof=1) * math.sqrt(0.5)  # annualised, variance exactly 1/2
    luck = expected_max_sharpe(trials / math.sqrt(250))
    assert luck == pytest.approx(0.1132, abs=5e-5)
    assert deflated(2.5 / math.sqrt(250), luck, 1250, -3.0, 10.0) == pytest.approx(0.9002, abs=2e-4)


def test_the_best_of_many_noise_trials_is_deflated_to_chance_and_a_real_edge_is_not():
    rng = np.random.default_rng(1)
    noise = rng.normal(0.0, 0.01, (200, 250))  # 200 strategies with no edge, a year each
    sharpes = noise.mean(1) / noise.std(1, ddof=1) * math.sqrt(252)
    best = noise[int(np.argmax(sharpes))]
    assert sharpes.max() > 2.0  # the best looks good ...
    assert deflated_sharpe(best, sharpes, 252.0) < 0.7  # ... but no better than its selection explains
    edge = rng.normal(0.003, 0.01, 250)  # a Sharpe of about 4.8 a year
    assert deflated_sharpe(edge, sharpes, 252.0) > 0.95
    assert math.isnan(deflated_sharpe(np.zeros(10), sharpes, 252.0)) and expected_max_sharpe(np.array([1.0])) == 0.0
