"""Yahoo Finance source adapter (yfinance 1.x): daily and 1-minute bars in the bars contract.

How it differs from FinRL's Yahoo processor (docs/data.md, sources): every request sends ALL tickers in
one ``yf.download`` call per date window, never one request per ticker per day. Daily bars
are one window; 1-minute bars are cut into windows of at most 7 days (Yahoo's per-request
limit), and a 1-minute request starting more than 30 days ago is refused up front because
Yahoo keeps no older minute history (use WRDS or Alpaca for that).

``auto_adjust=True``, passed explicitly (yfinance changed this default before, in 0.2.51):
Yahoo's raw OHLC are split-adjusted but not dividend-adjusted, so ex-dividend dates show
as price drops that never hit a holder's account. ``auto_adjust`` scales Open, High and
Low by the same ``Adj Close / Close`` ratio and reports ``Adj Close`` as ``Close``, so
returns, rewards and indicators see total returns without artificial gaps, and
low ≤ open, close ≤ high still holds. Past price levels then differ slightly from what
traded (as with FinRL's ``adjcp``); volume is left as Yahoo reports it. Yahoo has no
adjusted close for intraday bars, so the flag changes nothing for 1-minute bars.

yfinance does not raise when it cannot connect: it logs the error and returns an EMPTY
frame. The adapter treats an empty answer (where the NYSE calendar expects bars) like an
exception: it retries with exponential backoff, then raises :class:`SourceError`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import date, datetime, timedelta, timezone
from typing import Any

import pandas as pd

from tasks.calendar import nyse_sessions
from tasks.config_data import YahooParams
from tasks.data.bars import COLUMNS, to_contract
from tasks.data.sources import Request, SourceError

LOG = logging.getLogger("podracer.sources.yahoo")

INTERVALS = {"1d": "1d", "1min": "1m"}
MINUTE_HISTORY_DAYS = 30  # Yahoo serves 1-minute bars for the last ~30 days only
MINUTE_WINDOW_DAYS = 7  # ... and at most 7 days of them per request
EXCHANGE_TZ = "America/New_York"  # wall-clock zone of tz-naive intraday stamps
EMPTY_REASON = "no data returned (offline or unknown tickers?)"
PRICE_FIELDS = {"Open": "open", "High": "high", "Low": "low", "Close": "close", "Volume": "volume"}

Download = Callable[..., pd.DataFrame]
Window = tuple[date, date]  # first and last day, inclusive


def utc_today() -> date:
    """Today's date in UTC: the default clock for Yahoo's 30-day minute-history limit."""
    return datetime.now(timezone.utc).date()


def minute_windows(start: date, end: date, days: int = MINUTE_WINDOW_DAYS) -> list[Window]:
    """Consecutive inclusive windows of at most ``days`` days that cover start..end exactly."""
    out: list[Window] = []
    first = start
    while first <= end:
        last = min(first + timedelta(days=days - 1), end)
        out.append((first, last))
        first = last + timedelta(days=1)
    return out


def windows(request: Request) -> list[Window]:
    """The date windows one request is downloaded in: one for daily bars, ≤7-day ones for 1min."""
    if request.freq == "1min":
        return minute_windows(request.start, request.end)
    return [(request.start, request.end)]


def normalise(raw: pd.DataFrame, request: Request) -> pd.DataFrame:
    """Turn one ``yf.download`` frame into bars-contract rows for the requested symbols.

    Accepts every layout yfinance 1.x returns: ``(Price, Ticker)`` columns
    (``group_by="column"``), ``(Ticker, Price)`` (``group_by="ticker"``) and flat columns
    (one ticker with ``multi_level_index=False``). Rows whose OHLC are all NaN are the
    padding yfinance adds for a ticker that has no bar at that time; they are dropped.
    Daily bars get ts = session date at 00:00 UTC; intraday stamps are converted to UTC.
    """
    if raw.shape[0] == 0:
        return _empty_bars()
    if not isinstance(raw.index, pd.DatetimeIndex):
        raise SourceError("yahoo", request, f"unexpected index {type(raw.index).__name__} (expected dates)")
    wide = raw.copy()
    wide.columns = _price_ticker_columns(raw.columns, request)
    wide.index = _bar_starts(raw.index, request.freq)
    wanted = {symbol.upper(): symbol for symbol in request.symbols}
    tickers = wide.columns.get_level_values("ticker").astype(str).str.upper()
    wide = wide.loc[:, tickers.isin(list(wanted))]
    if wide.shape[1] == 0:
        return _empty_bars()
    long = wide.stack(level="ticker", future_stack=True)
    long.index = long.index.set_names(["ts", "ticker"])
    long = long.reset_index().dropna(subset=["Open", "High", "Low", "Close"], how="all")
    long["symbol"] = long["ticker"].astype(str).str.upper().map(wanted)
    return to_contract(long.rename(columns=PRICE_FIELDS).rename_axis(columns=None), "yahoo")


def _price_ticker_columns(columns: pd.Index, request: Request) -> pd.MultiIndex:
    """Columns as a (price, ticker) MultiIndex whatever yfinance's layout, or raise."""
    if not isinstance(columns, pd.MultiIndex):
        if len(request.symbols) != 1:
            raise SourceError("yahoo", request, "flat columns for several tickers (expected a MultiIndex)")
        columns = pd.MultiIndex.from_product([columns, [request.symbols[0]]])
    if columns.nlevels != 2:
        raise SourceError("yahoo", request, f"unexpected {columns.nlevels}-level columns")
    if "Close" not in columns.get_level_values(0):
        columns = columns.swaplevel(0, 1)
    missing = sorted(set(PRICE_FIELDS) - set(columns.get_level_values(0)))
    if missing:
        raise SourceError("yahoo", request, f"answer lacks column(s) {', '.join(missing)}")
    return columns.set_names(["price", "ticker"])


def _bar_starts(index: pd.DatetimeIndex, freq: str) -> pd.DatetimeIndex:
    """Bar-start stamps in UTC: midnight UTC of the session date for daily bars."""
    if freq == "1d":
        local = index.tz_localize(None) if index.tz is not None else index
        return local.normalize().tz_localize("UTC")
    aware = index if index.tz is not None else index.tz_localize(EXCHANGE_TZ)
    return aware.tz_convert("UTC")


def _empty_bars() -> pd.DataFrame:
    """A zero-row frame with the contract's columns and dtypes."""
    frame = pd.DataFrame({col: pd.Series(dtype="float64") for col in COLUMNS})
    frame["symbol"] = frame["symbol"].astype(str)
    frame["ts"] = pd.Series(dtype="datetime64[ns, UTC]")
    return frame


def _expects_bars(first: date, last: date, today: date) -> bool:
    """True when window first..last holds an NYSE session that has closed before ``today``."""
    last = min(last, today - timedelta(days=1))
    return last >= first and not nyse_sessions(first, last).empty


def _call_with_deadline(call: Callable[[], pd.DataFrame], seconds: float) -> pd.DataFrame:
    """Run ``call`` in a daemon thread and give up after ``seconds``.

    yfinance's ``timeout`` bounds only some of its requests (its time-zone and cookie
    look-ups use fixed 10 s and 30 s timeouts), so a hanging DNS could stall a call far
    longer; this is the hard upper bound.
    """
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = call()
        except Exception as exc:  # handed to the caller's retry loop
            box["error"] = exc

    worker = threading.Thread(target=target, name="yahoo-download", daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        raise TimeoutError(f"no answer within {seconds:g} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


class YahooSource:
    """Bars from Yahoo Finance through ``yfinance.download``.

    ``download`` (default ``yfinance.download``), ``sleep`` and ``today`` are injectable so
    tests run offline, without waiting, on a fixed date.
    """

    name = "yahoo"
    default_symbols: tuple[str, ...] = ()

    def __init__(
        self,
        params: YahooParams,
        download: Download | None = None,
        sleep: Callable[[float], None] = time.sleep,
        today: Callable[[], date] | None = None,
    ) -> None:
        self.params = params
        self._download = download
        self._sleep = sleep
        self._today = today or utc_today

    def fetch(self, request: Request) -> pd.DataFrame:
        """Bars for ``request`` in the bars contract, or raise a one-line :class:`SourceError`.

        Raises when Yahoo cannot serve the range (minute bars older than 30 days), when a
        window stays empty or failing after all retries, or when a requested ticker has no
        bar at all in the answer (the message names it).
        """
        today = self._today()
        self._check(request, today)
        parts = [self._fetch_window(request, window, today) for window in windows(request)]
        parts = [part for part in parts if not part.empty]
        if not parts:
            raise SourceError(self.name, request, EMPTY_REASON)
        bars = to_contract(pd.concat(parts, ignore_index=True), self.name)
        bars = bars.drop_duplicates(["symbol", "ts"], keep="first", ignore_index=True)
        found = set(bars["symbol"])
        missing = [s for s in dict.fromkeys(request.symbols) if s not in found]
        if missing:
            raise SourceError(self.name, request, f"no bars for {', '.join(missing)} (unknown or delisted tickers?)")
        LOG.info("yahoo: %d bars for %s", len(bars), request.describe())
        return bars

    def _check(self, request: Request, today: date) -> None:
        """Refuse requests Yahoo cannot answer, before any network call."""
        if not request.symbols:
            raise SourceError(self.name, request, "no symbols requested")
        if request.freq not in INTERVALS:
            raise SourceError(self.name, request, f"unsupported frequency {request.freq!r} (1d or 1min)")
        if request.start > request.end:
            raise SourceError(self.name, request, "start is after end")
        oldest = today - timedelta(days=MINUTE_HISTORY_DAYS)
        if request.freq == "1min" and request.start < oldest:
            raise SourceError(
                self.name, request,
                f"Yahoo keeps 1-minute bars for the last {MINUTE_HISTORY_DAYS} days only (start {request.start} "
                f"is before {oldest}); use WRDS or Alpaca for older minute history",
            )

    def _fetch_window(self, request: Request, window: Window, today: date) -> pd.DataFrame:
        """One window's bars, retrying failures and unexpected empty answers with backoff."""
        attempts = self.params.retries
        reason = ""
        for attempt in range(1, attempts + 1):
            try:
                raw = self._call(request, window)
            except Exception as exc:  # yfinance and its HTTP stack raise many types
                reason = f"download failed ({type(exc).__name__}: {_first_line(exc)})"
            else:
                bars = normalise(raw, request)
                if not bars.empty or not _expects_bars(*window, today):
                    return bars
                reason = EMPTY_REASON
            if attempt < attempts:
                delay = self.params.backoff_seconds * 2 ** (attempt - 1)
                LOG.warning("yahoo: %s for %s..%s, attempt %d/%d; retrying in %g s",
                            reason, *window, attempt, attempts, delay)
                self._sleep(delay)
        where = f" for {window[0]}..{window[1]}" if window != (request.start, request.end) else ""
        raise SourceError(self.name, request, f"{reason}{where} after {attempts} attempt(s)")

    def _call(self, request: Request, window: Window) -> pd.DataFrame:
        """One batched ``yf.download`` for every ticker over ``window`` (end made exclusive).

        The hard deadline grows with the batch: yfinance fetches each ticker's time zone
        and history with requests of up to ``timeout_seconds`` each.
        """
        download = self._download or _yfinance_download()
        kwargs: dict[str, Any] = {
            "start": window[0].isoformat(),
            "end": (window[1] + timedelta(days=1)).isoformat(),  # yfinance's end is exclusive
            "interval": INTERVALS[request.freq],
            "auto_adjust": True,  # see the module docstring
            "actions": False,
            "prepost": False,
            "repair": False,
            "keepna": False,
            "group_by": "column",
            "multi_level_index": True,
            "ignore_tz": request.freq == "1d",
            "threads": True,
            "progress": False,
            "timeout": self.params.timeout_seconds,
        }
        tickers = list(dict.fromkeys(request.symbols))
        LOG.debug("yahoo: download %d tickers %s..%s at %s", len(tickers), *window, kwargs["interval"])
        deadline = self.params.timeout_seconds * (2 + len(tickers))
        return _call_with_deadline(lambda: download(tickers, **kwargs), deadline)


def _yfinance_download() -> Download:
    """``yfinance.download``, imported on first use (no import cost or network at import time)."""
    import yfinance

    return yfinance.download


def _first_line(exc: BaseException) -> str:
    """The first line of an exception's message, so errors stay one line."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else "no message"
