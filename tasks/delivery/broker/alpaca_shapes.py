"""Alpaca's order, position and account shapes, and the checks an order request must pass.

Requests arrive as alpaca-py sends them (docs/delivery.md): ``qty`` and ``limit_price`` as
numbers or strings, unset keys omitted. Responses carry every field the SDK's models
require, money as strings (each float written so that ``float()`` reads back the same
number, which keeps the trading loop's state bit-identical to the env's), ids as UUIDs.
"""

from __future__ import annotations

import math
import re
import uuid
from dataclasses import dataclass
from typing import Any

TYPES = ("market", "limit")
TIME_IN_FORCE = ("day", "gtc", "opg", "cls")
SIDES = ("buy", "sell")
CLIENT_ID = re.compile(r"[\x21-\x7e]{1,128}")
"""A client order id: 1 to 128 printable ASCII characters, no spaces."""
MAX_QTY = 10_000_000


class BrokerError(Exception):
    """An answer other than success: HTTP status, Alpaca's error code and a one-line message."""

    def __init__(self, status: int, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.status, self.message = status, message
        self.code = code if code is not None else {401: 40110000, 403: 40310000, 404: 40410000,
                                                   500: 50010000}.get(status, 40010001)


def unprocessable(message: str) -> BrokerError:
    return BrokerError(422, message, 40010001)


@dataclass(frozen=True)
class OrderRequest:
    symbol: str
    qty: int
    side: str
    type: str
    time_in_force: str
    limit_price: float | None
    client_order_id: str


def _number(body: dict[str, Any], key: str) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise unprocessable(f"{key} must be a number")
    try:
        number = float(value)
    except OverflowError:  # an integer beyond a float's range: infinite, as the same digits as text read
        number = math.inf
    except ValueError:
        raise unprocessable(f"{key} must be a number, not {str(value)[:32]!r}") from None
    if not math.isfinite(number):
        raise unprocessable(f"{key} must be finite")
    return number


def _choice(body: dict[str, Any], key: str, allowed: tuple[str, ...], default: str | None = None) -> str:
    value = body.get(key, default)
    if value is None:
        raise unprocessable(f"{key} is required")
    if not isinstance(value, str) or value.lower() not in allowed:
        raise unprocessable(f"{key} must be one of {', '.join(allowed)} (got {str(value)[:32]!r})")
    return value.lower()


def parse_order(body: Any, symbols: list[str]) -> OrderRequest:
    """Check an order request as Alpaca would; a :class:`BrokerError` (422) names the first problem."""
    if not isinstance(body, dict):
        raise unprocessable("the request body must be a JSON object")
    symbol = body.get("symbol")
    if not isinstance(symbol, str) or not symbol:
        raise unprocessable("symbol is required")
    if symbol.upper() not in symbols:
        raise unprocessable(f'asset "{symbol[:32]}" not found')
    qty, notional = _number(body, "qty"), _number(body, "notional")
    if qty is not None and notional is not None:
        raise unprocessable("qty and notional cannot both be set")
    if notional is not None:
        raise unprocessable("notional orders are not supported: this broker trades whole shares (use qty)")
    if qty is None:
        raise unprocessable("qty is required")
    if qty <= 0:
        raise unprocessable(f"qty must be > 0 (got {qty:g})")
    if qty != int(qty):
        raise unprocessable(f"fractional orders are not supported: qty must be a whole number (got {qty:g})")
    if qty > MAX_QTY:
        raise unprocessable(f"qty must be at most {MAX_QTY:,}")
    side = _choice(body, "side", SIDES)
    kind = _choice(body, "type", TYPES, default="market")
    tif = _choice(body, "time_in_force", TIME_IN_FORCE)
    limit = _number(body, "limit_price")
    if kind == "limit" and (limit is None or limit <= 0):
        raise unprocessable("limit orders need a limit_price > 0")
    if kind == "market" and limit is not None:
        raise unprocessable("market orders take no limit_price")
    if body.get("stop_price") is not None or body.get("order_class") not in (None, "simple", ""):
        raise unprocessable("only simple market and limit orders are supported")
    if body.get("extended_hours") not in (None, False, "false", "False"):
        raise unprocessable("extended hours orders are not supported")
    client_id = body.get("client_order_id")
    if client_id is None:
        client_id = str(uuid.uuid4())
    elif not isinstance(client_id, str) or not CLIENT_ID.fullmatch(client_id):
        raise unprocessable("client_order_id must be 1 to 128 printable characters without spaces")
    return OrderRequest(symbol.upper(), int(qty), side, kind, tif, limit, client_id)


def money(value: float | None) -> str | None:
    """A money field: the float's shortest exact decimal, so ``float(money(x)) == x``."""
    return None if value is None else repr(float(value))


def asset_id(symbol: str) -> str:
    """A stable UUID per symbol (the same in every broker database)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"podracer:asset:{symbol}"))


def order_json(row: dict[str, Any]) -> dict[str, Any]:
    """An ``orders`` row in Alpaca's Order shape."""
    return {
        "id": row["id"], "client_order_id": row["client_order_id"], "created_at": row["created_at"],
        "updated_at": row["updated_at"], "submitted_at": row["submitted_at"], "filled_at": row["filled_at"],
        "expired_at": row["expired_at"], "expires_at": None, "canceled_at": row["canceled_at"], "failed_at": None,
        "replaced_at": None, "replaced_by": None, "replaces": None, "asset_id": asset_id(row["symbol"]),
        "symbol": row["symbol"], "asset_class": "us_equity", "notional": None, "qty": str(row["qty"]),
        "filled_qty": str(row["filled_qty"]), "filled_avg_price": money(row["filled_avg_price"]),
        "order_class": "simple", "order_type": row["type"], "type": row["type"], "side": row["side"],
        "time_in_force": row["time_in_force"], "limit_price": money(row["limit_price"]), "stop_price": None,
        "status": row["status"], "extended_hours": False, "legs": None, "trail_percent": None, "trail_price": None,
        "hwm": None, "position_intent": "buy_to_open" if row["side"] == "buy" else "sell_to_close",
    }


def position_json(symbol: str, qty: int, cost_basis: float, price: float, last_close: float) -> dict[str, Any]:
    """A long position in Alpaca's Position shape, valued at ``price``."""
    value = qty * price
    return {
        "asset_id": asset_id(symbol), "symbol": symbol, "exchange": "NYSE", "asset_class": "us_equity",
        "asset_marginable": False, "qty": str(qty), "qty_available": str(qty), "side": "long",
        "avg_entry_price": money(cost_basis / qty), "cost_basis": money(cost_basis), "market_value": money(value),
        "unrealized_pl": money(value - cost_basis), "unrealized_plpc": money(value / cost_basis - 1.0),
        "unrealized_intraday_pl": money(qty * (price - last_close)),
        "unrealized_intraday_plpc": money(price / last_close - 1.0), "current_price": money(price),
        "lastday_price": money(last_close), "change_today": money(price / last_close - 1.0),
    }


def asset_json(symbol: str) -> dict[str, Any]:
    return {"id": asset_id(symbol), "class": "us_equity", "exchange": "NYSE", "symbol": symbol,
            "name": f"{symbol} (podracer paper market)", "status": "active", "tradable": True,
            "marginable": False, "shortable": False, "easy_to_borrow": False, "fractionable": False,
            "attributes": []}
