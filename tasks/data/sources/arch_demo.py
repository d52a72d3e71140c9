"""The arch-demo source: real daily S&P 500 and NASDAQ Composite bars, offline (docs/data.md, sources).

The ``arch`` package ships daily OHLCV of two US indices for 1999-01-04..2018-12-31
(5031 NYSE sessions each), read with ``arch.data.sp500.load()`` and
``arch.data.nasdaq.load()``. This adapter serves them as two symbols:

* ``SPX``: the S&P 500 index;
* ``COMP``: the NASDAQ Composite index.

Prices are the files' ``Close``, not ``Adj Close``: the contract's close is the level
that traded, and for these price indices the two columns are identical in the shipped
files anyway (no splits or dividends are adjusted into an index level). Volume is the
files' volume as float. ts is the session date at 00:00 UTC, as for all daily bars.

The data is passed on as shipped: rows that break OHLC consistency (none in arch 8.0.0)
are not repaired here but left for validation to quarantine. Known quirks of the shipped
files: NASDAQ volume is 0 on 2015-05-12 and 2018-01-09 (allowed: volume ≥ 0), and the
S&P 500 open equals the prior close on most days before 2006 (no overnight gap).
"""

from __future__ import annotations

from datetime import date
from functools import lru_cache

import pandas as pd

from tasks.data.bars import to_contract
from tasks.data.sources import Request, SourceError

FIRST_DAY, LAST_DAY = date(1999, 1, 4), date(2018, 12, 31)
DATASETS = {"SPX": "sp500", "COMP": "nasdaq"}
"""Symbol → ``arch.data`` module holding its file."""
FIELDS = {"Open": "open", "High": "high", "Low": "low", "Close": "close", "Volume": "volume"}


@lru_cache(maxsize=None)
def _shipped(symbol: str) -> pd.DataFrame:
    """The shipped file of ``symbol`` in the bars contract (loaded once; callers must not mutate it)."""
    import importlib

    # arch's import takes a few seconds, so it happens only when the data is wanted.
    raw = importlib.import_module(f"arch.data.{DATASETS[symbol]}").load()
    frame = raw.loc[:, list(FIELDS)].rename(columns=FIELDS)
    frame.insert(0, "ts", pd.DatetimeIndex(raw.index).tz_localize("UTC"))
    frame.insert(0, "symbol", symbol)
    return to_contract(frame.reset_index(drop=True), f"arch-demo {symbol}")


class ArchDemoSource:
    """Daily S&P 500 (``SPX``) and NASDAQ Composite (``COMP``) bars shipped with ``arch``."""

    name = "arch-demo"
    default_symbols: tuple[str, ...] = tuple(DATASETS)
    symbols = tuple(DATASETS)

    def fetch(self, request: Request) -> pd.DataFrame:
        """Bars for ``request`` in the bars contract (docs/data.md, contracts), from the files ``arch`` ships.

        An empty ``request.symbols`` means both symbols. Raises :class:`SourceError` for a
        1min request (no package ships minute bars), an unknown symbol, or a
        range with no rows (the data covers 1999-01-04..2018-12-31); a range that only
        partly overlaps returns the rows it has.
        """
        if request.freq != "1d":
            raise SourceError(self.name, request, f"only daily bars are shipped, not {request.freq}")
        wanted = list(dict.fromkeys(request.symbols)) or list(self.symbols)
        unknown = [s for s in wanted if s not in DATASETS]
        if unknown:
            raise SourceError(
                self.name, request, f"unknown symbol(s) {', '.join(unknown)} (available: {', '.join(self.symbols)})"
            )
        lo, hi = pd.Timestamp(request.start, tz="UTC"), pd.Timestamp(request.end, tz="UTC")
        parts = [bars[(bars["ts"] >= lo) & (bars["ts"] <= hi)] for bars in map(_shipped, sorted(wanted))]
        frame = pd.concat(parts, ignore_index=True)
        if frame.empty:
            raise SourceError(self.name, request, f"no rows in range (the data covers {FIRST_DAY}..{LAST_DAY})")
        return to_contract(frame, self.name)
