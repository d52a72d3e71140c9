"""The one NYSE calendar against dates checked by hand: a holiday, half days, a weekend, and the
switch between summer and winter time, as the synthetic market, validation, Yahoo and the
broker's clock each read it.

November 2023: Thanksgiving (Thursday the 23rd) is closed and Friday the 24th closes at 13:00
New York time; New York is UTC-5, so a session opens 14:30 UTC and closes 21:00 UTC (18:00 on
the half day). July 2023: Monday the 3rd closes at 13:00, the 4th is closed; New York is UTC-4,
so sessions open 13:30 UTC and close 20:00 UTC (17:00 on the half day).
"""

from datetime import date

import pandas as pd
import pytest

import tasks.calendar
from tasks.calendar import calendar_index, nyse_schedule, nyse_sessions
from tasks.data.sources.yahoo import _expects_bars
from tasks.delivery.broker.clock import Calendar


def utc(stamp: str) -> pd.Timestamp:
    return pd.Timestamp(stamp, tz="UTC")


def test_the_schedule_by_hand_around_thanksgiving():
    schedule = nyse_schedule(date(2023, 11, 22), date(2023, 11, 27))
    assert list(schedule.index) == [utc("2023-11-22"), utc("2023-11-24"), utc("2023-11-27")]  # no 23rd, 25th, 26th
    assert list(schedule["open"]) == [utc("2023-11-22 14:30"), utc("2023-11-24 14:30"), utc("2023-11-27 14:30")]
    assert list(schedule["close"]) == [utc("2023-11-22 21:00"), utc("2023-11-24 18:00"), utc("2023-11-27 21:00")]
    assert list(schedule.columns) == ["open", "close"]
    assert str(schedule.index.dtype) == str(schedule["open"].dtype) == "datetime64[ns, UTC]"


def test_a_weekend_and_a_holiday_hold_no_session():
    assert nyse_sessions(date(2023, 7, 1), date(2023, 7, 2)).empty  # Saturday and Sunday
    assert nyse_sessions(date(2023, 7, 4), date(2023, 7, 4)).empty  # Independence Day
    assert nyse_schedule(date(2022, 12, 24), date(2022, 12, 26)).empty  # Christmas on a Sunday, closed on the Monday
    assert nyse_sessions(date(2023, 7, 7), date(2023, 7, 3)).empty  # the end before the start
    assert list(nyse_sessions(date(2023, 7, 1), date(2023, 7, 7))) == [utc("2023-07-03"), utc("2023-07-05"),
                                                                      utc("2023-07-06"), utc("2023-07-07")]


def test_daily_bar_starts_are_the_sessions_at_utc_midnight():
    days = calendar_index("1d", utc("2023-07-01 15:00"), utc("2023-07-07 23:00"))
    assert list(days) == list(nyse_sessions(date(2023, 7, 1), date(2023, 7, 7)))
    assert str(days.dtype) == "datetime64[ns, UTC]"


def test_calendar_has_half_days_and_dst():
    friday = calendar_index("1min", pd.Timestamp("2023-11-24", tz="UTC"), pd.Timestamp("2023-11-24 23:00", tz="UTC"))
    assert len(friday) == 210 and friday[0] == pd.Timestamp("2023-11-24 14:30", tz="UTC")
    summer = calendar_index("1min", pd.Timestamp("2023-07-05", tz="UTC"), pd.Timestamp("2023-07-05 23:00", tz="UTC"))
    assert len(summer) == 390 and summer[0] == pd.Timestamp("2023-07-05 13:30", tz="UTC")


def test_minute_bar_starts_run_from_the_open_to_the_minute_before_the_close():
    minutes = calendar_index("1min", utc("2023-07-03"), utc("2023-07-05 23:59"))
    half = minutes[minutes < utc("2023-07-04")]
    holiday = minutes[(minutes >= utc("2023-07-04")) & (minutes < utc("2023-07-05"))]
    assert (half[0], half[-1], len(half)) == (utc("2023-07-03 13:30"), utc("2023-07-03 16:59"), 210)
    assert holiday.empty and (minutes[-1], len(minutes)) == (utc("2023-07-05 19:59"), 210 + 390)
    assert calendar_index("1min", utc("2023-07-01"), utc("2023-07-02 23:00")).empty  # a weekend


def test_yahoo_expects_bars_only_where_a_session_has_closed():
    assert _expects_bars(date(2023, 7, 3), date(2023, 7, 4), today=date(2023, 7, 10))  # the half day
    assert not _expects_bars(date(2023, 7, 1), date(2023, 7, 2), today=date(2023, 7, 10))  # a weekend
    assert not _expects_bars(date(2023, 7, 4), date(2023, 7, 4), today=date(2023, 7, 10))  # a holiday alone
    assert not _expects_bars(date(2023, 7, 5), date(2023, 7, 7), today=date(2023, 7, 5))  # not closed yet


def test_the_brokers_calendar_answers_from_the_same_sessions():
    assert Calendar().days(date(2023, 11, 22), date(2023, 11, 27)) == [
        {"date": "2023-11-22", "open": "09:30", "close": "16:00"},
        {"date": "2023-11-24", "open": "09:30", "close": "13:00"},
        {"date": "2023-11-27", "open": "09:30", "close": "16:00"},
    ]
    with pytest.raises(ValueError, match="2023-11-23 is not an NYSE session"):
        Calendar().session(date(2023, 11, 23))


def test_the_years_the_kept_calendar_covers_change_no_answer(monkeypatch):
    monkeypatch.setattr(tasks.calendar, "_held", None)
    narrow = (nyse_schedule(date(2023, 11, 1), date(2023, 11, 30)),
              calendar_index("1min", utc("2023-11-22"), utc("2023-11-27 23:00")))
    assert tasks.calendar._held[:2] == (date(2023, 1, 1), date(2023, 12, 31))  # whole years
    calendar_index("1d", utc("1999-03-01"), utc("2031-06-30"))  # grows it on both sides
    assert tasks.calendar._held[:2] == (date(1999, 1, 1), date(2031, 12, 31))
    pd.testing.assert_frame_equal(nyse_schedule(date(2023, 11, 1), date(2023, 11, 30)), narrow[0], check_exact=True)
    pd.testing.assert_index_equal(calendar_index("1min", utc("2023-11-22"), utc("2023-11-27 23:00")), narrow[1],
                                  exact=True, check_exact=True)
