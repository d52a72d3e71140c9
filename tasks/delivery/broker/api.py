"""HTTP for the local paper broker: Alpaca's Trading API v2 paths, answered by :class:`PaperBroker`.

``alpaca-py``'s ``TradingClient(key, secret, url_override="http://127.0.0.1:PORT")``
drives it unmodified (the paths and fields of docs/delivery.md). Every endpoint needs the
two ``APCA-API-*`` headers of one of the broker's accounts (401 ``40110000`` otherwise), and
answers from that account alone (:mod:`tasks.delivery.broker.accounts`); errors are JSON
``{"code", "message"}``, never 429 or 504 (the SDK would sleep and retry those). One path is
podracer's own: advancing a simulated clock, which moves every account.
"""

from __future__ import annotations

import json
from datetime import date, datetime, timezone
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from tasks.delivery.broker.accounts import Exchange
from tasks.delivery.broker.alpaca_shapes import BrokerError, asset_json
from tasks.delivery.broker.paper import PaperBroker
from tasks.errors import PodracerError

MAX_BODY = 64 * 1024
"""Larger request bodies get 413: no order needs more."""


def answer(body: Any, status: int = 200) -> Response:
    return Response(json.dumps(body), status_code=status, media_type="application/json")


def error(status: int, message: str, code: int) -> Response:
    return answer({"code": code, "message": message}, status)


async def read_json(request: Request) -> Any:
    raw = await request.body()
    if len(raw) > MAX_BODY:
        raise BrokerError(413, f"request body over {MAX_BODY // 1024} KiB")
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise BrokerError(422, "the request body is not valid JSON") from None


def instant(value: str | None, name: str) -> str | None:
    """An ``after``/``until`` bound (a date or an RFC 3339 time) as the ledger's UTC ISO text."""
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise BrokerError(422, f"{name} must be a date or an RFC 3339 time") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return parsed.astimezone(timezone.utc).isoformat()


CALENDAR_RANGE = (date(1970, 1, 1), date(2099, 12, 31))


def day(value: str | None, name: str, default: date) -> date:
    """A calendar bound: a date between 1970 and 2099 (the span exchange calendars cover)."""
    if value is None:
        return default
    try:
        parsed = date.fromisoformat(value[:10])
    except ValueError:
        raise BrokerError(422, f"{name} must be a date (YYYY-MM-DD)") from None
    if not CALENDAR_RANGE[0] <= parsed <= CALENDAR_RANGE[1]:
        raise BrokerError(422, f"{name} must lie between {CALENDAR_RANGE[0]} and {CALENDAR_RANGE[1]}")
    return parsed


def flag(value: str | None) -> bool:
    return str(value).lower() == "true"


class RequireKeys:
    """ASGI middleware: every HTTP request must carry the two ``APCA-API-*`` headers of one of the
    exchange's accounts; the request is then served by that account (``request.state.account``)."""

    def __init__(self, app: ASGIApp, exchange: Exchange) -> None:
        self.app, self.exchange = app, exchange

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            try:
                account = self.exchange.account(headers.get(b"apca-api-key-id", b""),
                                                headers.get(b"apca-api-secret-key", b""))
            except (BrokerError, PodracerError) as err:  # an account's ledger that cannot open
                await error(500, getattr(err, "message", str(err)), 50010000)(scope, receive, send)
                return
            if account is None:
                await error(401, "request is not authorized", 40110000)(scope, receive, send)
                return
            scope.setdefault("state", {})["account"] = account
        await self.app(scope, receive, send)


def create_app(exchange: Exchange) -> FastAPI:
    """The broker's HTTP service; every route needs the keys of one of ``exchange``'s accounts."""
    app = FastAPI(title="podracer paper broker", docs_url=None, redoc_url=None, openapi_url=None)

    app.add_middleware(RequireKeys, exchange=exchange)

    def of(request: Request) -> PaperBroker:
        """The account the request's keys name."""
        return request.state.account  # type: ignore[no-any-return]

    @app.exception_handler(BrokerError)
    async def broker_error(_: Request, err: BrokerError) -> Response:
        return error(err.status, err.message, err.code)

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, err: HTTPException) -> Response:
        message = {404: "endpoint not found", 405: "method not allowed"}.get(err.status_code, str(err.detail))
        return error(err.status_code, message, 40410000 if err.status_code == 404 else 40010001)

    @app.exception_handler(Exception)
    async def unexpected(_: Request, err: Exception) -> Response:  # never a traceback page
        return error(500, f"internal error ({type(err).__name__})", 50010000)

    @app.exception_handler(RequestValidationError)
    async def bad_parameter(_: Request, err: RequestValidationError) -> Response:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"][1:]) or "request"
        return error(422, f"{where}: {first['msg']}", 40010001)

    @app.get("/v2/account")
    async def account(request: Request) -> Response:
        return answer(of(request).account())

    @app.get("/v2/positions")
    async def positions(request: Request) -> Response:
        return answer(of(request).positions())

    @app.delete("/v2/positions")
    async def close_all(request: Request, cancel_orders: str | None = None) -> Response:
        return answer(of(request).close_all(flag(cancel_orders)), 207)

    @app.get("/v2/positions/{symbol}")
    async def position(request: Request, symbol: str) -> Response:
        return answer(of(request).position(symbol))

    @app.delete("/v2/positions/{symbol}")
    async def close_position(request: Request, symbol: str, qty: str | None = None,
                             percentage: str | None = None) -> Response:
        return answer(of(request).close_position(symbol, qty, percentage))

    @app.post("/v2/orders")
    async def submit(request: Request) -> Response:
        return answer(of(request).submit(await read_json(request)))

    @app.get("/v2/orders")
    async def orders(request: Request, status: str = "open", limit: int = 50, after: str | None = None,
                     until: str | None = None, direction: str = "desc", symbols: str | None = None,
                     nested: str | None = None) -> Response:
        if status not in ("open", "closed", "all"):
            raise BrokerError(422, "status must be one of open, closed, all")
        if direction not in ("asc", "desc"):
            raise BrokerError(422, "direction must be asc or desc")
        if not 1 <= limit <= 500:
            raise BrokerError(422, "limit must be between 1 and 500")
        wanted = [s.strip().upper() for s in symbols.split(",") if s.strip()] if symbols else None
        return answer(of(request).orders(status, limit, instant(after, "after"), instant(until, "until"),
                                         direction, wanted))

    @app.delete("/v2/orders")
    async def cancel_all(request: Request) -> Response:
        return answer(of(request).cancel_all(), 207)

    @app.get("/v2/orders:by_client_order_id")
    async def by_client_id(request: Request, client_order_id: str) -> Response:
        return answer(of(request).order_by_client_id(client_order_id))

    @app.get("/v2/orders/{order_id}")
    async def order(request: Request, order_id: str) -> Response:
        return answer(of(request).order(order_id))

    @app.delete("/v2/orders/{order_id}")
    async def cancel(request: Request, order_id: str) -> Response:
        of(request).cancel(order_id)
        return Response(status_code=204)

    @app.get("/v2/clock")
    async def clock(request: Request) -> Response:
        return answer(of(request).clock())

    market = exchange.main  # the feed, calendar and clock every account shares

    @app.get("/v2/calendar")
    async def calendar(start: str | None = None, end: str | None = None) -> Response:
        feed = market.feed.current()
        first = day(start, "start", feed.day(0))
        last = day(end, "end", feed.day(len(feed) - 1))
        if first > last:
            raise BrokerError(422, "start must not be after end")
        return answer(market.calendar.days(first, last))

    @app.get("/v2/assets")
    async def assets() -> Response:
        return answer([asset_json(s) for s in market.feed.current().symbols])

    @app.get("/v2/assets/{symbol}")
    async def asset(symbol: str) -> Response:
        if symbol.upper() not in market.feed.current().symbols:
            raise BrokerError(404, f"asset not found for {symbol[:32]}")
        return answer(asset_json(symbol.upper()))

    @app.post("/podracer/v1/clock/advance")
    async def advance(to: str = "next") -> Response:
        return answer(exchange.advance(to))

    return app
