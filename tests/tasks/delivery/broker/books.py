"""The ledger as the tests read it: through a read-only connection of their own, never the broker's.

*The books balance* when replaying the ``fills`` table from the initial cash (a buy costs
``qty·price + cost``, a sell brings ``qty·price − cost``) gives the account's cash and
every position to the cent, every fill's cost is ``cost_pct`` of its notional, the cash
lines end at the cash, and every order's ``filled_qty`` is the sum of its fills.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.tasks.delivery.broker.market import KEYS

HEADERS = KEYS.headers()
TABLES = ("account", "clock", "orders", "fills", "positions", "cash_ledger")


def read(db: Path, sql: str, args: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
    """Rows of ``sql`` from the ledger file, through a read-only connection of the test's own."""
    connection = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    connection.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in connection.execute(sql, args).fetchall()]
    finally:
        connection.close()


def snapshot(db: Path) -> dict[str, list[dict[str, Any]]]:
    """Every row of every table the broker keeps: equal snapshots mean nothing changed."""
    return {table: read(db, f"SELECT * FROM {table} ORDER BY rowid") for table in TABLES}


def replay(db: Path) -> tuple[float, dict[str, tuple[int, float]]]:
    """Cash and positions (qty, cost basis) rebuilt from the initial cash and the fills alone."""
    cash = read(db, "SELECT initial_cash FROM account")[0]["initial_cash"]
    held: dict[str, tuple[int, float]] = {}
    for fill in read(db, "SELECT * FROM fills ORDER BY id"):
        notional = fill["qty"] * fill["price"]
        qty, basis = held.get(fill["symbol"], (0, 0.0))
        if fill["side"] == "buy":
            cash -= notional + fill["cost"]
            held[fill["symbol"]] = (qty + fill["qty"], basis + notional)
        else:
            cash += notional - fill["cost"]
            held[fill["symbol"]] = (qty - fill["qty"], basis * (qty - fill["qty"]) / qty)
    return cash, {s: h for s, h in held.items() if h[0] > 0}


def assert_books_balance(db: Path) -> None:
    """The fills replay to the account's cash and positions, to the cent; each fill's cost is
    ``cost_pct`` of its notional; the cash lines end at the cash; each order's ``filled_qty`` is
    its fills' sum."""
    cash, held = replay(db)
    account = read(db, "SELECT cash, cost_pct FROM account")[0]
    assert cash == pytest.approx(account["cash"], abs=0.005), "replaying the fills does not give the cash"
    positions = {r["symbol"]: (r["qty"], r["cost_basis"]) for r in read(db, "SELECT * FROM positions WHERE qty > 0")}
    assert set(positions) == set(held)
    for symbol, (qty, basis) in held.items():
        assert positions[symbol][0] == qty, f"{symbol}: the fills give {qty} shares"
        assert positions[symbol][1] == pytest.approx(basis, abs=0.005), f"{symbol}: the fills give basis {basis}"
    for fill in read(db, "SELECT * FROM fills"):
        assert fill["cost"] == pytest.approx(fill["qty"] * fill["price"] * account["cost_pct"], abs=1e-6)
    lines = read(db, "SELECT balance FROM cash_ledger ORDER BY id DESC LIMIT 1")
    assert lines[0]["balance"] == pytest.approx(account["cash"], abs=0.005), "the cash ledger ends elsewhere"
    assert_fills_match_orders(db)


def assert_fills_match_orders(db: Path) -> None:
    """Every order's ``filled_qty`` is the sum of its fills, and a ``filled`` order filled whole."""
    mismatched = read(db, "SELECT o.id, o.status, o.qty, o.filled_qty, COALESCE(SUM(f.qty), 0) AS booked "
                          "FROM orders o LEFT JOIN fills f ON f.order_id = o.id GROUP BY o.id "
                          "HAVING o.filled_qty != booked OR (o.status = 'filled' AND o.filled_qty != o.qty)")
    assert mismatched == [], f"orders whose fills disagree with them: {mismatched[:5]}"
    orphans = read(db, "SELECT COUNT(*) AS n FROM fills WHERE order_id NOT IN (SELECT id FROM orders)")
    assert orphans[0]["n"] == 0


def assert_error_json(response: requests.Response, status: int | None = None, code: int | None = None) -> None:
    """A 4xx (``status`` if given) whose body is Alpaca's JSON error: an integer code, a string message."""
    assert 400 <= response.status_code < 500, f"{response.status_code}: {response.text[:200]}"
    if status is not None:
        assert response.status_code == status, f"{response.status_code}: {response.text[:200]}"
    body = response.json()
    assert isinstance(body, dict) and isinstance(body.get("code"), int) and not isinstance(body["code"], bool)
    assert isinstance(body.get("message"), str) and body["message"]
    if code is not None:
        assert body["code"] == code, body


def order_body(symbol: str, qty: Any, side: str = "buy", **extra: Any) -> dict[str, Any]:
    """An order request as alpaca-py sends it (``qty`` a float), plus ``extra`` keys."""
    return {"symbol": symbol, "qty": qty, "side": side, "type": "market", "time_in_force": "day", **extra}


def hold(m: Any, holdings: dict[str, int]) -> None:
    """Buy ``holdings``, fill them at the next open and leave the clock at that session's close."""
    for symbol, qty in holdings.items():
        assert m.raw("POST", "/v2/orders", json=order_body(symbol, float(qty))).status_code == 200
    assert m.advance("open").status_code == 200
    assert m.advance("close").status_code == 200
