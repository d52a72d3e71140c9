"""The paired test of a Sharpe difference, against hand-computed values: the statistic, the
verdict line, the minimum track record, and the cases that must never (or must) pass."""

import math

import numpy as np
import pandas as pd
import pytest

from tasks.config import RegistryParams
from tasks.registry.evidence import Evidence, against, evidence_line, paired_test

YEAR = 252.0


def market(bars: int, seed: int) -> np.ndarray:
    """Daily returns with fat tails and a little autocorrelation."""
    rng = np.random.default_rng(seed)
    shocks = rng.standard_t(4, bars) * 0.01
    return shocks + 0.2 * np.concatenate([[0.0], shocks[:-1]])


def test_the_statistic_is_the_difference_of_the_two_annualised_sharpes_by_hand():
    model = np.array([0.01, -0.02, 0.03, 0.0, 0.01, 0.02, -0.01, 0.0, 0.01, 0.02, 0.0, -0.01])
    bench = np.array([0.0, -0.01, 0.01, 0.01, 0.0, 0.01, -0.02, 0.01, 0.0, 0.01, 0.01, -0.01])
    # model: mean 0.06/12 = 0.005, sample std 0.014459976; bench: mean 0.02/12, sample std 0.010298573
    by_hand = (0.005 / 0.014459976 - (0.02 / 12) / 0.010298573) * math.sqrt(252)
    e = paired_test(model, bench, "buy_and_hold", per_year=YEAR, resamples=199)
    assert e.diff == pytest.approx(by_hand, abs=1e-6) and e.bars == 12
    rf = paired_test(model, bench, "buy_and_hold", per_year=YEAR, risk_free=0.0252 * 10, resamples=199)
    # a risk-free rate of 0.252 a year is 0.001 a bar off each mean
    assert rf.diff == pytest.approx((0.004 / 0.014459976 - (0.02 / 12 - 0.001) / 0.010298573) * math.sqrt(252),
                                    abs=1e-6)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_model_identical_to_its_benchmark_never_passes(seed):
    returns = market(250, seed)
    e = paired_test(returns, returns.copy(), "buy_and_hold", per_year=YEAR, seed=seed, alpha=0.5)
    assert (e.diff, e.p_value, e.passed, e.more_bars()) == (0.0, 1.0, False, None)


def test_a_planted_large_edge_passes_and_a_planted_loss_is_refused():
    bench = market(250, 3)
    noise = np.random.default_rng(4).normal(0, 0.002, 250)
    edge = paired_test(bench + 0.001 + noise, bench, "buy_and_hold", per_year=YEAR)
    loss = paired_test(bench - 0.001 + noise, bench, "buy_and_hold", per_year=YEAR)
    assert edge.diff > 1.0 and edge.low > 0 and edge.p_value < 0.01 and edge.passed and edge.more_bars() == 0
    assert loss.diff < -1.0 and loss.high < 0 and loss.p_value > 0.99 and not loss.passed


def test_the_same_seed_gives_the_same_verdict_and_another_seed_another_resample():
    bench = market(120, 5)
    model = bench + np.random.default_rng(6).normal(0.0004, 0.004, 120)
    first, again = (paired_test(model, bench, "champion", per_year=YEAR, seed=11) for _ in range(2))
    other = paired_test(model, bench, "champion", per_year=YEAR, seed=12)
    assert first == again
    assert (other.diff, other.bars) == (first.diff, first.bars) and other.p_value != first.p_value


def test_alpha_and_the_margin_decide():
    bench = market(250, 7)
    model = bench + np.random.default_rng(8).normal(0.0003, 0.003, 250)
    loose = paired_test(model, bench, "buy_and_hold", per_year=YEAR, alpha=0.2)
    strict = paired_test(model, bench, "buy_and_hold", per_year=YEAR, alpha=0.01)
    assert 0.01 < loose.p_value == strict.p_value < 0.2  # the same resamples, two levels
    assert loose.passed and not strict.passed
    above = paired_test(model, bench, "buy_and_hold", per_year=YEAR, alpha=0.2, margin=loose.diff + 0.5)
    assert above.p_value > 0.5 and not above.passed
    forced = paired_test(model, bench, "buy_and_hold", per_year=YEAR, margin=-1000)
    assert forced.p_value == 1 / 2001 and forced.passed  # the tests' "always promote"


def test_too_few_bars_are_no_evidence():
    e = paired_test(np.full(5, 0.01) + np.arange(5) * 1e-3, np.zeros(5), "buy_and_hold", per_year=YEAR)
    assert (e.bars, e.p_value, e.passed, e.more_bars()) == (5, 1.0, False, 5)
    assert evidence_line([e]).startswith("vs buy-and-hold: ΔSharpe +")
    assert evidence_line([e]).endswith("too few bars to test (fewer than 10), p 1 ≥ α 0.05 over 5 bars; "
                                       "about 5 more bars of this edge would pass")
    with pytest.raises(ValueError, match="paired returns need the same bars"):
        paired_test(np.zeros(20), np.zeros(21), "buy_and_hold", per_year=YEAR)


def test_the_minimum_track_record_by_hand():
    # z = 0.5 / 0.5 = 1; the one-sided 5% quantile 1.6448536; 100 x 1.6448536^2 = 270.56 -> 271 bars in all
    e = Evidence("buy_and_hold", 100, 0.5, -0.3, 1.3, 0.16, 0.5)
    assert e.more_bars() == 171
    assert Evidence("buy_and_hold", 100, 0.5, -0.3, 1.3, 0.16, 0.5, margin=0.25).more_bars() == 983  # z 0.5: 1,082.2
    assert Evidence("champion", 63, -0.2, -1.0, 0.6, 0.7, 0.5).more_bars() is None


def test_the_verdict_line_by_hand():
    hold = Evidence("buy_and_hold", 250, 0.88, 0.19, 1.62, 0.025, 0.4)
    assert evidence_line([hold]) == "vs buy-and-hold: ΔSharpe +0.88 [90% CI +0.19, +1.62], p 0.025 < α 0.05 over 250 bars"
    champion = Evidence("champion", 250, 0.5, -0.3, 1.3, 0.16, 0.5)
    assert evidence_line([champion, hold]) == (
        "vs champion: ΔSharpe +0.50 [90% CI -0.30, +1.30], p 0.160; vs buy-and-hold: ΔSharpe +0.88 [90% CI +0.19, "
        "+1.62], p 0.025; largest p 0.160 ≥ α 0.05 over 250 bars; about 427 more bars of this edge would pass")
    # z = 0.5 / 0.5 = 1: 250 x 1.6448536^2 = 676.4 -> 677 bars in all
    behind = Evidence("champion", 63, -0.2, -1.0, 0.6, 0.7, 0.5)
    assert evidence_line([behind]).endswith("p 0.700 ≥ α 0.05 over 63 bars; no edge over champion to accumulate")


def test_against_pairs_every_other_column_on_the_same_bars():
    """The model's returns against each benchmark's, bar for bar: a shift of one bar (or a
    benchmark left out) changes the hand-computed difference."""
    values = {"challenger": [100.0, 101.0, 99.0, 102.0, 103.0, 101.0, 104.0, 105.0, 104.0, 106.0, 107.0, 108.0],
              "champion": [100.0, 100.5, 100.0, 101.0, 101.5, 101.0, 102.0, 102.5, 102.0, 103.0, 103.5, 104.0],
              "buy_and_hold": [100.0, 99.0, 100.0, 101.0, 100.0, 99.0, 100.0, 101.0, 102.0, 101.0, 102.0, 103.0]}
    curve = pd.DataFrame(values, index=pd.date_range("2024-01-01", periods=12))
    tests = against(curve, "challenger", RegistryParams(gate_resamples=199), YEAR)
    assert [t.benchmark for t in tests] == ["champion", "buy_and_hold"] and {t.bars for t in tests} == {11}

    def sharpe(x: list[float]) -> float:
        r = np.diff(x) / np.asarray(x[:-1])
        return r.mean() / r.std(ddof=1) * math.sqrt(252)

    for test in tests:
        assert test.diff == pytest.approx(sharpe(values["challenger"]) - sharpe(values[test.benchmark]), abs=1e-9)
