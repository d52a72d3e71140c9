"""The gate's decisions on hand-made evidence, and the sequential rule over many looks at a null
market."""

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tasks.config import load_params
from tasks.errors import ConfigError
from tasks.registry.decision import decide, decide_cycle
from tasks.registry.evidence import Evidence


def ev(benchmark: str, diff: float, p: float, bars: int = 63, fault: str | None = None) -> Evidence:
    return Evidence(benchmark, bars, diff, diff - 1.0, diff + 1.0, p, 0.6, fault=fault)


NAN = "agent: bar 2022-03-04 has a NaN return"


def test_the_pipeline_promotes_on_significance_shadows_on_the_screen_and_refuses_the_rest():
    assert decide([ev("buy_and_hold", 0.9, 0.049)]).action == "promote"
    assert decide([ev("buy_and_hold", 0.9, 0.05)]).action == "shadow"  # p must be below alpha, not at it
    assert decide([ev("buy_and_hold", 0.0, 0.6)]).action == "shadow"  # not worse: the weak screen
    assert decide([ev("buy_and_hold", -0.01, 0.6)]).action == "refuse"
    line = decide([ev("buy_and_hold", 0.9, 0.01, 250)]).line
    assert line.startswith("promoted: vs buy-and-hold: ΔSharpe +0.90 [90% CI -0.10, +1.90], p 0.010 < α 0.05")


def test_every_benchmark_must_be_beaten():
    hold = ev("buy_and_hold", 2.0, 0.001)
    assert decide([ev("champion", 0.3, 0.2), hold]).action == "shadow"
    assert decide([ev("champion", -0.3, 0.8), hold]).action == "refuse"
    assert decide([ev("champion", 0.5, 0.01), hold]).action == "promote"


def test_a_cycle_never_promotes_its_own_challenger():
    decision = decide_cycle([ev("champion", 3.0, 0.0005), ev("buy_and_hold", 3.0, 0.0005)], None, None, 21)
    assert decision.action == "shadow" and decision.promoted is None and decision.shadow is None
    assert decide_cycle([ev("buy_and_hold", -0.1, 0.7)], None, None, 21).action == "refuse"


def test_the_shadow_is_tested_once_its_record_has_grown_by_shadow_bars():
    window = [ev("champion", -0.5, 0.9), ev("buy_and_hold", 0.2, 0.3)]  # the challenger fails the screen
    strong = [ev("champion", 1.5, 0.01, 20), ev("buy_and_hold", 1.8, 0.004, 20)]
    early = decide_cycle(window, ("4", 0), strong, 21)
    assert (early.shadow.outcome, early.shadow.tested, early.promoted) == ("keep", 0, None)  # 20 < 21 bars
    due = [ev(e.benchmark, e.diff, e.p_value, 21) for e in strong]
    promoted = decide_cycle(window, ("4", 0), due, 21)
    assert (promoted.shadow.outcome, promoted.shadow.tested, promoted.promoted) == ("promote", 21, "4")
    assert promoted.line.startswith("shadow version 4 promoted to champion: vs champion: ΔSharpe +1.50")
    weak = [ev("champion", 0.4, 0.2, 42), ev("buy_and_hold", 0.5, 0.1, 42)]
    kept = decide_cycle(window, ("4", 21), weak, 21)
    assert (kept.shadow.outcome, kept.shadow.tested) == ("keep", 42)
    assert decide_cycle(window, ("4", 21), [ev(e.benchmark, e.diff, e.p_value, 41) for e in due],
                        21).shadow.outcome == "keep"  # 20 bars since its last test: not yet
    behind = [ev("champion", -0.4, 0.8, 42), ev("buy_and_hold", 0.5, 0.1, 42)]
    assert decide_cycle(window, ("4", 21), behind, 21).shadow.outcome == "retire"


def test_a_standing_shadow_keeps_its_seat_until_it_is_promoted_or_retired():
    record = [ev("champion", 0.4, 0.2, 30), ev("buy_and_hold", 0.5, 0.1, 30)]
    strong = [ev("champion", 0.9, 0.001), ev("buy_and_hold", 0.9, 0.001)]
    kept = decide_cycle(strong, ("4", 21), record, 21)  # 9 bars since its test: no look
    assert kept.action == "refuse" and kept.shadow.outcome == "keep"
    looked = decide_cycle(strong, ("4", 0), record, 21)  # tested, neither significant nor behind
    assert looked.action == "refuse" and (looked.shadow.outcome, looked.shadow.tested) == ("keep", 30)
    behind = decide_cycle(strong, ("4", 0), [ev("champion", -0.1, 0.6, 30), ev("buy_and_hold", 0.5, 0.1, 30)], 21)
    assert behind.action == "shadow" and behind.shadow.outcome == "retire"  # the seat is free again
    promoted = decide_cycle([ev("champion", 0.2, 0.3)], ("4", 0),
                            [ev("champion", 1.0, 0.01, 21), ev("buy_and_hold", 1.0, 0.01, 21)], 21)
    assert promoted.promoted == "4" and promoted.action == "shadow"


def test_a_faulted_test_fails_closed_and_the_line_names_the_fault():
    """No test was possible (here a NaN return): a new model is refused, never let into
    shadow on the point estimate, and a shadow whose record faults at its test is retired,
    never kept or promoted."""
    faulted = [ev("champion", 2.0, 0.001), ev("buy_and_hold", 2.0, 0.001, fault=NAN)]
    refused = decide(faulted)
    assert refused.action == "refuse" and NAN in refused.line
    assert decide_cycle(faulted, None, None, 21).action == "refuse"
    record = [ev("champion", 1.0, 0.2, 21, fault=NAN), ev("buy_and_hold", 1.0, 0.2, 21)]
    fate = decide_cycle([ev("champion", -1.0, 0.9)], ("4", 0), record, 21).shadow
    assert (fate.outcome, fate.tested) == ("retire", 21) and NAN in fate.line


def test_a_shadow_with_no_record_yet_keeps_its_seat_untested():
    """No bar has come since its since-date: nothing to test, and the seat is not free."""
    strong = [ev("champion", 0.9, 0.001), ev("buy_and_hold", 0.9, 0.001)]
    for record in (None, ()):
        decision = decide_cycle(strong, ("4", 0), record, 21)
        assert decision.action == "refuse" and decision.promoted is None
        assert (decision.shadow.version, decision.shadow.outcome, decision.shadow.tested) == ("4", "keep", 0)
        assert decision.line.startswith("shadow version 4 stays in shadow: no bar of its record has come yet | "
                                        "new model refused: vs champion")


def test_a_shadow_that_beats_buy_and_hold_but_not_the_champion_is_not_promoted():
    record = [ev("champion", 0.3, 0.3, 21), ev("buy_and_hold", 2.5, 0.001, 21)]
    fate = decide_cycle([ev("champion", -1.0, 0.9)], ("4", 0), record, 21).shadow
    assert (fate.outcome, fate.tested) == ("keep", 21)
    assert [e.benchmark for e in fate.record] == ["champion", "buy_and_hold"]


def test_a_shadow_is_retired_at_its_maximum_age_unless_it_passes():
    window = [ev("champion", -1.0, 0.9)]

    def record(bars: int, p: float) -> list[Evidence]:
        return [ev("champion", 0.3, p, bars), ev("buy_and_hold", 0.4, p, bars)]

    young = decide_cycle(window, ("4", 84), record(105, 0.2), 21, 126).shadow
    assert (young.outcome, young.tested) == ("keep", 105)
    between = decide_cycle(window, ("4", 105), record(125, 0.2), 21, 126).shadow
    assert (between.outcome, between.tested) == ("keep", 105)  # not a test: age is judged at tests only
    old = decide_cycle(window, ("4", 105), record(126, 0.2), 21, 126)
    assert (old.shadow.outcome, old.shadow.tested, old.action) == ("retire", 126, "refuse")  # window failed
    assert old.shadow.line.startswith("shadow version 4 retired (max age: 126 record bars reach "
                                      "ct.shadow_max_bars 126): vs champion: ΔSharpe +0.30")
    assert decide_cycle(window, ("4", 105), record(130, 0.01), 21, 126).shadow.outcome == "promote"
    assert decide_cycle(window, ("4", 105), record(126, 0.2), 21).shadow.outcome == "keep"  # no maximum


def test_a_maximum_age_below_the_test_interval_is_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"ct: shadow_max_bars 20 is below shadow_bars 21: a shadow would be "
                                          r"retired before its first test"):
        load_params(Path("/nonexistent/params.yaml"), ["ct.shadow_max_bars=20"])
    assert load_params(Path("/nonexistent/params.yaml"), ["ct.shadow_max_bars=21"]).ct.shadow_max_bars == 21
    assert load_params(Path("/nonexistent/params.yaml")).ct.shadow_max_bars == 126


def test_a_pipeline_model_without_a_clean_window_enters_shadow_at_most_and_says_why():
    passing = [ev("champion", 0.9, 0.001), ev("buy_and_hold", 0.9, 0.001)]
    held = "no clean window: champion version 3 had trained or selected on 5 of the 63 test bars"
    decision = decide(passing, held)
    assert decision.action == "shadow" and decision.promoted is None
    assert decision.line.startswith(f"enters shadow ({held}): vs champion: ΔSharpe +0.90")
    assert decide([ev("champion", -0.2, 0.7), ev("buy_and_hold", 0.9, 0.001)], held).action == "refuse"
    assert decide(passing).action == "promote"


def null_year(rng: np.random.Generator, every: int, max_bars: int | None = None) -> tuple[int, int, int]:
    """A year of nightly cycles on a null market, where a valid p-value is uniform: the
    record's tests, its promotions, and what a gate testing every night's challenger would
    have promoted."""
    shadow, tests, promotions, nightly, since, last_test = None, 0, 0, 0, 0, 0
    for night in range(252):
        p_window = rng.uniform(size=2)
        nightly += bool(p_window.max() < 0.05)
        window = [ev("champion", rng.normal(), p_window[0]), ev("buy_and_hold", rng.normal(), p_window[1])]
        standing = record = None
        if shadow is not None:
            bars = night - since
            record = [ev("champion", rng.normal(), rng.uniform(), bars),
                      ev("buy_and_hold", rng.normal(), rng.uniform(), bars)]
            standing = (shadow, last_test)
        decision = decide_cycle(window, standing, record, every, max_bars)
        if decision.shadow is not None:
            tests += decision.shadow.tested != last_test
            last_test = decision.shadow.tested
            if decision.shadow.outcome != "keep":
                shadow = None
            promotions += decision.shadow.outcome == "promote"
        if decision.action == "shadow":
            shadow, since, last_test = f"v{night}", night, 0
    return tests, promotions, nightly


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), every=st.sampled_from([5, 10, 21, 63]), ages=st.sampled_from([None, 1, 2, 6]))
def test_over_a_year_of_nightly_looks_the_shadow_is_tested_at_most_252_over_shadow_bars_times(seed, every, ages):
    """The sequential rule's guarantee, whatever the evidence and the maximum age: at most
    252 / shadow_bars tests a year, so at most alpha x 252 / shadow_bars false promotions a
    year in expectation."""
    tests, promotions, _ = null_year(np.random.default_rng(seed), every, ages and ages * every)
    assert tests <= 252 // every and promotions <= tests


def test_over_many_null_years_the_cycle_promotes_about_alpha_per_test_and_far_below_one_a_year():
    rng = np.random.default_rng(2026)
    years = [null_year(rng, 21) for _ in range(400)]
    assert sum(y[1] for y in years) / 400 <= 0.05 * 252 / 21  # the union bound: 0.6 a year
    assert sum(y[2] for y in years) / 400 > 0.5  # about 0.0025 x 252: what nightly tests would promote
