"""The broker's market clock on the NYSE calendar: the real one, or one stepped bar by bar.

A **simulated** clock stands at one event of one bar: its ``open`` (the opening orders have
filled, the bar trades) or its ``close`` (the bar is complete). A daily bar's events are its
session's open and close; a minute bar's are the start and the end of its minute, so the
market stays open between two minute bars and closes at the session's last one.
``POST /podracer/v1/clock/advance`` moves it to the next event, so a replay of a year of
daily bars takes seconds. A **wall** clock reads the time of day; the broker then processes
a bar's events once that bar is in the feed. Both answer Alpaca's ``/v2/clock`` (a simulated
clock: as the wall clock would at its event's instant) and ``/v2/calendar`` from the same NYSE
sessions (exchange_calendars' XNYS, half days included).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from typing import Literal
from zoneinfo import ZoneInfo

import numpy as np
import pandas as pd

from tasks.calendar import nyse_schedule

NEW_YORK = ZoneInfo("America/New_York")
Phase = Literal["open", "close"]


@dataclass(frozen=True)
class Session:
    day: date
    open: datetime
    close: datetime


@dataclass(frozen=True)
class ClockView:
    """What ``GET /v2/clock`` answers."""

    timestamp: datetime
    is_open: bool
    next_open: datetime
    next_close: datetime


class Calendar:
    """NYSE sessions with their open and close instants, cached a few years at a time.

    Lookups are binary searches over arrays of the cached sessions, so the clock costs
    microseconds per request rather than a pandas slice.
    """

    SPAN_YEARS = 4

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._first: date | None = None
        self._last: date | None = None
        self._schedule = pd.DataFrame()
        self._days = np.array([], dtype="datetime64[D]")
        self._opens = self._closes = np.array([], dtype=np.int64)

    def schedule(self, start: date, end: date) -> pd.DataFrame:
        """Sessions from ``start`` to ``end`` inclusive: index UTC midnights, ``open``/``close`` UTC."""
        self._cover(start, end)
        days = self._schedule.index
        return self._schedule.loc[(days >= pd.Timestamp(start, tz="UTC")) & (days <= pd.Timestamp(end, tz="UTC"))]

    def _cover(self, start: date, end: date) -> None:
        with self._lock:
            if self._first is not None and self._first <= start and end <= self._last:  # type: ignore[operator]
                return
            first = min(start, self._first or start) - timedelta(days=7)
            last = max(end, self._last or end) + timedelta(days=366 * self.SPAN_YEARS)
            schedule = nyse_schedule(first, last)
            self._schedule, self._first, self._last = schedule, first, last
            self._days = pd.DatetimeIndex(schedule.index).tz_localize(None).to_numpy().astype("datetime64[D]")
            self._opens = schedule["open"].array.asi8
            self._closes = schedule["close"].array.asi8

    def _session(self, i: int) -> Session:
        return Session(self._days[i].astype(date), _instant(self._opens[i]), _instant(self._closes[i]))

    def session(self, day: date) -> Session:
        """The session on ``day``; a ValueError if the market does not open that day."""
        self._cover(day, day)
        i = int(np.searchsorted(self._days, np.datetime64(day, "D")))
        if i == len(self._days) or self._days[i] != np.datetime64(day, "D"):
            raise ValueError(f"{day} is not an NYSE session")
        return self._session(i)

    def next_session(self, after: datetime) -> Session:
        """The first session whose close is after the instant ``after``."""
        day = after.astimezone(NEW_YORK).date()
        self._cover(day, day + timedelta(days=14))
        return self._session(int(np.searchsorted(self._closes, pd.Timestamp(after).value, side="right")))

    def wall(self, now: datetime) -> ClockView:
        """Alpaca's clock at the instant ``now``: the time of day, or the event a simulated clock stands at."""
        current = self.next_session(now)
        is_open = current.open <= now < current.close
        following = self.next_session(current.close) if is_open else current
        return ClockView(now, is_open, following.open if is_open else current.open, current.close)

    def days(self, start: date, end: date) -> list[dict[str, str]]:
        """``GET /v2/calendar``: each session's date and its New York open and close as ``HH:MM``."""
        rows = self.schedule(start, end)
        return [{"date": day.strftime("%Y-%m-%d"),
                 "open": row.open.tz_convert(NEW_YORK).strftime("%H:%M"),
                 "close": row.close.tz_convert(NEW_YORK).strftime("%H:%M")}
                for day, row in zip(rows.index, rows.itertuples())]


def _instant(ns: np.int64) -> datetime:
    return datetime.fromtimestamp(int(ns) / 1e9, tz=timezone.utc)


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def iso(instant: datetime) -> str:
    """Alpaca's timestamp format (RFC 3339 with the offset)."""
    return instant.astimezone(timezone.utc).isoformat()
