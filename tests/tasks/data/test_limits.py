"""The hard limit and split detection, on hand-made series with hand-computed answers."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pandas as pd

from tasks.data.limits import describe_factor, limit_failures, nearest_factor, suspected_splits


def bars(closes: list[float], opens: list[float] | None = None, symbol: str = "AAA") -> pd.DataFrame:
    ts = pd.date_range("2021-01-04", periods=len(closes), freq="B", tz="UTC")
    return pd.DataFrame({"_file": "f", "symbol": symbol, "ts": ts, "open": opens or closes, "close": closes})


def reasons(frame: pd.DataFrame, limit: float = 3.0) -> dict[int, str]:
    return {int(k): v for k, v in limit_failures(frame, limit).items()}


def test_one_absurd_print_costs_one_row_and_names_symbol_ts_and_value():
    found = reasons(bars([50.0, 51.0, 1e12, 52.0, 53.0]))
    move = math.log(1e12) - math.log(51.0)  # against the last kept close
    assert found == {2: f"log return beyond validation.max_abs_log_return: AAA 2021-01-06 00:00:00+00:00 "
                        f"log return +{move:.2f} beyond ±3"}
    assert f"{move:+.2f}" == "+23.70"  # ln(1e12) - ln(51) = 27.63 - 3.93


def test_the_limit_itself_is_kept_and_anything_beyond_is_quarantined():
    limit = float(np.log(8.0))  # closes 1 -> 8 move exactly the limit
    assert reasons(bars([1.0, 1.0, 8.0, 1.0]), limit) == {}
    assert list(reasons(bars([1.0, 1.0, 8.0 * 1.0001, 1.0]), limit)) == [2]
    assert list(reasons(bars([1.0, 1.0, 8.0, 8.0, 8e3]), limit)) == [4]  # the exact limit, judged in the slow pass


def test_a_level_that_stays_absurd_is_quarantined_bar_by_bar():
    assert list(reasons(bars([50.0, 51.0, 5e11, 5.1e11, 52.0]))) == [2, 3]


def test_an_absurd_first_bar_is_the_one_quarantined():
    assert list(reasons(bars([1e12, 50.0, 51.0, 52.0]))) == [0]
    assert list(reasons(bars([50.0, 1e12, 51.0]))) == [1]  # a spike after the first bar: judged as usual


def test_symbols_are_judged_apart():
    frame = pd.concat([bars([50.0, 51.0]), bars([1000.0, 1001.0], symbol="BBB")], ignore_index=True)
    assert reasons(frame) == {}  # 51 -> 1000 is two symbols, not a move


def test_split_factors_within_three_percent():
    assert nearest_factor(0.5 * 1.02) == Fraction(1, 2)
    assert nearest_factor(0.5 * 1.04) is None  # log(1.04) = 0.039 > 0.03
    assert nearest_factor(2 / 3) == Fraction(2, 3)
    assert nearest_factor(10.1) == Fraction(10)
    assert nearest_factor(0.97) is None
    assert [describe_factor(Fraction(1, 2)), describe_factor(Fraction(2, 3)), describe_factor(Fraction(10))] == [
        "2-for-1 split", "3-for-2 split", "1-for-10 reverse split"]


def test_a_split_gaps_by_a_split_ratio_and_then_stays_put():
    closes = [100.0, 101.0, 50.6, 50.9, 51.0]
    found = suspected_splits(bars(closes, opens=[100.0, 100.5, 50.4, 50.7, 50.9]))
    assert list(found["ts"]) == [pd.Timestamp("2021-01-06", tz="UTC")]
    assert found["ratio"].iloc[0] == 50.4 / 101.0 and found["split"].iloc[0] == "2-for-1 split"


def test_a_crash_that_keeps_moving_is_no_split():
    # the gap is a half, but the bar then falls another 20%: a market move, not a split
    assert suspected_splits(bars([100.0, 101.0, 40.4], opens=[100.0, 100.5, 50.4])).empty
    assert suspected_splits(bars([100.0, 101.0, 80.0], opens=[100.0, 100.5, 80.0])).empty  # no split ratio


def test_an_absurd_open_is_held_to_the_same_limit_against_the_last_kept_close():
    # closes 50, 51, 52, 53; bar 2 opens at 5100: log(5100 / 51) = ln(100) = +4.61 beyond 3, its close is fine
    found = reasons(bars([50.0, 51.0, 52.0, 53.0], opens=[50.0, 51.0, 5100.0, 52.5]))
    assert found == {2: "log return beyond validation.max_abs_log_return: AAA 2021-01-06 00:00:00+00:00 "
                        "open gap (log open / previous close) +4.61 beyond ±3"}
    assert f"{math.log(5100.0 / 51.0):+.2f}" == "+4.61"
    # bar 3's open is judged against 51, the last kept close (bar 2 is out): log(52.5 / 51) = 0.03
    assert list(reasons(bars([50.0, 51.0, 1e12, 53.0], opens=[50.0, 51.0, 51.0, 52.5]))) == [2]
    assert list(reasons(bars([50.0, 51.0, 52.0], opens=[50.0, 51.0, 52.0 / 100]))) == [2]  # a fall of 1/100 too


def test_the_open_limit_itself_is_kept_and_a_first_open_has_no_previous_close():
    limit = float(np.log(8.0))
    assert reasons(bars([1.0, 1.0, 1.0], opens=[1.0, 8.0, 1.0]), limit) == {}  # exactly the limit: kept
    assert list(reasons(bars([1.0, 1.0, 1.0], opens=[1.0, 8.0 * 1.0001, 1.0]), limit)) == [1]
    assert reasons(bars([50.0, 51.0, 52.0], opens=[5000.0, 51.0, 52.0])) == {}  # nothing before the first bar
