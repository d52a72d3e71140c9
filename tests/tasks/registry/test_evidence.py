"""The paired test of a Sharpe difference, against hand-computed values: the statistic, its
p-value and interval rebuilt by hand from the same resamples, the faults that fail it closed,
the verdict line, the minimum track record, and a small calibration on simulated null pairs."""

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tasks.config import RegistryParams
from tasks.registry.evidence import (
    Evidence,
    against,
    block_length,
    circular_chunks,
    circular_indices,
    evidence_line,
    paired_test,
    persistent_se,
)

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
    e = paired_test(returns, returns.copy(), "buy_and_hold", per_year=YEAR, seed=seed, alpha=0.5, arm="agent")
    assert (e.p_value, e.passed, e.more_bars()) == (1.0, False, None)
    assert e.fault == "agent and buy_and_hold differ by a constant on every one of the 250 bars: nothing to test"


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
    assert evidence_line([e]) == ("vs buy-and-hold: no test, only 5 bars (the test needs at least 10): fails closed "
                                  "over 5 bars; about 5 more bars would allow a test")
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
    assert evidence_line([hold]) == ("vs buy-and-hold: ΔSharpe +0.88 [90% CI +0.19, +1.62], "
                                     "p 0.025 < α 0.05 over 250 bars")
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


def curve_of(**arms: list[float]) -> pd.DataFrame:
    return pd.DataFrame(arms, index=pd.date_range("2024-01-01", periods=len(next(iter(arms.values()))), freq="B"))


GOOD = [100.0 * 1.001**i + (i % 3) for i in range(30)]
HOLD = [100.0 * 1.0005**i + (i % 5) * 0.7 for i in range(30)]


@pytest.mark.parametrize(("broken", "fault"), [
    ({3: math.nan}, "agent: account value nan at bar 3 (2024-01-04)"),
    ({7: math.inf}, "agent: account value inf at bar 7 (2024-01-10)"),
    ({12: 0.0}, "agent: account value 0 at bar 12 (2024-01-17)"),
    ({12: -5.0}, "agent: account value -5 at bar 12 (2024-01-17)"),
])
def test_a_bad_account_value_fails_every_test_closed_naming_the_arm_and_the_bar(broken, fault):
    """A NaN once made every comparison False and the p-value tiny: the test "passed"."""
    agent = list(GOOD)
    for bar, value in broken.items():
        agent[bar] = value
    curve = curve_of(agent=agent, champion=HOLD, buy_and_hold=HOLD)
    tests = against(curve, "agent", RegistryParams(gate_resamples=199, gate_margin=-1000), YEAR)
    assert [(t.benchmark, t.fault, t.passed, t.p_value) for t in tests] == [
        ("champion", fault, False, 1.0), ("buy_and_hold", fault, False, 1.0)]
    assert evidence_line(tests).endswith(": fails closed over 29 bars")


def test_a_bad_benchmark_value_fails_closed_too():
    hold = list(HOLD)
    hold[20] = math.nan
    (test,) = against(curve_of(agent=GOOD, buy_and_hold=hold), "agent", RegistryParams(gate_margin=-1000), YEAR)
    assert test.fault == "buy_and_hold: account value nan at bar 20 (2024-01-29)" and not test.passed


@pytest.mark.parametrize(("model", "fault"), [
    (np.r_[np.full(3, 0.01), np.nan, np.full(26, 0.01)], "agent: return nan at bar 3"),
    (np.r_[np.full(29, 0.01), -np.inf], "agent: return -inf at bar 29"),
    (np.zeros(30), "agent: its returns never vary over the 30 bars, so it has no Sharpe"),
])
def test_bad_or_flat_returns_fail_closed(model, fault):
    bench = market(30, 9)
    e = paired_test(model, bench, "buy_and_hold", per_year=YEAR, margin=-1000, arm="agent")
    assert (e.fault, e.passed, e.p_value, e.more_bars()) == (fault, False, 1.0, None)
    assert e.summary() == f"vs buy-and-hold: no test, {fault}"


def test_returns_that_barely_vary_fail_closed_instead_of_a_sharpe_lost_to_rounding():
    """0.1% a bar with noise of 1e-11: its variance, read from the first two moments, cancels
    to 0, which made the difference +inf with no fault, and +inf passed the weak screen into
    shadow. A mean above 10,000 standard deviations a bar is refused, naming the arm."""
    bench = market(63, 0)
    model = 0.001 + 1e-11 * np.random.default_rng(0).standard_normal(63)
    assert (model * model).mean() - model.mean() ** 2 == 0.0  # the cancellation itself
    e = paired_test(model, bench, "buy_and_hold", per_year=YEAR, margin=0.05, arm="agent")
    assert e.fault.startswith("agent: its returns barely vary (a mean excess of 0.001 a bar, sd 9.16e-12)")
    assert not e.passed and e.p_value == 1.0 and math.isnan(e.diff)
    wobbly = 0.001 + 1e-6 * np.random.default_rng(0).standard_normal(63)  # 1,000 sd a bar: a Sharpe, tested
    assert paired_test(wobbly, bench, "buy_and_hold", per_year=YEAR, resamples=199).fault is None


def test_a_model_in_cash_on_most_bars_has_an_interval_never_nan():
    """Flat on all but a few bars: a resample that misses every trade has no Sharpe. It counts
    against the model in the interval as in the p-value: one trade leaves the low end at −inf;
    five pass, with a finite interval above the margin."""
    rng = np.random.default_rng(3)
    bench = rng.normal(0.0003, 0.01, 63)
    tests = {}
    for trades in (1, 2, 3, 5):
        model = np.zeros(63)
        model[rng.choice(63, trades, replace=False)] = np.abs(rng.normal(0.01, 0.005, trades))
        tests[trades] = paired_test(model, bench, "buy_and_hold", per_year=YEAR, margin=0.05)
    one, five = tests[1], tests[5]
    assert (one.passed, one.low, math.isfinite(one.high)) == (False, -math.inf, True)
    assert five.passed and 0.05 < five.low < five.diff < five.high < math.inf
    assert "nan" not in one.summary() + five.summary()


def test_a_flat_benchmark_is_named_as_the_fault():
    """The benchmark's flat returns, not the model's, are what make the test impossible."""
    model = market(30, 9)
    e = paired_test(model, np.zeros(30), "buy_and_hold", per_year=YEAR, margin=-1000, arm="agent")
    assert e.fault == "buy_and_hold: its returns never vary over the 30 bars, so it has no Sharpe" and not e.passed


def test_the_minimum_counts_returns_not_account_values():
    """Ten account values are nine returns: too few to test; eleven are ten: tested."""
    ten, eleven = (against(curve_of(agent=GOOD[:n], buy_and_hold=HOLD[:n]), "agent",
                           RegistryParams(gate_resamples=199, gate_margin=-1000), YEAR)[0] for n in (10, 11))
    assert (ten.bars, ten.fault, ten.passed) == (9, "only 9 bars (the test needs at least 10)", False)
    assert (eleven.bars, eleven.fault, eleven.passed) == (10, None, True)


def test_the_block_length_is_the_circular_bootstraps():
    """Politis & White give the circular and the stationary bootstrap different block
    lengths; the test draws circular blocks, so it takes the circular one."""
    from arch.bootstrap import optimal_block_length

    rng = np.random.default_rng(3)
    psi = np.zeros(400)
    for t in range(1, 400):  # persistent enough that the two lengths differ by more than rounding
        psi[t] = 0.8 * psi[t - 1] + rng.normal()
    lengths = optimal_block_length(psi).iloc[0]
    assert round(lengths["circular"]) != round(lengths["stationary"])
    assert block_length(psi) == round(lengths["circular"])


def test_the_resamples_drawn_in_chunks_are_the_resamples_drawn_at_once():
    """Memory bounded by a chunk, not by resamples x bars (a year of minute bars), with the
    very same indices, so the verdict does not depend on the chunk size."""
    whole = circular_indices(1000, 7, 300, seed=4)
    for rows in (1, 7, 64, 300):
        chunks = list(circular_chunks(1000, 7, 300, seed=4, rows=rows))
        assert max(len(c) for c in chunks) == rows and np.array_equal(np.concatenate(chunks), whole)


def test_the_verdict_does_not_depend_on_the_chunk_size(monkeypatch):
    from tasks.registry import evidence

    bench = market(500, 12)
    model = bench + np.random.default_rng(13).normal(0.0004, 0.003, 500)
    whole = paired_test(model, bench, "buy_and_hold", per_year=YEAR, resamples=401, seed=2)
    monkeypatch.setattr(evidence, "CHUNK_CELLS", 500 * 3)  # 3 resamples a chunk
    assert paired_test(model, bench, "buy_and_hold", per_year=YEAR, resamples=401, seed=2) == whole


def test_the_resamples_are_arch_circular_blocks():
    from arch.bootstrap import CircularBlockBootstrap

    ours = circular_indices(23, 4, 5, seed=17)
    theirs = CircularBlockBootstrap(4, np.zeros(23), seed=17)
    assert np.array_equal(ours, np.stack([theirs.update_indices() for _ in range(5)]))


def by_hand(model: np.ndarray, bench: np.ndarray, margin: float, alpha: float, resamples: int,
            seed: int) -> tuple[float, float, float]:
    """The test, rebuilt resample by resample from its definition (module docstring)."""
    bars = model.size

    def sharpes(a: np.ndarray, b: np.ndarray) -> float:
        return (a.mean() / a.std(ddof=1) - b.mean() / b.std(ddof=1)) * math.sqrt(252)

    def se(a: np.ndarray, b: np.ndarray) -> float:
        psi = []
        for x in (a, b):
            m, q = x.mean(), (x * x).mean()
            v = q - m * m
            psi.append(q / v**1.5 * (x - m) - m / (2 * v**1.5) * (x * x - q))
        d = psi[0] - psi[1]
        rho = float(np.dot(d[1:], d[:-1]) / np.dot(d, d))
        rho += (1 + 3 * rho) / bars
        rho = min(max(rho + math.sqrt(max(1 - rho * rho, 0)) / math.sqrt(bars), -0.9), 0.97)
        u = d[1:] - rho * d[:-1]
        return math.sqrt(np.mean(u * u) / (1 - rho) ** 2 / bars * 252 * (bars - 1) / bars)

    observed, s = sharpes(model, bench), se(model, bench)
    errors, ts = [], []
    for index in circular_indices(bars, block_length(psi_of(model, bench)), resamples, seed):
        err = sharpes(model[index], bench[index]) - observed
        errors.append(err)
        ts.append(err / se(model[index], bench[index]))
    errors, ts = np.array(errors), np.array(ts)
    p = max((1 + np.sum(errors >= observed - margin)) / (resamples + 1),
            (1 + np.sum(ts >= (observed - margin) / s)) / (resamples + 1))
    low = observed - max(np.quantile(errors, 1 - alpha), np.quantile(ts, 1 - alpha) * s)
    high = observed - min(np.quantile(errors, alpha), np.quantile(ts, alpha) * s)
    return p, low, high


def psi_of(model: np.ndarray, bench: np.ndarray) -> np.ndarray:
    out = []
    for x in (model, bench):
        m, q = x.mean(), (x * x).mean()
        v = q - m * m
        out.append(q / v**1.5 * (x - m) - m / (2 * v**1.5) * (x * x - q))
    return out[0] - out[1]


@pytest.mark.parametrize(("margin", "alpha"), [(0.0, 0.05), (0.3, 0.1)])
def test_the_p_value_and_interval_rebuilt_by_hand_from_the_same_resamples(margin, alpha):
    """The recentred one-sided p-value of both statistics, the larger one reported, and the
    union of the two (1 − 2α) intervals, low end below the high end."""
    bench = market(40, 21)
    model = bench + np.random.default_rng(22).normal(0.0006, 0.004, 40)
    e = paired_test(model, bench, "buy_and_hold", per_year=YEAR, margin=margin, alpha=alpha, resamples=299, seed=5)
    p, low, high = by_hand(model, bench, margin, alpha, 299, 5)
    assert e.p_value == pytest.approx(p, abs=1e-12)
    assert (e.low, e.high) == (pytest.approx(low, abs=1e-9), pytest.approx(high, abs=1e-9))
    assert e.low < e.diff < e.high
    assert e.se * math.sqrt(252 / 252) == pytest.approx(float(persistent_se(psi_of(model, bench)))
                                                        * math.sqrt(252 * 39 / 40), rel=1e-9)


@settings(max_examples=25, deadline=None, derandomize=True)
@given(seed=st.integers(0, 10_000), edge=st.floats(-0.001, 0.002), margin=st.floats(-0.5, 1.0))
def test_the_interval_and_the_p_value_agree(seed, edge, margin):
    """``low > margin`` about when p < α: each statistic's lower end is above the margin
    exactly when fewer than α of its replicates reach the observed edge."""
    bench = market(60, seed)
    model = bench + np.random.default_rng(seed + 1).normal(edge, 0.003, 60)
    e = paired_test(model, bench, "buy_and_hold", per_year=YEAR, margin=margin, resamples=399, seed=seed)
    slack = 3 / 400
    if e.p_value < e.alpha - slack:
        assert e.low > margin
    if e.p_value > e.alpha + slack:
        assert e.low <= margin
    assert e.low <= e.diff <= e.high


def test_against_reads_alpha_and_margin_from_the_registry():
    bench = market(250, 7)
    model = bench + np.random.default_rng(8).normal(0.0003, 0.003, 250)
    prices = curve_of(agent=list(100 * np.cumprod(np.r_[1, 1 + model])),
                      hold=list(100 * np.cumprod(np.r_[1, 1 + bench])))
    loose, strict = (against(prices, "agent", RegistryParams(gate_alpha=a), YEAR)[0] for a in (0.3, 0.01))
    assert (loose.alpha, strict.alpha) == (0.3, 0.01) and loose.p_value == strict.p_value
    assert loose.passed and not strict.passed
    assert against(prices, "agent", RegistryParams(gate_alpha=0.3, gate_margin=5.0), YEAR)[0].margin == 5.0
