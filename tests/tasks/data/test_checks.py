import numpy as np
import pandas as pd
import pytest

from tasks.calendar import calendar_index
from tasks.data.checks import (
    check_frequency,
    check_gaps,
    is_sorted,
    order_failures,
    outliers,
    row_checks,
)
from tasks.data.ingest import ingest
from tasks.data.validate import REPORT, validate
from tasks.errors import DataError, ValidationFailed


def minute_bars(symbol: str, day: str) -> pd.DataFrame:
    ts = calendar_index("1min", pd.Timestamp(day, tz="UTC"), pd.Timestamp(day, tz="UTC") + pd.Timedelta(hours=23))
    close = 100 + np.arange(len(ts)) * 0.01
    return pd.DataFrame({"symbol": symbol, "ts": ts, "open": close, "high": close + 0.05, "low": close - 0.05,
                         "close": close, "volume": 10.0, "_file": f"{symbol}.parquet"})


def test_out_of_session_minutes_and_disorder_are_row_failures():
    bars = minute_bars("AAA", "2023-07-05")
    bars.loc[5, "ts"] = pd.Timestamp("2023-07-05 12:00", tz="UTC")  # pre-market
    bars.iloc[[10, 11]] = bars.iloc[[11, 10]].to_numpy()
    masks = row_checks(bars, "1min", ["AAA"])
    assert np.flatnonzero(masks["outside NYSE session"]).tolist() == [5]
    assert np.flatnonzero(order_failures(bars)).tolist() == [5, 11]  # 12:00 is before 13:34 too


def test_frequency_and_gap_checks_are_one_line():
    bars = minute_bars("AAA", "2023-07-05")
    check_frequency(bars, "1min", "f")
    with pytest.raises(DataError, match="intraday timestamps in daily bars"):
        check_frequency(bars, "1d", "f")
    check_gaps(bars, "1min", 0)
    with pytest.raises(ValidationFailed, match="misses 40 minutes"):
        check_gaps(bars.drop(index=range(100, 140)), "1min", 30)


def test_return_outliers_are_flagged_and_kept(tiny):
    ingest(tiny)
    raw = tiny.dirs.raw / "SYN003.parquet"
    frame = pd.read_parquet(raw)
    frame.loc[200, ["open", "high", "low", "close"]] *= 1.8
    frame.to_parquet(raw)
    jump = frame.loc[200, "ts"]
    result = validate(tiny)
    assert result.quarantined == 0 and result.rows_out == result.rows_in
    report = (tiny.dirs.quarantine / REPORT).read_text()
    assert f"| SYN003 | {jump} |" in report  # flagged in the report, kept in the data
    flagged = outliers(pd.read_parquet(tiny.dirs.validated / "bars.parquet").assign(_file="x"), 12.0)
    assert {jump, frame.loc[201, "ts"]} <= set(flagged["ts"])  # the jump and the fall back


def daily(symbol: str, closes: list[float], sessions: pd.DatetimeIndex) -> pd.DataFrame:
    return pd.DataFrame({"symbol": symbol, "ts": sessions[: len(closes)], "open": closes, "high": closes,
                         "low": closes, "close": closes, "volume": 1.0, "_file": f"{symbol}.parquet"})


def test_outliers_at_a_chosen_sigma_against_a_hand_computed_robust_z():
    # log returns +-0.01 three times each, then +0.05: median 0.01, MAD 0.02, sd 1.4826 * 0.02 = 0.029652,
    # so the last bar's robust z is 0.05 / 0.029652 = 1.686 and the others' 0.337.
    returns = [0.01, -0.01, 0.01, -0.01, 0.01, -0.01, 0.05]
    closes = list(100.0 * np.exp(np.concatenate(([0.0], np.cumsum(returns)))))
    bars = daily("AAA", closes, calendar_index("1d", pd.Timestamp("2023-07-03", tz="UTC"),
                                                pd.Timestamp("2023-07-31", tz="UTC")))
    flagged = outliers(bars, 1.68)
    assert flagged["ts"].tolist() == [bars["ts"].iloc[7]]
    assert flagged["robust_z"].iloc[0] == pytest.approx(0.05 / (1.4826 * 0.02))
    assert outliers(bars, 1.69).empty
    assert len(outliers(bars, 0.33)) == 7


def test_a_symbol_with_no_spread_of_returns_flags_nothing():
    """Six equal returns and a jump: the MAD is 0, so no robust z exists; nothing is flagged
    rather than every bar (or the jump) scoring infinity."""
    returns = [0.01] * 6 + [0.5]
    closes = list(100.0 * np.exp(np.concatenate(([0.0], np.cumsum(returns)))))
    bars = daily("AAA", closes, calendar_index("1d", pd.Timestamp("2023-07-03", tz="UTC"),
                                                pd.Timestamp("2023-07-31", tz="UTC")))
    assert outliers(bars, 5.0).empty


def test_gaps_up_to_max_gap_bars_pass_and_one_more_stops_with_the_dates():
    sessions = calendar_index("1d", pd.Timestamp("2023-07-03", tz="UTC"), pd.Timestamp("2023-07-31", tz="UTC"))
    bars = daily("AAA", [100.0] * 10, sessions).drop(index=[4, 5, 6])  # misses 3 sessions: 07-10 .. 07-12
    check_gaps(bars, "1d", 3)
    with pytest.raises(ValidationFailed) as err:
        check_gaps(bars, "1d", 2)
    assert str(err.value) == ("validation failed: AAA.parquet: AAA misses 3 sessions between 2023-07-07 00:00:00+00:00 "
                              "and 2023-07-13 00:00:00+00:00 (validation.max_gap_bars = 2)")


def test_the_worst_gap_is_reported_and_a_tie_names_the_first_symbol_in_file_order():
    sessions = calendar_index("1d", pd.Timestamp("2023-07-03", tz="UTC"), pd.Timestamp("2023-07-31", tz="UTC"))
    one_bar = daily("AAA", [100.0], sessions)  # a single bar has no gap; the scan must go on past it
    two_bars = daily("BBB", [100.0] * 10, sessions).iloc[[0, 9]]  # 8 sessions missing between its only two bars
    tie = daily("CCC", [100.0] * 10, sessions).iloc[[0, 9]]
    ends_last = daily("DDD", [100.0] * 19, sessions).drop(index=range(4, 18))  # its gap ends on the last session
    frame = pd.concat([one_bar, two_bars, tie], ignore_index=True)
    with pytest.raises(ValidationFailed, match=r"BBB\.parquet: BBB misses 8 sessions between 2023-07-03 .* and "
                                               r"2023-07-17 "):
        check_gaps(frame, "1d", 7)
    with pytest.raises(ValidationFailed, match=r"DDD misses 14 sessions between 2023-07-07 .* and 2023-07-28 "):
        check_gaps(pd.concat([frame, ends_last], ignore_index=True), "1d", 7)


def test_is_sorted_needs_symbols_in_order_and_each_symbols_times_in_order():
    sessions = calendar_index("1d", pd.Timestamp("2023-07-03", tz="UTC"), pd.Timestamp("2023-07-31", tz="UTC"))
    sorted_frame = pd.concat([daily("AAA", [1.0] * 3, sessions), daily("BBB", [1.0] * 3, sessions)], ignore_index=True)
    assert is_sorted(sorted_frame)
    assert not is_sorted(sorted_frame.iloc[[3, 4, 5, 0, 1, 2]])  # BBB before AAA
    assert not is_sorted(sorted_frame.iloc[[1, 0, 2, 3, 4, 5]])  # AAA's times out of order


def test_outliers_do_not_depend_on_the_row_order():
    sessions = calendar_index("1d", pd.Timestamp("2023-07-03", tz="UTC"), pd.Timestamp("2023-07-31", tz="UTC"))
    returns = [0.01, -0.01, 0.01, -0.01, 0.01, -0.01, 0.05]
    closes = list(100.0 * np.exp(np.concatenate(([0.0], np.cumsum(returns)))))
    frame = pd.concat([daily("AAA", closes, sessions), daily("BBB", closes[::-1], sessions)], ignore_index=True)
    expected = outliers(frame, 1.6)
    shuffled = outliers(frame.sample(frac=1.0, random_state=0), 1.6)
    pd.testing.assert_frame_equal(shuffled.sort_values(["symbol", "ts"]), expected.sort_values(["symbol", "ts"]))
    assert set(expected["symbol"]) == {"AAA", "BBB"}


def test_row_checks_name_each_reason():
    days = daily("AAA", [1.0] * 3, calendar_index("1d", pd.Timestamp("2023-07-03", tz="UTC"),
                                                  pd.Timestamp("2023-07-31", tz="UTC")))
    days.loc[1, "ts"] = pd.Timestamp("2023-07-04", tz="UTC")  # Independence Day
    days.loc[2, "ts"] = days.loc[0, "ts"]  # not after the bar before it
    days.loc[0, "symbol"] = "ZZZ"
    masks = {reason: np.flatnonzero(mask).tolist() for reason, mask in row_checks(days, "1d", ["AAA"]).items()}
    finite = {f"{c} not finite": [] for c in ("open", "high", "low", "close", "volume")}
    assert masks == {**finite, "ts not increasing": [2], "not an NYSE session": [1], "unknown symbol": [0]}


def test_an_infinite_price_or_volume_is_a_row_failure_naming_its_column():
    """inf passes every GX bound (> 0, high >= open), and an open is the next fill's price."""
    days = daily("AAA", [1.0] * 4, calendar_index("1d", pd.Timestamp("2023-07-05", tz="UTC"),
                                                  pd.Timestamp("2023-07-10", tz="UTC")))
    days.loc[1, ["open", "high"]] = np.inf  # an open of inf, and the high that must be >= it
    days.loc[2, "volume"] = np.inf
    days.loc[3, "low"] = -np.inf
    days.loc[0, "close"] = np.nan  # a null is the suite's "null close", not this check's
    masks = {reason: np.flatnonzero(mask).tolist() for reason, mask in row_checks(days, "1d", []).items()}
    assert {r: rows for r, rows in masks.items() if rows} == {
        "open not finite": [1], "high not finite": [1], "volume not finite": [2], "low not finite": [3]}


def test_a_null_symbol_is_not_also_an_unknown_one():
    days = daily("AAA", [1.0] * 2, calendar_index("1d", pd.Timestamp("2023-07-05", tz="UTC"),
                                                  pd.Timestamp("2023-07-06", tz="UTC")))
    days["symbol"] = days["symbol"].astype(object)
    days.loc[1, "symbol"] = None  # the suite quarantines it as "null symbol"
    assert np.flatnonzero(row_checks(days, "1d", ["AAA"])["unknown symbol"]).tolist() == []


def test_a_repeated_time_is_not_increasing_and_frequencies_are_one_line_errors():
    bars = minute_bars("AAA", "2023-07-05")
    bars.loc[7, "ts"] = bars.loc[6, "ts"]
    assert np.flatnonzero(order_failures(bars)).tolist() == [7]
    with pytest.raises(DataError) as err:
        check_frequency(bars.assign(ts=bars["ts"] + pd.Timedelta(seconds=30)), "1min", "f.csv")
    assert str(err.value) == f"f.csv: {len(bars)} timestamps not on whole minutes, first at row 0"
    midnight = bars.iloc[:2].assign(ts=[pd.Timestamp("2023-07-05", tz="UTC"), pd.Timestamp("2023-07-06", tz="UTC")])
    with pytest.raises(DataError) as err:
        check_frequency(midnight, "1min", "f.csv")
    assert str(err.value) == "f.csv: only midnight timestamps in 1min bars (daily data? set data.freq: 1d)"
    check_frequency(midnight.iloc[:1], "1min", "f.csv")  # one bar at midnight is a minute, not a day
    with pytest.raises(DataError) as err:
        check_frequency(bars.iloc[:3], "1d", "f.csv")
    assert str(err.value) == "f.csv: 3 intraday timestamps in daily bars (mixed frequencies?), first at row 0"


def test_order_is_judged_per_file_and_symbol_and_a_null_time_is_left_to_the_suite():
    aaa = minute_bars("AAA", "2023-07-05").iloc[:6]
    again = aaa.assign(_file="AAA-2.parquet")  # the same bars in another file: judged on their own
    bbb = aaa.assign(symbol="BBB", _file="AAA.parquet")  # another symbol in the first file
    frame = pd.concat([aaa, bbb, again], ignore_index=True)
    frame.loc[8, "ts"] = frame.loc[6, "ts"]  # BBB's third bar repeats its first
    frame.loc[13, "ts"] = pd.NaT  # a null ts: GX's "null ts", not an order failure
    assert np.flatnonzero(order_failures(frame)).tolist() == [8]
    frame.loc[15, "ts"] = frame.loc[12, "ts"]  # the second file's AAA goes back in time
    assert np.flatnonzero(order_failures(frame)).tolist() == [8, 15]
