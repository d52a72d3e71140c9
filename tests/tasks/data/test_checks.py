import numpy as np
import pandas as pd
import pytest

from tasks.data.checks import calendar_index, check_frequency, check_gaps, order_failures, outliers, row_checks
from tasks.data.ingest import ingest
from tasks.data.validate import REPORT, validate
from tasks.errors import DataError, ValidationFailed


def minute_bars(symbol: str, day: str) -> pd.DataFrame:
    ts = calendar_index("1min", pd.Timestamp(day, tz="UTC"), pd.Timestamp(day, tz="UTC") + pd.Timedelta(hours=23))
    close = 100 + np.arange(len(ts)) * 0.01
    return pd.DataFrame({"symbol": symbol, "ts": ts, "open": close, "high": close + 0.05, "low": close - 0.05,
                         "close": close, "volume": 10.0, "_file": f"{symbol}.parquet"})


def test_calendar_has_half_days_and_dst():
    friday = calendar_index("1min", pd.Timestamp("2023-11-24", tz="UTC"), pd.Timestamp("2023-11-24 23:00", tz="UTC"))
    assert len(friday) == 210 and friday[0] == pd.Timestamp("2023-11-24 14:30", tz="UTC")
    summer = calendar_index("1min", pd.Timestamp("2023-07-05", tz="UTC"), pd.Timestamp("2023-07-05 23:00", tz="UTC"))
    assert len(summer) == 390 and summer[0] == pd.Timestamp("2023-07-05 13:30", tz="UTC")


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
