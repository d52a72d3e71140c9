"""Regenerate the recorded yfinance frames the Yahoo adapter tests read (offline).

Where the shape comes from: this script runs the REAL ``yfinance.download`` of the
installed yfinance 1.7.0 and replaces only the network layer: ``yfinance.multi.Ticker``
is swapped for a stand-in whose ``history()`` returns what ``Ticker.history`` returns
for one ticker (checked against ``yfinance/scrapers/history.py`` 1.7.0):

* columns ``Open, High, Low, Close, Volume`` (``auto_adjust=True`` folds ``Adj Close``
  into ``Close``; ``actions=False`` drops dividends and splits), ``Volume`` int64;
* index tz-aware in the exchange time zone (America/New_York), named ``Date`` for daily
  bars (midnight of the session) and ``Datetime`` for intraday bars (bar start);
* an unknown ticker, or one whose requests fail, comes back as ``yfinance.utils.empty_df()``
  (columns ``Open, High, Low, Close, Adj Close, Volume``, no rows, index ``Date``).

Everything after that is yfinance's own assembly code in ``multi.py``: tz dropped for
daily bars (``ignore_tz``), each ticker reindexed to the union index (which NaN-pads a
missing ticker and a ticker missing a minute), concatenated into ``(Ticker, Price)``
columns and, for ``group_by="column"``, swapped and sorted into ``(Price, Ticker)``.

Run from the repository root (a fixed hash seed makes the ``group_by="ticker"`` column order,
which follows yfinance's internal ``set()`` of tickers, and so the files, reproducible):

    PYTHONHASHSEED=0 .venv/bin/python tests/tasks/data/sources/data/make_yahoo_fixtures.py
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pandas as pd
import yfinance
import yfinance.multi
import yfinance.utils

HERE = Path(__file__).resolve().parent
TZ = "America/New_York"
DAILY_SESSIONS = ["2024-01-02", "2024-01-03", "2024-01-04", "2024-01-05", "2024-01-08", "2024-01-09"]
# 2024-03-08 is before the US DST switch (UTC-5), 2024-03-11 after it (UTC-4).
MINUTE_SESSIONS = ["2024-03-08", "2024-03-11"]
MINUTES_PER_SESSION = 5  # 09:30 .. 09:34 local; enough to check shape, tz and padding
KNOWN = {"AAPL": 185.0, "MSFT": 370.0}  # ZZZZ is unknown: Yahoo has nothing for it
MSFT_GAP = pd.Timestamp("2024-03-08 09:32", tz=TZ)  # a minute without an MSFT trade


def _ohlcv(index: pd.DatetimeIndex, base: float, seed: int) -> pd.DataFrame:
    """Plausible OHLCV rows (low <= open, close <= high) for one ticker."""
    rng = np.random.default_rng(seed)
    close = base * np.exp(np.cumsum(rng.normal(0.0, 0.01, len(index))))
    open_ = close * np.exp(rng.normal(0.0, 0.003, len(index)))
    high = np.maximum(open_, close) * (1 + rng.uniform(0.0, 0.004, len(index)))
    low = np.minimum(open_, close) * (1 - rng.uniform(0.0, 0.004, len(index)))
    volume = rng.integers(10_000, 1_000_000, len(index)).astype(np.int64)
    frame = pd.DataFrame({"Open": open_, "High": high, "Low": low, "Close": close, "Volume": volume}, index=index)
    return frame.round(4)


def _history(ticker: str, interval: str) -> pd.DataFrame:
    """What ``Ticker(ticker).history(interval=...)`` returns for the whole recorded span."""
    if ticker not in KNOWN:
        return yfinance.utils.empty_df()
    seed = sorted(KNOWN).index(ticker)
    if interval == "1d":
        index = pd.DatetimeIndex(pd.to_datetime(DAILY_SESSIONS)).tz_localize(TZ)
        frame = _ohlcv(index, KNOWN[ticker], seed)
        frame.index.name = "Date"
        return frame
    stamps = [pd.Timestamp(f"{day} 09:30", tz=TZ) + pd.Timedelta(minutes=m)
              for day in MINUTE_SESSIONS for m in range(MINUTES_PER_SESSION)]
    if ticker == "MSFT":
        stamps = [s for s in stamps if s != MSFT_GAP]
    frame = _ohlcv(pd.DatetimeIndex(stamps), KNOWN[ticker], seed)
    frame.index.name = "Datetime"
    return frame


class _OfflineTicker:
    """Stand-in for ``yfinance.Ticker``: serves recorded history instead of the network."""

    def __init__(self, ticker: str, *_: Any, **__: Any) -> None:
        self.ticker = ticker.upper()
        self._price_history = None  # download() reads it for soft errors

    def history(self, start: str | None = None, end: str | None = None, interval: str = "1d",
                **_: Any) -> pd.DataFrame:
        frame = _history(self.ticker, interval)
        if frame.empty:
            return frame
        local = frame.index.tz_convert(TZ).tz_localize(None).normalize()
        keep = (local >= pd.Timestamp(start)) & (local < pd.Timestamp(end))  # end is exclusive
        return frame[keep]


def offline_download(*args: Any, **kwargs: Any) -> pd.DataFrame:
    """The real ``yfinance.download`` with the network layer replaced by recorded history."""
    with mock.patch.object(yfinance.multi, "Ticker", _OfflineTicker):
        return yfinance.download(*args, progress=False, threads=False, auto_adjust=True, **kwargs)


def main() -> None:
    assert yfinance.__version__ == "1.7.0", f"fixtures describe yfinance 1.7.0, not {yfinance.__version__}"
    three = ["AAPL", "MSFT", "ZZZZ"]
    daily = {"start": "2024-01-02", "end": "2024-01-10", "interval": "1d"}
    minute = {"start": "2024-03-08", "end": "2024-03-12", "interval": "1m"}
    frames = {
        "yahoo_1d_column": offline_download(three, group_by="column", **daily),
        "yahoo_1d_ticker": offline_download(three, group_by="ticker", **daily),
        "yahoo_1d_single_flat": offline_download(["AAPL"], multi_level_index=False, **daily),
        "yahoo_1min_column": offline_download(three, group_by="column", **minute),
    }
    with mock.patch.object(yfinance.multi, "Ticker", lambda t, *a, **k: _OfflineTicker("ZZZZ")):
        # Offline (or every ticker unknown): each history() is empty_df(), so download()
        # returns an EMPTY frame with (Price, Ticker) columns instead of raising.
        frames["yahoo_empty"] = yfinance.download(["AAPL", "MSFT"], progress=False, threads=False,
                                                  auto_adjust=True, **daily)
    for name, frame in frames.items():
        path = HERE / f"{name}.parquet"
        frame.to_parquet(path)
        back = pd.read_parquet(path)
        pd.testing.assert_frame_equal(back, frame, check_freq=False)
        print(f"{path.name}: {frame.shape}, columns {list(frame.columns[:3])}..., index {frame.index.name} "
              f"tz={frame.index.tz}")


if __name__ == "__main__":
    main()
