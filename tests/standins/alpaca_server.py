"""A local stand-in for Alpaca's market-data API, ``GET /v2/stocks/bars``, and Trading API on 127.0.0.1.

It answers in Alpaca's real v2 format, ``{"bars": {"AAPL": [{"t", "o", "h", "l", "c",
"v", "n", "vw"}, ...]}, "next_page_token": ...}``, from generated bars, and honours the
query the way Alpaca does:

- ``symbols`` (comma-separated), ``timeframe`` (``1Min``/``1T``, ``1Day``/``1D``),
  ``start``/``end`` (RFC 3339 or ``YYYY-MM-DD``, both inclusive), ``feed``,
  ``adjustment``, ``sort`` (``asc``/``desc``), ``limit`` (1..10000, default 1000);
- results are ordered by symbol, then time, and ``limit`` counts bars across the whole
  page, so one page can end inside a symbol or span several; ``next_page_token`` is the
  base64 of ``SYMBOL|M|<last bar's time>`` and ``page_token`` resumes after it;
- symbols with no bars are simply absent from ``bars``; no bars at all is ``{"bars": {}}``;
- it checks ``APCA-API-KEY-ID`` / ``APCA-API-SECRET-KEY``: 401 if either is missing,
  403 if they do not match.

Tests queue failures with :meth:`AlpacaStandin.fail` (e.g. one 500, then normal answers)
and read back every market-data query it received in :attr:`AlpacaStandin.requests`.

The same server answers the Trading API v2 paths alpaca-py's ``TradingClient`` uses
(``/v2/account``, ``/v2/positions``, ``/v2/orders``..., ``/v2/clock``) with recorded Alpaca
responses: :mod:`tests.standins.alpaca_trading`, whose state and request log are
:attr:`AlpacaStandin.trading`. Queued failures answer trading requests too.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, urlsplit
from zoneinfo import ZoneInfo

import numpy as np

from tests.standins.alpaca_trading import AlpacaTrading

NEW_YORK = ZoneInfo("America/New_York")
TIMEFRAMES = {"1Min": "1Min", "1T": "1Min", "1Day": "1Day", "1D": "1Day"}
Bar = dict[str, Any]
"""One bar in Alpaca's wire format: t, o, h, l, c, v, n, vw."""


def rfc3339(ts: datetime) -> str:
    """``ts`` (UTC) the way Alpaca writes bar times: ``2024-01-02T05:00:00Z``."""
    return ts.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def bar_times(start: date, end: date, timeframe: str) -> list[datetime]:
    """Bar start times on weekdays from ``start`` to ``end``: midnight New York for daily
    bars (04:00Z or 05:00Z, as Alpaca stamps them), 09:30-15:59 New York for minute bars."""
    out: list[datetime] = []
    day = start
    while day <= end:
        if day.weekday() < 5:
            if timeframe == "1Day":
                out.append(datetime.combine(day, time(0, 0), NEW_YORK).astimezone(timezone.utc))
            else:
                open_ = datetime.combine(day, time(9, 30), NEW_YORK).astimezone(timezone.utc)
                out.extend(open_ + timedelta(minutes=i) for i in range(390))
        day += timedelta(days=1)
    return out


def generate_bars(
    symbols: Mapping[str, tuple[date, date]], timeframe: str = "1Day", seed: int = 0
) -> dict[str, list[Bar]]:
    """Seeded random-walk bars per symbol over its own ``(first, last)`` date range, in
    Alpaca's wire format and time order."""
    rng = np.random.default_rng(seed)
    out: dict[str, list[Bar]] = {}
    for symbol, (first, last) in sorted(symbols.items()):
        times = bar_times(first, last, timeframe)
        close = 100.0 * np.exp(np.cumsum(rng.normal(0.0, 0.01, len(times))))
        open_ = np.concatenate([[100.0], close[:-1]])
        spread = np.abs(rng.normal(0.0, 0.005, len(times))) * close
        volume = rng.integers(100, 100_000, len(times))
        out[symbol] = [
            {
                "t": rfc3339(ts), "o": round(float(o), 4), "h": round(float(max(o, c) + s), 4),
                "l": round(float(min(o, c) - s), 4), "c": round(float(c), 4), "v": int(v),
                "n": int(v // 50 + 1), "vw": round(float((o + c) / 2), 4),
            }
            for ts, o, c, s, v in zip(times, open_, close, spread, volume)
        ]
    return out


@dataclass(frozen=True)
class Failure:
    """One queued failure: answer ``status`` with Alpaca's error body (or stall ``delay_s``)."""

    status: int
    message: str
    delay_s: float = 0.0


class QueryError(Exception):
    """A bad query; the stand-in answers it with Alpaca's 400 error body."""


def _parse_time(text: str, *, end: bool) -> datetime:
    """RFC 3339 or ``YYYY-MM-DD`` (a date means its whole UTC day, as Alpaca reads it)."""
    try:
        if len(text) == 10:
            day = datetime.combine(date.fromisoformat(text), time(0, 0), timezone.utc)
            return day + timedelta(days=1, microseconds=-1) if end else day
        return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(timezone.utc)
    except ValueError:
        raise QueryError(f"invalid {'end' if end else 'start'}: {text}") from None


def _token(symbol: str, ts: datetime) -> str:
    return base64.b64encode(f"{symbol}|M|{ts.strftime('%Y-%m-%dT%H:%M:%S.000000000Z')}".encode()).decode()


def _untoken(token: str) -> tuple[str, datetime]:
    try:
        symbol, _, stamp = base64.b64decode(token, validate=True).decode().split("|")
        return symbol, datetime.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc)
    except ValueError:
        raise QueryError("invalid page token") from None


class AlpacaStandin:
    """The stand-in server; use it as a context manager (it binds an ephemeral port on
    127.0.0.1 on enter and shuts down and joins its thread on exit)."""

    def __init__(
        self, daily: dict[str, list[Bar]] | None = None, minute: dict[str, list[Bar]] | None = None,
        key_id: str = "standin-key-id", secret_key: str = "standin-secret-key",
    ) -> None:
        self.data = {"1Day": daily or {}, "1Min": minute or {}}
        self.key_id, self.secret_key = key_id, secret_key
        self.requests: list[dict[str, str]] = []
        self.trading = AlpacaTrading(key_id, secret_key)
        self._failures: list[Failure] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """Base URL to give the client (``http://127.0.0.1:PORT``)."""
        assert self._server is not None, "stand-in not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def fail(self, status: int, message: str = "injected failure", times: int = 1, delay_s: float = 0.0) -> None:
        """Answer the next ``times`` requests with ``status`` (after ``delay_s``), then normally."""
        with self._lock:
            self._failures.extend([Failure(status, message, delay_s)] * times)

    def __enter__(self) -> AlpacaStandin:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._server is not None and self._thread is not None
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def answer(self, path: str, query: dict[str, str], headers: Message) -> tuple[int, dict[str, Any], float]:
        """Status, JSON body and delay for one request (the handler's whole logic)."""
        with self._lock:
            self.requests.append({"path": path, **query})
            failure = self._failures.pop(0) if self._failures else None
        if path != "/v2/stocks/bars":
            return 404, {"message": "Not Found"}, 0.0
        if failure is not None:
            return failure.status, {"code": failure.status * 100_000, "message": failure.message}, failure.delay_s
        key, secret = headers.get("APCA-API-KEY-ID"), headers.get("APCA-API-SECRET-KEY")
        if not key or not secret:
            return 401, {"code": 40110000, "message": "request is not authorized"}, 0.0
        if (key, secret) != (self.key_id, self.secret_key):
            return 403, {"message": "forbidden"}, 0.0
        try:
            return 200, self._page(query), 0.0
        except QueryError as exc:
            return 400, {"code": 40010001, "message": str(exc)}, 0.0

    def trade(self, method: str, path: str, query: dict[str, str], headers: Message,
              body: Any) -> tuple[int, Any, float]:
        """Status, JSON body (None: none) and delay for one Trading API request."""
        call = self.trading.record(method, path, query, headers, body)
        with self._lock:
            failure = self._failures.pop(0) if self._failures else None
        if failure is not None:
            call.status = failure.status
            return failure.status, {"code": failure.status * 100_000, "message": failure.message}, failure.delay_s
        status, payload = self.trading.answer(call)
        return status, payload, 0.0

    def _page(self, query: dict[str, str]) -> dict[str, Any]:
        """One page of bars for ``query``, ordered by symbol then time, ``limit`` bars at most."""
        symbols = [s for s in query.get("symbols", "").split(",") if s]
        if not symbols:
            raise QueryError("missing symbols")
        timeframe = TIMEFRAMES.get(query.get("timeframe", ""))
        if timeframe is None:
            raise QueryError(f"invalid timeframe: {query.get('timeframe', '')}")
        if query.get("feed", "sip") not in ("sip", "iex"):
            raise QueryError(f"invalid feed: {query['feed']}")
        try:
            limit = int(query.get("limit", "1000"))
        except ValueError:
            raise QueryError("invalid limit") from None
        if not 1 <= limit <= 10_000:
            raise QueryError("invalid limit: must be between 1 and 10000")
        start = _parse_time(query.get("start", "1970-01-01"), end=False)
        end = _parse_time(query.get("end", "2100-01-01"), end=True)
        descending = query.get("sort", "asc") == "desc"
        rows = list(self._matching(timeframe, sorted(set(symbols)), start, end, descending))
        if "page_token" in query:
            after = _untoken(query["page_token"])
            rows = [r for r in rows if _comes_after(r[0], r[1], after, descending)]
        page, rest = rows[:limit], rows[limit:]
        bars: dict[str, list[Bar]] = {}
        for symbol, _, bar in page:
            bars.setdefault(symbol, []).append(bar)
        token = _token(page[-1][0], page[-1][1]) if rest else None
        return {"bars": bars, "next_page_token": token}

    def _matching(
        self, timeframe: str, symbols: list[str], start: datetime, end: datetime, descending: bool
    ) -> Iterator[tuple[str, datetime, Bar]]:
        for symbol in symbols:
            bars = self.data[timeframe].get(symbol, [])
            timed = [(datetime.fromisoformat(b["t"].replace("Z", "+00:00")), b) for b in bars]
            selected = [(symbol, ts, b) for ts, b in timed if start <= ts <= end]
            yield from (reversed(selected) if descending else selected)


def _comes_after(symbol: str, ts: datetime, after: tuple[str, datetime], descending: bool) -> bool:
    if symbol != after[0]:
        return symbol > after[0]
    return ts < after[1] if descending else ts > after[1]


def _handler_for(standin: AlpacaStandin) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _handle(self, method: str) -> None:
            parts = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
            if method == "GET" and not AlpacaTrading.serves(parts.path):
                status, body, delay_s = standin.answer(parts.path, query, self.headers)
            else:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    sent = json.loads(raw) if raw else None
                except ValueError:
                    sent = raw.decode(errors="replace")
                status, body, delay_s = standin.trade(method, parts.path, query, self.headers, sent)
            if delay_s:
                threading.Event().wait(delay_s)
            payload = b"" if body is None else json.dumps(body).encode()
            try:
                self.send_response(status)
                if body is not None:
                    self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a timeout test)

        def do_GET(self) -> None:  # noqa: N802 (http.server's names)
            self._handle("GET")

        def do_POST(self) -> None:  # noqa: N802
            self._handle("POST")

        def do_DELETE(self) -> None:  # noqa: N802
            self._handle("DELETE")

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass  # keep test output quiet

    return Handler
