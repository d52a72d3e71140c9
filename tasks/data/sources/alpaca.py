"""Alpaca historical stock bars (market-data API v2, ``GET /v2/stocks/bars``) via alpaca-py.

All symbols go in one request and every page is followed. How alpaca-py 0.44.0 pages,
and why this module drives the pages itself:

- ``StockBarsRequest.limit`` is a *total* cap across all pages: alpaca-py stops paging
  once it has that many bars, so using it as a page size would silently truncate.
- ``StockHistoricalDataClient.get_stock_bars`` always asks for 10,000-bar pages and
  cannot take another page size, and it fails on a ``"bars": null`` page.

So the query is built with ``StockBarsRequest`` / ``TimeFrame`` and each page is fetched
with the client's own ``get`` (alpaca-py's auth headers, URL and retry handling), sending
``limit = AlpacaParams.page_limit`` and ``page_token = next_page_token`` until the token
is null. The client retries 429 and 5xx answers (alpaca-py's default is only 429/504)
with a configurable wait, and every request has a timeout (alpaca-py sets none).

Keys come from ``APCA_API_KEY_ID`` / ``APCA_API_SECRET_KEY`` at fetch time and live only
in the client made for that fetch; they never appear in logs, errors or ``repr``.

Bars are split- and dividend-adjusted (``adjustment="all"``) by default, so corporate
actions do not look like returns. Daily bars, stamped by Alpaca at midnight New York
(04:00Z or 05:00Z), get ts = the session date at 00:00 UTC. Minute bars keep Alpaca's
bar-start time; extended-hours bars are dropped (regular NYSE sessions only).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping
from datetime import date, datetime, time
from typing import Any
from zoneinfo import ZoneInfo

import pandas as pd
import requests
from alpaca.common.exceptions import APIError
from alpaca.data.enums import Adjustment, DataFeed
from alpaca.data.historical import StockHistoricalDataClient
from alpaca.data.requests import StockBarsRequest
from alpaca.data.timeframe import TimeFrame

from tasks.calendar import calendar_index
from tasks.config_data import AlpacaParams
from tasks.data.bars import to_contract
from tasks.data.sources import Request, SourceError
from tasks.errors import DataError

log = logging.getLogger("podracer.sources.alpaca")

KEY_VARS = ("APCA_API_KEY_ID", "APCA_API_SECRET_KEY")
BARS_PATH = "/stocks/bars"  # under the client's /v2
RETRY_CODES = [429, 500, 502, 503, 504]
NEW_YORK = ZoneInfo("America/New_York")
WIRE_COLUMNS = {"o": "open", "h": "high", "l": "low", "c": "close", "v": "volume"}
WireBars = dict[str, list[dict[str, Any]]]
"""Bars by symbol in Alpaca's wire format (``t``, ``o``, ``h``, ``l``, ``c``, ``v``, ...)."""


class _TimeoutSession(requests.Session):
    """A requests session with a default timeout (alpaca-py passes none)."""

    def __init__(self, timeout_s: float) -> None:
        super().__init__()
        self.timeout_s = timeout_s

    def request(  # type: ignore[override]
        self, method: str | bytes, url: str | bytes, *args: Any, **kwargs: Any
    ) -> requests.Response:
        kwargs.setdefault("timeout", self.timeout_s)
        return super().request(method, url, *args, **kwargs)


class AlpacaSource:
    """Bars from Alpaca's historical market-data API, in the bars contract."""

    name = "alpaca"
    default_symbols: tuple[str, ...] = ()

    def __init__(
        self,
        params: AlpacaParams,
        env: Mapping[str, str] | None = None,
        *,
        retries: int = 3,
        retry_wait_s: float = 3.0,
        timeout_s: float = 30.0,
        adjustment: str = "all",
    ) -> None:
        """Configure only; nothing is read from the environment or the network until
        :meth:`fetch`. ``env`` defaults to ``os.environ``."""
        self.params = params
        self._env = env
        self.retries, self.retry_wait_s, self.timeout_s = retries, retry_wait_s, timeout_s
        self.adjustment = Adjustment(adjustment)

    def __repr__(self) -> str:
        return f"AlpacaSource(data_url={self.params.data_url!r}, feed={self.params.feed!r})"

    def fetch(self, request: Request) -> pd.DataFrame:
        """Every bar for ``request`` in the bars contract, or a one-line :class:`SourceError`
        (missing keys, HTTP error, unreachable server, empty result, missing symbols)."""
        if not request.symbols:
            raise SourceError(self.name, request, "no symbols requested")
        key_id, secret_key = self._keys(request)
        client = self._client(key_id, secret_key)
        log.debug("alpaca: fetching %s from %s", request.describe(), self.params.data_url)
        try:
            wire, pages = self._fetch_pages(client, request)
        except (APIError, requests.RequestException, ValueError) as exc:
            reason = _describe(exc, self.params.data_url, self.retries, (key_id, secret_key))
            raise SourceError(self.name, request, reason) from None
        finally:
            client._session.close()
        frame = self._to_frame(wire, request)
        log.info("alpaca: %d bars for %d symbols in %d page(s)", len(frame), frame["symbol"].nunique(), pages)
        return frame

    def _keys(self, request: Request) -> tuple[str, str]:
        """The API key pair from the environment, or a SourceError naming what is missing."""
        env = os.environ if self._env is None else self._env
        values = [env.get(var, "").strip() for var in KEY_VARS]
        missing = [var for var, value in zip(KEY_VARS, values) if not value]
        if missing:
            raise SourceError(self.name, request, f"missing API key: set {' and '.join(missing)} in the environment")
        return values[0], values[1]

    def _client(self, key_id: str, secret_key: str) -> StockHistoricalDataClient:
        """An alpaca-py client on ``params.data_url`` returning raw JSON, with our retry
        policy and a request timeout."""
        client = StockHistoricalDataClient(
            api_key=key_id, secret_key=secret_key, raw_data=True, url_override=self.params.data_url.rstrip("/")
        )
        # alpaca-py 0.44.0 only takes retry settings in RESTClient.__init__, which this
        # client does not forward, and refuses a zero wait there; set them directly.
        client._retry, client._retry_wait, client._retry_codes = self.retries, self.retry_wait_s, RETRY_CODES
        client._session = _TimeoutSession(self.timeout_s)
        return client

    def _query(self, request: Request) -> dict[str, Any]:
        """Query parameters for the whole request: New York calendar days ``start`` to
        ``end`` inclusive, built by alpaca-py's StockBarsRequest (no total ``limit``)."""
        bars_request = StockBarsRequest(
            symbol_or_symbols=list(request.symbols),
            timeframe=TimeFrame.Day if request.freq == "1d" else TimeFrame.Minute,
            start=_ny(request.start, time(0, 0)),
            end=_ny(request.end, time(23, 59, 59)),
            adjustment=self.adjustment,
            feed=DataFeed(self.params.feed),
        )
        return bars_request.to_request_fields()

    def _fetch_pages(self, client: StockHistoricalDataClient, request: Request) -> tuple[WireBars, int]:
        """All bars by symbol, following ``next_page_token`` to the end; and the page count."""
        bars: WireBars = {}
        pages = 0
        for page in self._pages(client, self._query(request), request):
            pages += 1
            for symbol, rows in page.items():
                bars.setdefault(symbol, []).extend(rows or [])
        return bars, pages

    def _pages(
        self, client: StockHistoricalDataClient, query: dict[str, Any], request: Request
    ) -> Iterator[dict[str, Any]]:
        """Each page's ``bars`` object; a token that repeats is an error, not a loop."""
        seen: set[str] = set()
        token: str | None = None
        while True:
            response = client.get(BARS_PATH, {**query, "limit": self.params.page_limit, "page_token": token})
            if not isinstance(response, dict) or not isinstance(response.get("bars", "absent") or {}, dict):
                raise SourceError(self.name, request, "malformed response: no 'bars' object")
            yield response["bars"] or {}
            token = response.get("next_page_token")
            log.debug("alpaca: page done, next token %s", "present" if token else "none")
            if not token:
                return
            if token in seen:
                raise SourceError(self.name, request, "paging did not advance (repeated next_page_token)")
            seen.add(token)

    def _to_frame(self, wire: WireBars, request: Request) -> pd.DataFrame:
        """Wire bars to the bars contract; empty results and missing symbols are errors."""
        if not any(wire.values()):
            raise SourceError(self.name, request, "no bars returned (no trading in range, or unknown symbols)")
        missing = [s for s in request.symbols if not wire.get(s)]
        if missing:
            reason = f"no bars for {', '.join(missing)} (unknown symbol or no data in range)"
            raise SourceError(self.name, request, reason)
        try:
            rows = [{"symbol": s, **bar} for s in request.symbols for bar in wire[s]]
            frame = pd.DataFrame(rows, columns=["symbol", "t", *WIRE_COLUMNS]).rename(columns=WIRE_COLUMNS)
            ts = pd.to_datetime(frame.pop("t"), utc=True, format="ISO8601")
        except (ValueError, TypeError) as exc:
            raise SourceError(self.name, request, f"malformed bar ({str(exc).splitlines()[0][:120]})") from None
        # Daily bars are stamped at midnight New York, 04:00Z or 05:00Z, which is always
        # on the session's UTC date (as is a 00:00Z stamp), so flooring gives the date.
        frame["ts"] = ts.dt.floor("D") if request.freq == "1d" else ts
        try:
            bars = to_contract(frame, f"alpaca {request.describe()}")
        except DataError as exc:
            raise SourceError(self.name, request, str(exc)) from None
        return bars if request.freq == "1d" else regular_hours(bars)


def regular_hours(bars: pd.DataFrame) -> pd.DataFrame:
    """Minute bars inside NYSE sessions only: the feed's pre- and post-market bars would
    otherwise reach validation as out-of-session rows."""
    if bars.empty:
        return bars
    inside = bars["ts"].isin(calendar_index("1min", bars["ts"].min(), bars["ts"].max()))
    if not inside.all():
        log.info("alpaca: dropped %d extended-hours minute bars", int((~inside).sum()))
    return bars[inside].reset_index(drop=True)


def _ny(day: date, at: time) -> datetime:
    """``day`` at ``at`` New York time (Alpaca's sessions are New York days)."""
    return datetime.combine(day, at, NEW_YORK)


def _describe(exc: Exception, url: str, retries: int, secrets: tuple[str, ...]) -> str:
    """A one-line reason for a failed fetch, with any key value scrubbed out."""
    if isinstance(exc, APIError):
        reason = f"HTTP {exc.status_code}: {_api_message(exc)}"
        if exc.status_code in (401, 403):
            reason += f" (check {' / '.join(KEY_VARS)})"
        elif exc.status_code in RETRY_CODES and retries > 0:
            reason += f" (after {retries} retries)"
    elif isinstance(exc, requests.Timeout):
        reason = f"request to {url} timed out"
    elif isinstance(exc, requests.ConnectionError):
        reason = f"cannot connect to {url}"
    else:
        reason = f"{type(exc).__name__}: {exc}"
    for secret in secrets:
        reason = reason.replace(secret, "***")
    return " ".join(reason.split())[:300]


def _api_message(exc: Any) -> str:
    """Alpaca's ``message`` from an error body, or the body's first 200 characters."""
    try:
        return str(exc.message)
    except (ValueError, KeyError, TypeError):
        return str(exc)[:200] or "no body"
