"""The live watch's statistics (tasks/registry/decay.py) against hand-computed values: the CUSUM
path, Siegmund's threshold, the promise and its floor, the faults that fail it closed, and the
false alarms of repeated looks on simulated records."""

import math

import numpy as np
import pytest

from tasks.registry.decay import OVERSHOOT, Promise, cusum, threshold, watch

YEAR = 252.0


def test_the_cusum_path_by_hand():
    # reference 1, spread 2, slack 0.5: increments (1 - a)/2 - 0.5 = -a/2: 0.5, 0.5, -1.5, 1.0
    active = np.array([-1.0, -1.0, 3.0, -2.0])
    assert cusum(active, 1.0, 2.0, 0.5).tolist() == [0.5, 1.0, 0.0, 1.0]


def test_the_threshold_gives_the_asked_average_run_length_by_siegmunds_formula():
    for slack, bars in ((0.05, 2520.0), (0.25, 252.0), (0.5, 50.0)):
        b = threshold(slack, bars) + OVERSHOOT
        x = 2 * slack * b
        assert (math.exp(x) - x - 1) / (2 * slack**2) == pytest.approx(bars, rel=1e-9)
    assert threshold(0.1, 10 * 252) > threshold(0.1, 252)  # rarer false alarms need a higher threshold


def test_a_promise_of_hundreds_of_standard_deviations_a_bar_has_a_threshold_not_an_overflow():
    """Siegmund's e^(2kb) overflows a float past 2kb = 709. The gate can promote a near-twin of
    buy-and-hold with a steady edge (1e-4 a bar over a tracking error of 1e-7: k about 500); its
    watch must still read: b = ln(2k² · bars) / 2k is far below the overshoot, so h = 0 and any
    bar below the reference by more than k spreads alarms."""
    for slack in (300.0, 355.0, 500.0, 1e6):
        b = math.log(2 * slack**2 * 504) / (2 * slack)
        assert b < OVERSHOOT and threshold(slack, 504.0) == 0.0
    rng = np.random.default_rng(8)
    hold = rng.normal(0.0003, 0.01, 63)
    twin = Promise.of(hold + 1e-4 + 1e-7 * rng.standard_normal(63), hold)
    assert twin.fault() is None and twin.mean / twin.spread > 700
    live_hold = rng.normal(0.0003, 0.01, 30)
    kept = watch(live_hold + 1e-4 + 1e-7 * rng.standard_normal(30), live_hold, twin, tolerance=0.25, years=2,
                 per_year=YEAR)
    turned = watch(live_hold - 1e-4, live_hold, twin, tolerance=0.25, years=2, per_year=YEAR)
    assert (kept.fault, kept.decayed, kept.collapsed) == (None, False, False)
    assert (turned.fault, turned.decay.alarm, turned.severe.alarm) == (None, 0, 0)


def test_a_promise_whose_spread_is_below_the_gates_floor_cannot_be_watched():
    """The gate refuses a pair whose difference varies by less than 1e-12 a bar; a promise
    whose spread is below it is no promise either (its k would be astronomical)."""
    assert Promise(mean=1e-4, se=1e-14, bars=63).fault() == (
        "its promise has no spread: the champion and buy-and-hold returned the same on every bar")
    assert Promise(mean=1e-4, se=1e-9, bars=63).fault() is None


def test_the_two_arms_must_cover_the_same_bars():
    with pytest.raises(ValueError, match=r"same bars: \(40,\) against \(1,\)"):
        watch(np.zeros(40), np.zeros(1), PROMISE, tolerance=0.25, years=2, per_year=YEAR)


def test_the_promise_is_the_active_returns_mean_and_prewhitened_standard_error():
    rng = np.random.default_rng(0)
    bench = rng.normal(0.0, 0.01, 500)
    active = rng.normal(0.001, 0.002, 500)
    p = Promise.of(bench + active, bench)
    assert p.mean == pytest.approx(active.mean(), abs=1e-15) and p.bars == 500
    assert p.se == pytest.approx(active.std() / math.sqrt(500), rel=0.15)  # independent bars: about sd / √n
    assert p.spread == pytest.approx(p.se * math.sqrt(500))


def record(bars: int, mean: float, seed: int, spread: float = 0.004) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    bench = rng.normal(0.0003, 0.01, bars)
    return bench + rng.normal(mean, spread, bars), bench


PROMISE = Promise(mean=0.0005, se=0.004 / math.sqrt(252), bars=252)  # an information ratio of about 2


def test_a_champion_that_keeps_its_promise_holds_and_one_that_turns_over_is_caught():
    held = watch(*record(504, 0.0005, 1), PROMISE, tolerance=0.25, years=10, per_year=YEAR)
    assert not held.decayed and not held.collapsed and held.line.startswith("watch over 504 bars: holds")
    turned = watch(*record(504, -0.0005, 2), PROMISE, tolerance=0.25, years=10, per_year=YEAR)
    assert turned.decayed and turned.collapsed and turned.line.startswith("watch over 504 bars: severe decay")
    # each test is tuned to its own alternative: the severe one to the edge turned over, so it finds
    # a turn first; the decay one to the edge gone (below)
    assert turned.severe.alarm < turned.decay.alarm


def test_the_decay_test_finds_an_edge_gone_that_the_severe_one_never_calls_severe():
    strong = Promise(mean=0.002, se=0.004 / math.sqrt(2520), bars=2520)  # an information ratio of 8, ten years
    gone = watch(*record(504, 0.0, 5), strong, tolerance=0.25, years=10, per_year=YEAR)
    assert gone.decayed and not gone.collapsed and gone.decay.alarm < 126
    assert gone.decay.reference == pytest.approx(0.002 - 1.6448536 * strong.se - 0.25 * 0.004 / math.sqrt(252))


def test_the_tolerance_lowers_the_promises_floor():
    """A record that runs at half its promise decays against a tight floor and holds within a
    loose one."""
    live = record(756, 0.00025, 3)
    tight = watch(*live, PROMISE, tolerance=0.0, years=1, per_year=YEAR, alpha=0.5)
    loose = watch(*live, PROMISE, tolerance=2.0, years=1, per_year=YEAR, alpha=0.5)
    assert tight.decay.reference > loose.decay.reference
    assert tight.decayed and not loose.decayed


@pytest.mark.parametrize(("broken", "fault"), [
    (np.r_[np.full(20, 0.001), np.nan, np.full(9, 0.001)], "champion: return nan at bar 20"),
    (np.full(5, 0.001), "only 5 bars since the promotion (the watch needs at least 10)"),
])
def test_a_bad_record_fails_closed_and_never_alarms(broken, fault):
    w = watch(broken, np.zeros(broken.size), PROMISE, tolerance=0.25, years=10, per_year=YEAR)
    assert (w.fault, w.decayed, w.collapsed) == (fault, False, False)
    assert w.line.endswith(f"no test, {fault}")
    nan_promise = watch(*record(50, 0.0, 4), Promise(math.nan, 0.001, 252), tolerance=0.25, years=10, per_year=YEAR)
    assert nan_promise.fault.startswith("its promise cannot be read") and not nan_promise.collapsed


def test_repeated_looks_at_a_healthy_record_alarm_about_as_rarely_as_asked():
    """Every bar is a look. 200 healthy records of two years each, at the floor of the promise:
    with a false alarm asked for once in 2 years, about 1 − e^(−1) = 63% of them alarm within
    the two years (the run length is about exponential; measured 126 of 200)."""
    floor_mean = PROMISE.mean - 1.6448536 * PROMISE.se  # alpha 0.05, tolerance 0: the reference itself
    alarms = sum(watch(*record(504, floor_mean, 100 + i), PROMISE, tolerance=0.0, years=2, per_year=YEAR).decayed
                 for i in range(200))
    assert 0.5 * 200 <= alarms <= 0.75 * 200
