"""The trading half of the Alpaca stand-in: the Trading API v2 paths alpaca-py's ``TradingClient`` uses.

:class:`tests.standins.alpaca_server.AlpacaStandin` serves these next to the market-data
path, on the same port. Every answer is a **recorded Alpaca response** from
``tests/standins/data/alpaca_trading/`` (where each came from is in its README.md), copied
and filled in with the request's own values:

- ``GET /v2/account`` the recorded account (tests may change its money fields in
  :attr:`AlpacaTrading.account`); ``GET /v2/positions`` the positions added with
  :meth:`AlpacaTrading.hold`, each a recorded position with its symbol, qty and prices
  filled in (none by default, like a new paper account); ``GET /v2/clock`` the recorded
  closed clock, or the open one with :attr:`AlpacaTrading.market_open`;
- ``POST /v2/orders`` a copy of the recorded order with the request's symbol, qty, side,
  type, time in force and client order id, a new id and the time now. It is ``accepted``
  while the clock is closed (queued for the next open, as Alpaca does) and ``new`` while
  open. A ``client_order_id`` the stand-in has seen before is refused with 422
  ``{"code": 40010001, "message": "client_order_id must be unique"}``, even after a cancel;
- ``GET /v2/orders`` (``status`` open/closed/all, ``limit``, ``direction``, ``symbols``),
  ``GET /v2/orders/{id}``, ``GET /v2/orders:by_client_order_id``: the orders it was sent,
  kept in memory. An order whose symbol is in :attr:`AlpacaTrading.fills` is filled at
  that price the next time it is read by id;
- ``DELETE /v2/orders/{id}`` 204, ``DELETE /v2/orders`` 207 with ``[{"id", "status"}]``.

Every request needs both ``APCA-API-KEY-ID`` and ``APCA-API-SECRET-KEY`` with the stand-in's
keys (401 ``{"code": 40110000, ...}`` otherwise), and every request, refused or not, is kept
in :attr:`AlpacaTrading.calls` for tests to inspect.
"""

from __future__ import annotations

import copy
import json
import threading
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.message import Message
from pathlib import Path
from typing import Any

DATA = Path(__file__).with_name("data") / "alpaca_trading"
PATHS = ("/v2/account", "/v2/positions", "/v2/orders", "/v2/clock")
CLOSED = ("filled", "canceled", "expired", "replaced", "rejected")
"""Alpaca's final order statuses; every other status is open (``status=open`` lists it)."""
SIDES, TYPES = ("buy", "sell"), ("market", "limit", "stop", "stop_limit", "trailing_stop")
TIME_IN_FORCE = ("day", "gtc", "opg", "cls", "ioc", "fok")


def recorded(name: str) -> Any:
    """A fresh copy of the recorded response ``name`` (a file of ``DATA``)."""
    return json.loads((DATA / f"{name}.json").read_text())


ERRORS: dict[str, dict[str, Any]] = recorded("errors")


def now() -> str:
    """The time now the way Alpaca writes order times: ``2021-03-16T18:38:01.942282Z``."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def decimal(value: float) -> str:
    """A number as Alpaca writes it in a string field: ``"99"``, ``"101.25"``."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def asset_id(symbol: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"alpaca-standin:asset:{symbol}"))


@dataclass
class Call:
    """One request as the stand-in received it, and the status it answered."""

    method: str
    path: str
    query: dict[str, str]
    body: Any
    key_id: str | None
    secret_key: str | None = field(repr=False)  # never in a test report
    status: int | None = None


class Refusal(Exception):
    """An answer other than success: HTTP ``status`` with Alpaca's error ``body``."""

    def __init__(self, name: str, message: str | None = None) -> None:
        error = ERRORS[name]
        self.status, self.body = error["status"], dict(error["body"])
        if message is not None:
            self.body["message"] = message
        super().__init__(self.body["message"])


def unprocessable(message: str) -> Refusal:
    return Refusal("bad_parameter", message)


class AlpacaTrading:
    """One paper account's state and the Trading API answers for it (thread-safe)."""

    def __init__(self, key_id: str, secret_key: str) -> None:
        self.key_id, self.secret_key = key_id, secret_key
        self.account: dict[str, Any] = recorded("account")
        self.positions: list[dict[str, Any]] = []
        self.orders: dict[str, dict[str, Any]] = {}  # by id, in the order they were sent
        self.market_open = False
        self.fills: dict[str, float] = {}
        self.calls: list[Call] = []
        self._lock = threading.Lock()

    @staticmethod
    def serves(path: str) -> bool:
        return any(path == p or path.startswith((p + "/", p + ":")) for p in PATHS)

    def hold(self, symbol: str, qty: int, price: float, entry_price: float | None = None) -> dict[str, Any]:
        """Add a long position: the recorded position with this symbol, quantity and prices."""
        entry = price if entry_price is None else entry_price
        position = recorded("position")
        position.update(asset_id=asset_id(symbol), symbol=symbol, qty=decimal(qty), qty_available=decimal(qty),
                        avg_entry_price=decimal(entry), cost_basis=decimal(qty * entry),
                        market_value=decimal(qty * price), current_price=decimal(price),
                        unrealized_pl=decimal(qty * (price - entry)), unrealized_plpc=decimal(price / entry - 1))
        with self._lock:
            self.positions.append(position)
        return position

    # --- requests ----------------------------------------------------------------------
    def record(self, method: str, path: str, query: dict[str, str], headers: Message, body: Any) -> Call:
        call = Call(method, path, dict(query), body, headers.get("APCA-API-KEY-ID"), headers.get("APCA-API-SECRET-KEY"))
        with self._lock:
            self.calls.append(call)
        return call

    def answer(self, call: Call) -> tuple[int, Any]:
        """Status and JSON body (None: no body) for one recorded request."""
        if (call.key_id, call.secret_key) != (self.key_id, self.secret_key):
            error = ERRORS["unauthorized"]
            call.status = error["status"]
            return error["status"], dict(error["body"])
        try:
            with self._lock:
                status, body = self._route(call)
        except Refusal as refusal:
            status, body = refusal.status, refusal.body
        call.status = status
        return status, body

    def _route(self, call: Call) -> tuple[int, Any]:
        method, path, query = call.method, call.path, call.query
        if (method, path) == ("GET", "/v2/account"):
            return 200, copy.deepcopy(self.account)
        if (method, path) == ("GET", "/v2/positions"):
            return 200, copy.deepcopy(self.positions)
        if (method, path) == ("GET", "/v2/clock"):
            return 200, recorded("clock_open" if self.market_open else "clock_closed")
        if (method, path) == ("POST", "/v2/orders"):
            return 200, self._submit(call.body)
        if (method, path) == ("GET", "/v2/orders"):
            return 200, self._list(query)
        if (method, path) == ("GET", "/v2/orders:by_client_order_id"):
            found = [o for o in self.orders.values() if o["client_order_id"] == query.get("client_order_id")]
            if not found:
                raise Refusal("order_not_found")
            return 200, copy.deepcopy(found[0])
        if (method, path) == ("DELETE", "/v2/orders"):
            out = []
            for order in self.orders.values():
                if order["status"] not in CLOSED:
                    self._set(order, status="canceled", canceled_at=now())
                    out.append({**recorded("cancel_orders")[0], "id": order["id"]})
            return 207, out
        if path.startswith("/v2/orders/") and method in ("GET", "DELETE"):
            order = self._order(path.removeprefix("/v2/orders/"))
            if method == "GET":
                if order["symbol"] in self.fills and order["status"] not in CLOSED:
                    price = self.fills[order["symbol"]]
                    self._set(order, status="filled", filled_qty=order["qty"], filled_avg_price=decimal(price),
                              filled_at=now())
                return 200, copy.deepcopy(order)
            if order["status"] in CLOSED:
                raise Refusal("not_cancelable", f'order is already in "{order["status"]}" state')
            self._set(order, status="canceled", canceled_at=now())
            return 204, None
        return 404, {"message": "Not Found"}

    def _submit(self, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise unprocessable("request body format is invalid")
        symbol, side = body.get("symbol"), body.get("side")
        kind, tif = body.get("type", "market"), body.get("time_in_force")
        if not isinstance(symbol, str) or not symbol:
            raise unprocessable("symbol is required")
        if side not in SIDES or kind not in TYPES or tif not in TIME_IN_FORCE:
            raise unprocessable(f"invalid side, type or time_in_force: {side!r}, {kind!r}, {tif!r}")
        try:
            qty = float(body["qty"])
        except (KeyError, TypeError, ValueError):
            raise unprocessable("qty is required and must be a number") from None
        if qty <= 0:
            raise unprocessable("qty must be > 0")
        client_id = body.get("client_order_id") or str(uuid.uuid4())
        if not isinstance(client_id, str) or len(client_id) > 128:
            raise unprocessable("client_order_id must be at most 128 characters")
        if any(o["client_order_id"] == client_id for o in self.orders.values()):
            raise Refusal("duplicate_client_order_id")
        at = now()
        order = recorded("order")
        order.update(id=str(uuid.uuid4()), client_order_id=client_id, created_at=at, updated_at=at, submitted_at=at,
                     asset_id=asset_id(symbol.upper()), symbol=symbol.upper(), notional=None, qty=decimal(qty),
                     order_type=kind, type=kind, side=side, time_in_force=tif,
                     limit_price=None if body.get("limit_price") is None else decimal(float(body["limit_price"])),
                     status="new" if self.market_open else "accepted")
        self.orders[order["id"]] = order
        return copy.deepcopy(order)

    def _list(self, query: dict[str, str]) -> list[dict[str, Any]]:
        status = query.get("status", "open")
        if status not in ("open", "closed", "all"):
            raise unprocessable(f"invalid status: {status}")
        try:
            limit = int(query.get("limit", "50"))
        except ValueError:
            raise unprocessable("invalid limit") from None
        if not 1 <= limit <= 500:
            raise unprocessable("limit must be between 1 and 500")
        symbols = {s for s in query.get("symbols", "").split(",") if s}
        orders = [o for o in self.orders.values() if status == "all" or (o["status"] in CLOSED) == (status == "closed")]
        orders = [o for o in orders if not symbols or o["symbol"] in symbols]
        if query.get("direction", "desc") == "desc":
            orders.reverse()
        return copy.deepcopy(orders[:limit])

    def _order(self, order_id: str) -> dict[str, Any]:
        try:
            uuid.UUID(order_id)
        except ValueError:
            raise Refusal("invalid_order_id") from None
        if order_id not in self.orders:
            raise Refusal("order_not_found")
        return self.orders[order_id]

    @staticmethod
    def _set(order: dict[str, Any], **fields: Any) -> None:
        order.update(fields, updated_at=now())
