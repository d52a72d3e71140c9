"""The NYSE calendar: exchange_calendars' XNYS, half days included (docs/data.md, sources).

One calendar serves every part that needs trading days: the synthetic market's sessions
(:mod:`tasks.data.synthetic_daily`), validation's expected bars (:mod:`tasks.data.checks`), the
Yahoo and Alpaca sources, the arrivals simulator and the paper broker's clock
(:mod:`tasks.delivery.broker.clock`), so they all agree on which days trade and when each
session opens and closes. It sits beside the other shared modules (rank 0), below both the
data and the delivery parts.

Building an XNYS calendar costs time in proportion to the years it spans, and
exchange_calendars keeps only the last one built. So one calendar is kept here, covering whole
years, and rebuilt wider only when a date outside it is asked for: a run builds it once or a
few times. Which years it covers never changes an answer: a session's open and close depend on
its date alone.
"""

from __future__ import annotations

import threading
from datetime import date
from typing import TYPE_CHECKING

import pandas as pd

if TYPE_CHECKING:
    from exchange_calendars import ExchangeCalendar

_lock = threading.Lock()
_held: tuple[date, date, ExchangeCalendar] | None = None
"""The calendar kept, with the first and last day it covers."""


def xnys(first: date, last: date) -> ExchangeCalendar:
    """An XNYS calendar that covers ``first`` to ``last`` (either order): the one kept, or a
    new one over whole years that also covers what the kept one did."""
    global _held
    with _lock:
        lo, hi = min(first, last), max(first, last)
        if _held is not None and _held[0] <= lo and hi <= _held[1]:
            return _held[2]
        import exchange_calendars as xcals  # lazy: importing it takes a while

        start, end = date(lo.year, 1, 1), date(hi.year, 12, 31)
        if _held is not None:
            start, end = min(start, _held[0]), max(end, _held[1])
        calendar = xcals.get_calendar("XNYS", start=pd.Timestamp(start), end=pd.Timestamp(end))
        _held = (start, end, calendar)
        return calendar


def nyse_schedule(start: date, end: date) -> pd.DataFrame:
    """NYSE sessions between ``start`` and ``end`` inclusive with their real open and close.

    Index: session dates as UTC midnights; columns ``open`` and ``close`` (UTC), so half
    days close at 13:00 New York time and DST moves the UTC open (docs/data.md, sources).
    No session in the range (a holiday weekend, ``end`` before ``start``): an empty frame.
    """
    lo, hi = pd.Timestamp(start), pd.Timestamp(end)
    schedule = xnys(start, end).schedule
    schedule = schedule.loc[(schedule.index >= lo) & (schedule.index <= hi), ["open", "close"]]
    index = pd.DatetimeIndex(schedule.index)
    schedule.index = index.tz_localize("UTC") if index.tz is None else index.tz_convert("UTC")
    return schedule


def nyse_sessions(start: date, end: date) -> pd.DatetimeIndex:
    """NYSE trading days between ``start`` and ``end`` inclusive, as UTC midnights."""
    return pd.DatetimeIndex(nyse_schedule(start, end).index)


def calendar_index(freq: str, start: pd.Timestamp, end: pd.Timestamp) -> pd.DatetimeIndex:
    """Expected bar starts (UTC) between ``start`` and ``end`` (tz-aware): NYSE sessions at
    00:00 UTC for daily bars, NYSE trading minutes (half days included) for 1-minute bars."""
    first, last = start.tz_convert(None).normalize(), end.tz_convert(None).normalize()
    cal = xnys(first.date(), last.date())
    sessions = cal.sessions[(cal.sessions >= first) & (cal.sessions <= last)]
    if freq == "1d":
        return pd.DatetimeIndex(sessions).tz_localize("UTC")
    if sessions.empty:
        return pd.DatetimeIndex([], tz="UTC")
    first_minute, last_minute = cal.session_first_minute(sessions[0]), cal.session_last_minute(sessions[-1])
    return pd.DatetimeIndex(cal.minutes_in_range(first_minute, last_minute))
