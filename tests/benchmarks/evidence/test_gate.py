"""The gate benchmark's bookkeeping (``benchmarks/evidence/gate.py``, ``benchmarks/evidence/gate_sim.py``) on
hand-made markets of a few arms, where each promotion's night can be worked out by hand.

The bootstrap runs 199 resamples here (params.yaml: 2000) to keep the file fast; the edges
planted are large enough that 199 decide as 2000 would.
"""

import numpy as np
import pandas as pd
import pytest

from benchmarks.evidence.gate import pipeline_gates
from benchmarks.evidence.gate_ct_report import ct_table
from benchmarks.evidence.gate_sim import Arms, Judge, Variant, draw_challengers, point_gate, run_gate, shadow_gate
from tasks.config import Params, RegistryParams
from tasks.registry.evidence import against

REGISTRY = RegistryParams(gate_resamples=199)
EVAL, NIGHTS = 20, 40
PLANTED, LOSER, HOLD, FADER = 0, 1, 2, 3


def curve(returns: np.ndarray) -> np.ndarray:
    return np.concatenate([[1.0], np.cumprod(1.0 + returns)])


@pytest.fixture(scope="module")
def arms() -> Arms:
    """A market of EVAL + NIGHTS bars (the first night is bar 21); a rule 0.2% a bar ahead of
    it, one 0.2% behind, one that is buy-and-hold itself (bought at any close, it is a slice
    of the same curve), and one ahead up to the first night and behind after it."""
    rng = np.random.default_rng(7)
    bars = EVAL + NIGHTS
    market = rng.normal(0.0003, 0.01, bars)
    hold = curve(market)
    noise = rng.normal(0, 0.001, (3, bars))
    fades = np.where(np.arange(1, bars + 1) <= bars - NIGHTS + 1, 0.002, -0.002)
    values = np.stack([curve(market + 0.002 + noise[0]), curve(market - 0.002 + noise[1]), hold,
                       curve(market + fades + noise[2])])
    return Arms(values, ("planted", "loser", "hold", "fader"), lambda lo: hold[lo:], 252.0)


@pytest.fixture(scope="module")
def judge(arms: Arms) -> Judge:
    return Judge(arms, REGISTRY)


@pytest.mark.parametrize(("every", "tests"), [(10, 2), (21, 1)])
def test_a_planted_edge_enters_shadow_on_night_0_and_is_promoted_at_its_first_test_after_20_bars(judge, every, tests):
    """Night 0 (bar 20): the planted rule passes the screen, enters shadow since bar 20; the
    losers after it fail the screen, so the shadow stands. Its record is tested every
    ``every`` bars and passes at the first test with at least 20 bars (night 20 or 21): 10
    bars are too few for the standard error that allows for persistence to show the edge.
    Never before: the record is bars after the window that chose it."""
    year = shadow_gate(judge, [PLANTED] + [LOSER] * (NIGHTS - 1), EVAL, every)
    assert year.promotions == [(every * tests, PLANTED)]
    assert (year.tests, year.entered, year.shadow_moves) == (tests, 1, 2)  # the alias: set on night 0, gone after


def test_a_record_that_includes_its_window_is_tested_and_promoted_the_next_night(judge):
    """The winner's curse: since = the window's first bar, settle's tested = 0, so on night 1
    the record already holds EVAL + 1 bars and is tested, 20 bars early."""
    year = shadow_gate(judge, [PLANTED] + [LOSER] * (NIGHTS - 1), EVAL, 21, "included")
    assert year.promotions == [(1, PLANTED)]


def test_a_shadow_that_falls_behind_after_its_window_is_retired_at_its_first_test(judge):
    """The fader enters shadow on night 0 and trails the market from then on: at its test on
    night 10 it fails the screen and is retired; the losers after it never take the seat."""
    year = shadow_gate(judge, [FADER] + [LOSER] * (NIGHTS - 1), EVAL, 10)
    assert year.promotions == []
    assert (year.tests, year.entered, year.shadow_moves) == (1, 1, 2)


def test_the_window_ends_at_the_night_and_the_record_starts_after_the_window(arms):
    """Night 0 is bar 59 of 60, night 1 bar 60: night 0's window is bars (39, 59]; on night 1
    the challenger's window is (40, 60] and the shadow's record (59, 60]."""
    fresh = Judge(arms, REGISTRY)
    shadow_gate(fresh, [PLANTED, LOSER], EVAL, 10)
    assert list(fresh.cache) == [(PLANTED, None, 39, 59), (LOSER, None, 40, 60), (PLANTED, None, 59, 60)]


def test_buy_and_hold_itself_never_promotes_nor_takes_the_shadow_seat(judge):
    """Difference 0 on every bar: there is nothing to test, so the test fails closed and
    buy-and-hold is refused every night; it never holds the seat level with its benchmark."""
    year = shadow_gate(judge, [HOLD] * NIGHTS, EVAL, 10)
    assert year.promotions == []
    assert (year.tests, year.entered, year.shadow_moves) == (0, 0, 0)


def test_a_planted_edge_drawn_every_night_is_promoted_once_its_record_is_tested(judge):
    """A standing shadow keeps its seat until its test (docs/operations.md, the gate): were a
    newer challenger to displace it, this rule would re-enter shadow every night, untested."""
    year = shadow_gate(judge, [PLANTED] * NIGHTS, EVAL, 10)
    assert year.promotions and year.promotions[0][0] <= 21


def test_the_point_gate_promotes_a_challenger_above_the_champion_and_buy_and_hold_strictly():
    """Rules 0.1% behind, 0.1% and 0.2% ahead of the market with the same noise: their window
    Sharpes are ordered on every window. mid beats the market (night 0), loser does not, best
    beats mid (night 2), mid and best itself do not beat best (>, not ≥)."""
    rng = np.random.default_rng(3)
    market = rng.normal(0.0, 0.01, EVAL + 6)
    hold = curve(market)
    values = np.stack([curve(market + d) for d in (-0.001, 0.001, 0.002)])
    arms = Arms(values, ("loser", "mid", "best"), lambda lo: hold[lo:], 252.0)
    assert point_gate(arms, [1, 0, 2, 1, 2, 0], EVAL).promotions == [(0, 1), (2, 2)]


def test_each_pair_is_the_cycles_three_column_test(arms, judge):
    """The memo tests each benchmark alone; ``against`` on the cycle's curve gives the same."""
    lo, hi = 10, 40
    frame = pd.DataFrame({"challenger": arms.rule(PLANTED, lo, hi), "champion": arms.rule(LOSER, lo, hi),
                          "buy_and_hold": arms.market(lo, hi)})
    assert judge.evidence(PLANTED, LOSER, lo, hi) == against(frame, "challenger", REGISTRY, 252.0)
    assert [e.bars for e in judge.evidence(PLANTED, None, lo, hi)] == [hi - lo]


def test_challengers_are_drawn_per_seed_and_night_and_every_variant_sees_the_same():
    drawn = draw_challengers(100, 252, 18)
    assert drawn == draw_challengers(100, 252, 18) and drawn[:10] == draw_challengers(100, 10, 18)
    assert drawn != draw_challengers(101, 252, 18) and set(drawn) == set(range(18))
    assert [Variant(None).name, Variant(21).name, Variant(42, "included").name] == ["point", "shipped 21",
                                                                                      "included 42"]


def test_run_gate_dispatches_the_point_gate_without_tests(arms, judge):
    before = len(judge.cache)
    assert run_gate(judge, [PLANTED] * 3, EVAL, Variant(None)).promotions == [(0, PLANTED)]
    assert len(judge.cache) == before


def test_the_ct_table_counts_promotions_moves_and_first_nights():
    year = {"promotions": [{"night": 4, "rule": "a", "edge": 0.5}, {"night": 9, "rule": "b", "edge": None}],
            "shadow_moves": 3, "tests": 2, "entered": 2}
    none = {"promotions": [], "shadow_moves": 1, "tests": 5, "entered": 1}
    rows = [{"market": "null", "seed": s, "years": {"shipped 21": y}} for s, y in ((1, year), (2, none))]
    line = ct_table({"config": {"gate_alpha": 0.05}, "rows": rows}).splitlines()[2]
    assert line == ("| null | shipped 21 | 2 | 1.00 | 2 | 1 | 2 | 4 | 3.5 | 0.60 | 5 | 1 "
                    "| 0.50 ± 0.00 (no t: one seed) |")


def test_the_pipeline_gates_on_a_kept_curve():
    """An agent 0.2% a bar ahead: both gates promote. The market itself: the point gate refuses
    (equal Sharpes), and so does the new gate (the same returns: nothing to test, p = 1)."""
    rng = np.random.default_rng(1)
    market = rng.normal(0.0003, 0.01, 63)
    dates = [str(d.date()) for d in pd.bdate_range("2023-01-02", periods=64)]
    row = {"dates": dates, "buy_and_hold": curve(market).tolist(), "per_year": 252.0, "risk_free": 0.0}
    params = Params(registry=REGISTRY)
    ahead = pipeline_gates({**row, "agent": curve(market + 0.002 + rng.normal(0, 0.001, 63)).tolist()}, params)
    assert (ahead["point"], ahead["action"]) == (True, "promote") and ahead["p"] < 0.05
    same = pipeline_gates({**row, "agent": curve(market).tolist()}, params)
    assert (same["point"], same["action"], same["p"], same["diff"]) == (False, "refuse", 1.0, 0.0)
