"""The local broker's market: the project's validated daily bars as a replayable price feed.

The feed is the same ``[T, n]`` panel the features stage builds (:func:`tasks.data.bars.panel`),
so the opens the broker fills at are, bit for bit, the opens the backtest's env fills at.
It is re-read when ``data/validated/bars.parquet`` changes, so new bars (a nightly ingest,
``podracer simulate``) reach a running broker without a restart.

A ragged universe (docs/data.md) keeps every session any symbol has. Where a symbol has no bar
of its own (not yet listed, halted, delisted) ``real`` is false and its prices are the
panel's carried close, which is no price anyone traded at: the broker fills nothing there
and only marks positions at it (their last real close).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from tasks.data.bars import panel, read_parquet
from tasks.errors import DataError, MissingInput


@dataclass(frozen=True)
class Feed:
    """Daily bars of every symbol: ``[T, n]`` float64 prices, one row per NYSE session, and
    ``real`` ``[T, n]`` bool: where the symbol has a bar of its own (elsewhere the prices
    carry its last real close, for marking only)."""

    symbols: list[str]
    sessions: pd.DatetimeIndex
    """Session dates at 00:00 UTC, one per bar."""
    open: np.ndarray
    high: np.ndarray
    low: np.ndarray
    close: np.ndarray
    real: np.ndarray

    def __len__(self) -> int:
        return len(self.sessions)

    def column(self, symbol: str) -> int:
        return self.symbols.index(symbol)

    def trades(self, bar: int, symbol: str) -> bool:
        """Does ``symbol`` have a real bar at ``bar``? Nothing fills where it has none."""
        return bool(self.real[bar, self.column(symbol)])

    def bar(self, day: pd.Timestamp) -> int | None:
        """Index of the session ``day`` (a UTC midnight), or None if the feed has no such bar."""
        at = self.sessions.searchsorted(day)
        return int(at) if at < len(self.sessions) and self.sessions[at] == day else None


def load_feed(path: Path) -> Feed:
    """Read validated daily bars into a :class:`Feed` (one-line errors for what cannot be replayed)."""
    if not path.exists():
        raise MissingInput(f"{path}: not found (run `podracer validate` first; the broker replays validated bars)")
    bars, freq = read_parquet(path)
    if freq not in (None, "1d"):
        raise DataError(f"{path}: holds {freq} bars; the local broker replays daily bars only")
    if bars.empty:
        raise DataError(f"{path}: no rows")
    wide = panel(bars)
    sessions = pd.DatetimeIndex(wide["close"].index)
    symbols = [str(s) for s in wide["close"].columns]
    return Feed(symbols, sessions, *(wide[f].to_numpy(np.float64) for f in ("open", "high", "low", "close")),
                real=wide["real"].to_numpy(bool))


class FeedSource:
    """The feed of ``path``, reloaded whenever the file changes (thread-safe)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._feed: Feed | None = None

    def current(self) -> Feed:
        with self._lock:
            try:
                stat = self.path.stat()
            except FileNotFoundError:
                raise MissingInput(f"{self.path}: not found (run `podracer validate` first)") from None
            stamp = (stat.st_mtime_ns, stat.st_size)
            if self._feed is None or stamp != self._stamp:
                self._feed, self._stamp = load_feed(self.path), stamp
            return self._feed
