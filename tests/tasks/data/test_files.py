"""The file reader's deciding rules, checked against hand-written values: the date rule, the
number rule and the formats (whole imports are in ``test_files_import.py`` and
``test_bad_inputs.py``)."""

from __future__ import annotations

import datetime as dt

import pandas as pd
import pyarrow as pa
import pytest

from tasks.data.files import _numbers, _Where, decimal_comma, parse_ts
from tasks.errors import DataError

CSV = _Where(",")


def ts(*values: str, timezone: str | None = None) -> list[pd.Timestamp]:
    return list(parse_ts(pd.Series(values, dtype=object), "f.csv", timezone, CSV))


def test_a_date_is_a_session_at_midnight_utc_whatever_the_timezone():
    utc = pd.Timestamp("2021-03-04 00:00", tz="UTC")
    assert ts("2021-03-04") == [utc]
    assert ts("2021-03-04 00:00:00") == [utc]  # zone-less midnights are dates too
    assert ts("2021-03-04", timezone="America/New_York") == [utc]  # a session, not New York's midnight


def test_zone_less_times_of_day_are_read_in_the_timezone():
    assert ts("2021-03-04 09:30", "2021-07-01 09:30", timezone="America/New_York") == [
        pd.Timestamp("2021-03-04 14:30", tz="UTC"),  # EST, UTC-5
        pd.Timestamp("2021-07-01 13:30", tz="UTC"),  # EDT, UTC-4
    ]
    assert ts("2021-03-04 09:30", timezone="Europe/Berlin") == [pd.Timestamp("2021-03-04 08:30", tz="UTC")]


def test_zone_less_times_of_day_without_a_timezone_name_the_setting():
    with pytest.raises(DataError) as err:
        ts("2021-03-04", "2021-03-04 09:30")
    assert str(err.value) == ("f.csv: column ts has times of day but no time zone (line 3: 2021-03-04 09:30:00); "
                              "set data.timezone (e.g. America/New_York) or write UTC offsets")


def test_a_time_that_daylight_saving_skips_is_one_line():
    with pytest.raises(DataError, match=r"line 2, column ts: 2021-03-14 02:30:00 does not exist or is ambiguous in "
                                        r"America/New_York"):
        ts("2021-03-14 02:30", timezone="America/New_York")


def test_offsets_and_z_are_converted_and_win_over_the_timezone():
    assert ts("2021-03-04T09:30:00-05:00", "2021-03-15T09:30:00-04:00", "2021-03-16T13:30:00Z",
              timezone="Asia/Tokyo") == [pd.Timestamp("2021-03-04 14:30", tz="UTC"),
                                          pd.Timestamp("2021-03-15 13:30", tz="UTC"),
                                          pd.Timestamp("2021-03-16 13:30", tz="UTC")]


@pytest.mark.parametrize(("values", "expected"), [
    (("2021-03-04", "2021-03-05T00:00:00Z"), "mixes values with a zone (line 3: '2021-03-05T00:00:00Z') and without "
                                              "(line 2: '2021-03-04')"),
    (("3/4/2021",), "line 2, column ts: '3/4/2021': a slash date is ambiguous (month/day or day/month?)"),
    (("44259",), "column ts holds numbers (line 2: '44259'), not dates (Excel serial days? epoch seconds?)"),
    (("2021-03-04", "yesterday"), "line 3, column ts: 'yesterday': not an ISO-8601 date or timestamp"),
])
def test_what_would_be_a_guess_is_refused_in_one_line(values, expected):
    with pytest.raises(DataError) as err:
        ts(*values)
    assert expected in str(err.value) and "\n" not in str(err.value)


def test_nulls_stay_null_for_validation_to_quarantine():
    assert pd.isna(ts("2021-03-04", None)[1])


def numbers(*values: str | None, decimal_comma: bool = False) -> list[float]:
    return list(_numbers(pd.Series(values, dtype=object), "volume", "f.csv", CSV, decimal_comma))


def test_numbers_with_thousands_separators_and_decimal_commas():
    assert numbers("1,234,567", "12.5", "-1,000.25", "7") == [1234567.0, 12.5, -1000.25, 7.0]
    assert numbers("1.234.567,5", "12,5", "1.234", "7", decimal_comma=True) == [1234567.5, 12.5, 1234.0, 7.0]
    assert pd.isna(numbers("1", None)[1])


def test_a_comma_that_is_no_thousands_separator_is_refused():
    with pytest.raises(DataError) as err:
        numbers("1", "12,5")  # a decimal comma in a comma-separated file: 12.5 or 125?
    assert str(err.value) == "f.csv: line 3, column volume: '12,5' is not a number"


def test_a_parquet_timestamp_out_of_range_is_one_line_naming_the_row():
    """pandas holds nanoseconds (years 1677..2262); Parquet keeps a typo'd year 0221 in milliseconds."""
    col = pa.array([dt.datetime(2021, 1, 4), dt.datetime(221, 1, 5), None], pa.timestamp("ms")).to_pandas()
    with pytest.raises(DataError) as err:
        parse_ts(col, "f.parquet", None, _Where())
    assert str(err.value) == ("f.parquet: row 2, column ts: 0221-01-05 00:00:00 is out of range (timestamps must lie "
                              "in 1677..2262; a typo in the year?)")
    zoned = pa.array([dt.datetime(2262, 4, 12)], pa.timestamp("ms", tz="UTC")).to_pandas()
    with pytest.raises(DataError, match="row 1, column ts: 2262-04-12 00:00:00[+]00:00 is out of range"):
        parse_ts(zoned, "f.parquet", None, _Where())


def daily_ts(*values: str, daily: bool = True) -> list[pd.Timestamp]:
    return list(parse_ts(pd.Series(values, dtype=object), "f.csv", None, CSV, daily=daily))


def test_a_zoned_midnight_in_daily_bars_is_that_date_s_session():
    """yfinance's Ticker.history() writes daily bars at midnight New York: the session is that date,
    not the UTC instant, 05:00 (EST) or 04:00 (EDT) of the same day."""
    assert daily_ts("2020-01-02 00:00:00-05:00", "2020-07-01 00:00:00-04:00", "2020-07-02T00:00:00+09:00") == [
        pd.Timestamp("2020-01-02", tz="UTC"), pd.Timestamp("2020-07-01", tz="UTC"),
        pd.Timestamp("2020-07-02", tz="UTC")]
    # minute bars, and daily bars with a time of day, keep the instant (validation judges those)
    assert daily_ts("2020-01-02 00:00:00-05:00", daily=False) == [pd.Timestamp("2020-01-02 05:00", tz="UTC")]
    assert daily_ts("2020-01-02 00:00:00-05:00", "2020-01-03 16:00:00-05:00") == [
        pd.Timestamp("2020-01-02 05:00", tz="UTC"), pd.Timestamp("2020-01-03 21:00", tz="UTC")]
    parquet = pd.Series(pd.to_datetime(["2020-01-02", "2020-07-01"]).tz_localize("America/New_York"))
    assert list(parse_ts(parquet, "f.parquet", None, _Where(), daily=True)) == [
        pd.Timestamp("2020-01-02", tz="UTC"), pd.Timestamp("2020-07-01", tz="UTC")]


def frame_of(**columns: list[str]) -> pd.DataFrame:
    cells = {c: ["1"] * len(next(iter(columns.values()))) for c in ("open", "high", "low", "close", "volume")}
    return pd.DataFrame({**cells, **columns}, dtype=object)


def test_a_tab_separated_file_must_show_one_decimal_mark():
    tab = _Where("\t")
    # European: a decimal comma, and '.' grouping thousands
    assert decimal_comma(frame_of(open=["51,25", "1.234,5"], volume=["1.234", "7"]), "f.tsv", tab)
    assert not decimal_comma(frame_of(open=["51.25", "52"]), "f.tsv", tab)  # no comma: plain numbers
    assert not decimal_comma(frame_of(open=["51,25"]), "f.csv", CSV)  # comma-separated: thousands only
    with pytest.raises(DataError) as err:  # US numbers with thousands: 100.216 and 30,860 read either way
        decimal_comma(frame_of(open=["100.216", "99.991"], volume=["30,860", "30,160"]), "f.tsv", tab)
    assert str(err.value) == (
        "f.tsv: line 2, column open: '100.216' and line 2, column volume: '30,860' disagree on the decimal mark (a "
        "tab-separated file reads ',' as a decimal comma and '.' as a thousands separator); write the numbers "
        "without thousands separators, or save the file comma-separated")
    with pytest.raises(DataError, match=r"line 3, column close: '101.5' and line 2, column open: '51,25' disagree"):
        decimal_comma(frame_of(open=["51,25", "52,5"], close=["51.250", "101.5"]), "f.tsv", tab)  # a decimal point
