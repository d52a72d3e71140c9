"""Where sessions end on intraday bars (docs/training.md, Minute bars: the MDP).

The env only knows bars; the session structure comes from the bars' timestamps. A bar is
its session's **last** when the next bar falls on another New York date: the regular
session's 15:59 minute, or 12:59 on a half day (13:00 close), whatever the calendar. The
last bar of the data is not marked: no next bar says whether its session goes on, and an
append of later minutes of the same day must not change what the past bars were.

numpy only: New York's date is the date of the UTC time less five hours. That is exact in
winter (UTC−5) and, in summer (UTC−4), for every time but 00:00–01:00 New York time, which
is outside any session, pre-market and after-hours included.
"""

from __future__ import annotations

import numpy as np

NEW_YORK_SHIFT = np.timedelta64(5, "h")
"""UTC minus this lies on New York's calendar date outside 00:00–01:00 local time."""


def new_york_dates(timestamps: np.ndarray) -> np.ndarray:
    """``[T]`` datetime64[D]: each UTC timestamp's New York calendar date."""
    utc = np.asarray(timestamps).astype("datetime64[ns]")
    return (utc - NEW_YORK_SHIFT).astype("datetime64[D]")


def session_last(timestamps: np.ndarray) -> np.ndarray:
    """``[T]`` bool: true at a bar whose next bar is on another New York date (its session's
    last); the data's last bar is false (unknown until a later bar arrives)."""
    dates = new_york_dates(timestamps)
    last = np.zeros(dates.shape, dtype=bool)
    last[:-1] = dates[1:] != dates[:-1]
    return last


def intraday(timestamps: np.ndarray) -> bool:
    """Whether some session holds more than one bar (minute bars; daily bars hold one each)."""
    dates = new_york_dates(timestamps)
    return bool(np.any(dates[1:] == dates[:-1]))
