"""The local broker's market: the project's validated bars, daily or 1-minute, as a replayable price feed.

The feed is the same ``[T, n]`` panel the features stage builds (:func:`tasks.data.bars.panel`),
so the opens the broker fills at are, bit for bit, the opens the backtest's env fills at.
It is re-read when ``data/validated/bars.parquet`` changes, so new bars (a nightly ingest,
``podracer simulate``) reach a running broker without a restart.

Daily bars are read whole. Minute bars are read as a **trailing window** of the last
``broker.feed_sessions`` sessions (a pyarrow filter on ``ts``), widened back to the bars a
clock or a replay still stands on (:meth:`FeedSource.keep`): at the paper's scale the file
holds ~98 M rows, which the broker never loads whole (docs/delivery.md, The market).

A ragged universe (docs/data.md) keeps every bar time any symbol has. Where a symbol has no bar
of its own (not yet listed, halted, delisted, a minute without a trade) ``real`` is false and
its prices are the panel's carried close, which is no price anyone traded at: the broker fills
nothing there and only marks positions at it (their last real close; in a minute window, a
symbol without a real bar at the window's first minute carries its first real close in the
window back to it, as the panel does before a listing).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tasks.data.bars import FREQ_KEY, panel
from tasks.delivery.broker.clock import Calendar
from tasks.errors import DataError, MissingInput

FREQS = ("1d", "1min")
"""The frequencies the broker replays: a daily bar lasts its session, a minute bar its minute."""
MINUTE = timedelta(minutes=1)
BATCH_ROWS = 1 << 17
"""Rows decoded at a time while a minute window is filtered out of the file."""
NEW_YORK = "America/New_York"


@dataclass(frozen=True)
class Feed:
    """Bars of every symbol: ``[T, n]`` float64 prices, one row per bar, and ``real`` ``[T, n]``
    bool: where the symbol has a bar of its own (elsewhere the prices carry its last real close,
    for marking only)."""

    symbols: list[str]
    times: pd.DatetimeIndex
    """Each bar's start, UTC: the session's date at 00:00 for daily bars, the minute for minute bars."""
    open: np.ndarray
    high: np.ndarray
    low: np.ndarray
    close: np.ndarray
    real: np.ndarray
    freq: str = "1d"
    first: np.ndarray | None = None
    """``[T]`` the index of the first bar of each bar's session (daily: the bar itself)."""

    def __len__(self) -> int:
        return len(self.times)

    @property
    def intraday(self) -> bool:
        return self.freq != "1d"

    def column(self, symbol: str) -> int:
        return self.symbols.index(symbol)

    def trades(self, bar: int, symbol: str) -> bool:
        """Does ``symbol`` have a real bar at ``bar``? Nothing fills where it has none."""
        return bool(self.real[bar, self.column(symbol)])

    def day(self, bar: int) -> date:
        """The session (its New York date) that ``bar`` belongs to."""
        stamp = self.times[bar]
        return (stamp.tz_convert(NEW_YORK) if self.intraday else stamp).date()

    def instants(self, bar: int, calendar: Calendar) -> tuple[datetime, datetime]:
        """When ``bar`` opens and closes: its session's open and close (daily bars), or its minute."""
        if not self.intraday:
            session = calendar.session(self.day(bar))
            return session.open, session.close
        start = self.times[bar].to_pydatetime()
        return start, start + MINUTE

    def closes_session(self, bar: int, calendar: Calendar) -> bool:
        """Does ``bar`` close at its session's close (every daily bar; the 15:59 minute, 12:59 on a half day)?"""
        return not self.intraday or self.instants(bar, calendar)[1] >= calendar.session(self.day(bar)).close

    def session_start(self, bar: int) -> int:
        """The first bar of ``bar``'s session in the feed."""
        return bar if self.first is None else int(self.first[bar])

    def key(self, bar: int) -> str:
        """The bar as the ledger's clock names it: ``2023-07-03`` (daily), ``2023-07-03T13:30:00+00:00`` (minute)."""
        return self.times[bar].isoformat() if self.intraday else self.times[bar].date().isoformat()

    def find(self, when: str | date | datetime | pd.Timestamp) -> int | None:
        """The bar at ``when`` (a :meth:`key`, a bar's start, or a session's date: for minute bars
        that session's last bar in the feed), or None if the feed has no such bar."""
        stamp = utc(when)
        if self.intraday and stamp == stamp.normalize() and not _has_time(when):
            days = self.times.tz_convert(NEW_YORK).normalize().tz_localize(None)
            at = int(days.searchsorted(stamp.tz_localize(None), side="right")) - 1
            return at if at >= 0 and days[at] == stamp.tz_localize(None) else None
        at = int(self.times.searchsorted(stamp))
        return at if at < len(self.times) and self.times[at] == stamp else None


def _has_time(when: str | date | datetime | pd.Timestamp) -> bool:
    return isinstance(when, datetime) or (isinstance(when, str) and len(when) > 10)


def utc(when: str | date | datetime | pd.Timestamp) -> pd.Timestamp:
    """``when`` as a UTC timestamp (a date or a zone-less text is read as UTC, a date as its 00:00)."""
    stamp = pd.Timestamp(when)
    return stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp.tz_convert("UTC")


def file_freq(path: Path) -> str:
    """The frequency a bars file records (files from before it was recorded are daily)."""
    try:
        metadata = pq.read_schema(path).metadata or {}
    except (OSError, pa.ArrowException) as exc:
        raise DataError(f"{path}: unreadable Parquet ({str(exc).splitlines()[0]})") from None
    freq = metadata.get(FREQ_KEY)
    return freq.decode() if freq else "1d"


def newest(source: pq.ParquetFile) -> list[pd.Timestamp | None]:
    """Each row group's last ``ts``, from its statistics (None where it has none)."""
    column = source.schema_arrow.get_field_index("ts")
    out: list[pd.Timestamp | None] = []
    for i in range(source.metadata.num_row_groups):
        stats = source.metadata.row_group(i).column(column).statistics
        out.append(utc(stats.max) if stats is not None and stats.has_min_max else None)
    return out


def window_start(source: pq.ParquetFile, sessions: int, calendar: Calendar) -> pd.Timestamp | None:
    """00:00 UTC of the ``sessions``-th last NYSE session up to the file's last bar (from the row
    groups' statistics, else its ``ts`` column), or None when the file is empty."""
    tops = newest(source)
    if None in tops:
        column = source.read(columns=["ts"])["ts"]
        tops = [utc(column.to_pandas().max())] if len(column) else []
    if not tops:
        return None
    end = max(tops).tz_convert(NEW_YORK).date()  # type: ignore[type-var]
    days = calendar.schedule(end - timedelta(days=2 * sessions + 10), end).index
    return pd.Timestamp(days[-min(sessions, len(days))])


def read_since(source: pq.ParquetFile, start: pd.Timestamp) -> pa.Table:
    """The rows from ``start`` on, streamed batch by batch (row groups that end before it are
    skipped), so memory holds one batch and the window, never the file (``source`` opened
    without pre-buffering, which would read a whole row group at once)."""
    kind = source.schema_arrow.field("ts").type
    groups = [i for i, top in enumerate(newest(source)) if top is None or top >= start]
    batches = [batch.filter(pc.greater_equal(batch.column("ts"), pa.scalar(start, type=kind)))
               for batch in source.iter_batches(batch_size=BATCH_ROWS, row_groups=groups)]
    return pa.Table.from_batches(batches, schema=source.schema_arrow)


def load_feed(path: Path, sessions: int | None = None, since: pd.Timestamp | None = None,
              calendar: Calendar | None = None) -> Feed:
    """Read validated bars into a :class:`Feed` (one-line errors for what cannot be replayed).

    Minute bars: only the last ``sessions`` sessions (None: all), from ``since``'s session on
    if that is earlier (:func:`read_since`). Daily bars are read whole.
    """
    if not path.exists():
        raise MissingInput(f"{path}: not found (run `podracer validate` first; the broker replays validated bars)")
    freq = file_freq(path)
    if freq not in FREQS:
        raise DataError(f"{path}: holds {freq} bars; the local broker replays {' or '.join(FREQS)} bars")
    try:
        source = pq.ParquetFile(path, pre_buffer=False, buffer_size=1 << 20)  # stream: never a whole row group
        start = window_start(source, sessions, calendar or Calendar()) if freq != "1d" and sessions else None
        if start is not None and since is not None:
            start = min(start, utc(since.tz_convert(NEW_YORK).date()))
        table = source.read() if start is None else read_since(source, start)
    except (OSError, pa.ArrowException) as exc:
        raise DataError(f"{path}: unreadable Parquet ({str(exc).splitlines()[0]})") from None
    bars = table.to_pandas()
    if bars.empty:
        raise DataError(f"{path}: no rows")
    wide = panel(bars)
    times = pd.DatetimeIndex(wide["close"].index)
    first = None
    if freq != "1d":
        days = times.tz_convert(NEW_YORK).normalize().asi8
        starts = np.flatnonzero(np.r_[True, days[1:] != days[:-1]])
        first = starts[np.searchsorted(starts, np.arange(len(days)), side="right") - 1]
    symbols = [str(s) for s in wide["close"].columns]
    return Feed(symbols, times, *(wide[f].to_numpy(np.float64) for f in ("open", "high", "low", "close")),
                real=wide["real"].to_numpy(bool), freq=freq, first=first)


class FeedSource:
    """The feed of ``path``, reloaded whenever the file changes (thread-safe); minute bars as a
    trailing window of ``sessions`` sessions (None: all). ``calendar``: the market's NYSE
    calendar, which the accounts on this feed share."""

    def __init__(self, path: Path, sessions: int | None = None) -> None:
        self.path, self.sessions = path, sessions
        self.calendar = Calendar()
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._feed: Feed | None = None
        self._since: pd.Timestamp | None = None

    def keep(self, since: str | date | datetime | pd.Timestamp) -> None:
        """Hold the bars from ``since`` on (a clock's bar, a replay's start), even where the
        trailing window would have left them out."""
        stamp = utc(since)
        with self._lock:
            if self._since is None or stamp < self._since:
                self._since = stamp
                if self._feed is not None and stamp < self._feed.times[0]:
                    self._feed = None

    def current(self) -> Feed:
        with self._lock:
            try:
                stat = self.path.stat()
            except FileNotFoundError:
                raise MissingInput(f"{self.path}: not found (run `podracer validate` first)") from None
            stamp = (stat.st_mtime_ns, stat.st_size)
            if self._feed is None or stamp != self._stamp:
                self._feed, self._stamp = load_feed(self.path, self.sessions, self._since, self.calendar), stamp
            return self._feed
