"""The near-twin model of the CT gate's challengers (``benchmarks/evidence/gate_twins_sim.py``): its null
is null, it recovers what was measured, it charges the entry cost, and the real gate promotes
a planted edge more often than the null (docs/operations.md, the gate)."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from benchmarks.evidence.gate_sim import Judge, shadow_gate
from benchmarks.evidence.gate_twins import lag1, pair_stats
from benchmarks.evidence.gate_twins_sim import TwinArms, TwinModel, YearConfig, interval, null_year
from tasks.config import RegistryParams, load_params

ROOT = Path(__file__).resolve().parents[2]
MODEL = TwinModel(per_year=252.0, market_vol=0.2, market_sharpe=0.5, garch=(0.06, 0.92, 5.0), champion_te=0.03,
                  champion_ar1=0.1, twin_te=0.02, twin_ar1=0.4, entry_policy=0.002, entry_hold=0.0019)


def long_twin(model: TwinModel, bars: int = 200_000) -> tuple[TwinArms, np.ndarray]:
    """One challenger over ``bars`` bars, and its returns minus its champion's."""
    arms = TwinArms(model, seed=1, bars=bars, starts=[0], parents=[0])
    return arms, (arms.returns(1) - arms.returns(0))[1:]


def test_the_null_is_null_and_recovers_the_measured_tracking_error_and_ar1() -> None:
    _, diff = long_twin(MODEL)
    phi = lag1(diff)
    se = diff.std() / math.sqrt(diff.size) * math.sqrt((1 + phi) / (1 - phi))  # AR(1) long-run sd
    assert abs(diff.mean() / se) < 4  # no edge
    assert phi == pytest.approx(MODEL.twin_ar1, abs=0.03)  # the GARCH scaling bends it by < 0.03
    assert diff.std() * math.sqrt(MODEL.per_year) == pytest.approx(MODEL.twin_te, rel=0.05)


def test_the_market_has_the_measured_volatility_and_drift() -> None:
    arms, _ = long_twin(MODEL)
    r = arms.hold[1:]
    assert r.std() * math.sqrt(252) == pytest.approx(MODEL.market_vol, rel=0.05)
    assert r.mean() == pytest.approx(MODEL.mu, abs=4 * r.std() / math.sqrt(r.size))


def test_a_planted_edge_is_measured_as_one() -> None:
    _, diff = long_twin(replace(MODEL, twin_edge=0.05))
    assert diff.mean() * 252 == pytest.approx(0.05, abs=0.01)


def test_every_arm_pays_its_entry_cost_on_its_first_bar_only() -> None:
    arms = TwinArms(MODEL, seed=2, bars=300, starts=[40, 41], parents=[0, 0])
    for rule, lo, hi in ((0, 10, 60), (1, 50, 120), (2, 60, 61)):
        values, r = arms.rule(rule, lo, hi), arms.returns(rule)[lo + 1 : hi + 1]
        assert values[0] == 1.0 and values.size == hi - lo + 1
        assert values[1] == pytest.approx((1 + r[0]) * (1 - MODEL.entry_policy))
        assert np.allclose(values[2:] / values[1:-1] - 1, r[1:])
    market = arms.market(100, 163)
    assert market[1] == pytest.approx((1 + arms.hold[101]) * (1 - MODEL.entry_hold))
    assert np.allclose(market[2:] / market[1:-1] - 1, arms.hold[102:164])


def test_exactness_is_checked() -> None:
    assert MODEL.exact(21) == []
    assert MODEL.exact_sharpe(21) < MODEL.market_sharpe
    assert "entry cost" in " ".join(replace(MODEL, entry_policy=0.001).exact(21))  # cheaper than buy-and-hold
    assert "drift" in " ".join(replace(MODEL, market_sharpe=0.05).exact(21))


def test_minute_bars_keep_the_year() -> None:
    minute = MODEL.finer(390)
    assert minute.per_year == 252 * 390 and minute.mu * minute.per_year == pytest.approx(MODEL.mu * 252)
    a, b, _ = minute.garch
    assert (a + b) ** 390 == pytest.approx(sum(MODEL.garch[:2]))


def test_pair_stats_leave_the_entry_bar_out() -> None:
    a = np.array([1.0, 0.9, 0.99, 1.089])
    b = np.array([1.0, 1.0, 1.0, 1.0])
    got = pair_stats(a, b, 252)
    assert got["diff"] == pytest.approx([0.1, 0.1])
    assert got["edge"] == pytest.approx(25.2)


def test_intervals() -> None:
    got = interval([0, 1, 0, 2])
    assert got["mean"] == 0.75 and got["years_with_any"] == 2
    assert got["poisson95"][0] < 0.75 < got["poisson95"][1]
    assert got["clopper_pearson95"][0] < 0.5 < got["clopper_pearson95"][1]


def test_the_real_gate_promotes_a_planted_edge_more_often_than_the_null() -> None:
    """Short years (3 × 100 nights, 199 resamples: not the shipped setting) through the real gate."""
    params = load_params(ROOT / "params.yaml")
    config = YearConfig("test", eval_bars=63, shadow_bars=21, step=1, max_bars=126, alpha=0.05, margin=0.0,
                        resamples=199, resamples_shipped=False, nights=100)
    model = replace(MODEL, twin_te=0.05, twin_ar1=0.0)
    null = [len(null_year(model, config, params, seed)["promotions"]) for seed in (1, 2, 3)]
    edge = [len(null_year(replace(model, twin_edge=0.5), config, params, seed)["promotions"]) for seed in (1, 2, 3)]
    assert sum(edge) >= 3 and sum(edge) > sum(null)


def test_cheap_window_tests_decide_as_the_full_ones() -> None:
    """The challengers' window evidence decides through its point estimate only, so fewer
    resamples there change no decision (benchmarks/evidence/gate_twins_sim.py, ScreenJudge)."""
    params = load_params(ROOT / "params.yaml")
    full = YearConfig("test", eval_bars=63, shadow_bars=21, step=1, max_bars=126, alpha=0.05, margin=0.0,
                      resamples=299, resamples_shipped=False, nights=80, screen_resamples=None)
    model = replace(MODEL, twin_te=0.05, twin_edge=0.3)
    for seed in (1, 2):
        a, b = (null_year(model, c, params, seed) for c in (full, replace(full, screen_resamples=99)))
        assert {k: v for k, v in a.items() if k != "evidence"} == {k: v for k, v in b.items() if k != "evidence"}


def test_a_lazy_record_decides_as_an_eager_one() -> None:
    """``shadow_gate(lazy=True)`` tests a record only when its test is due: the same year."""
    registry = RegistryParams(gate_resamples=199)
    nights, eval_bars = 80, 63
    arms = TwinArms(replace(MODEL, twin_te=0.05, twin_edge=0.3), seed=4, bars=eval_bars + nights - 1,
                    starts=list(range(nights)), parents=[0] * nights)
    eager, lazy = (shadow_gate(Judge(arms, registry), list(range(1, nights + 1)), eval_bars, 21, champion=0,
                               max_bars=126, lazy=flag) for flag in (False, True))
    assert eager == lazy and eager.tests >= 2
