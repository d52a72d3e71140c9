"""The broker's batch fill on its own books, worked out by hand (docs/delivery.md, Parity).

tests/tasks/delivery/broker/test_paper.py drives the same rule through alpaca-py and the HTTP
API; here one batch is filled straight into a ledger, so that how a symbol's filled quantity
is shared among several orders, and what each order's row says afterwards, are pinned down.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tasks.delivery.broker.fills import fill_batch, marketable, remaining, touched
from tasks.delivery.broker.ledger import Ledger

PLACED, AT = "2024-01-02T21:00:00Z", "2024-01-03T14:30:00Z"


def books(tmp_path: Path, cash: float, orders: list[tuple[str, str, int]], held: dict[str, int]) -> Ledger:
    """A ledger with ``cash``, the positions ``held`` and the market ``orders`` (symbol, side,
    quantity), placed in that order and all queued for the next open."""
    ledger = Ledger(tmp_path / "broker.db")
    ledger.initialise(cash, 0.001, "simulated", "2024-01-02", "close", PLACED)
    with ledger.tx() as db:
        for symbol, qty in held.items():
            db.execute("INSERT INTO positions VALUES (?, ?, ?)", (symbol, qty, 0.0))
        for i, (symbol, side, qty) in enumerate(orders):
            Ledger.insert_order(db, {"id": f"o{i}", "client_order_id": f"c{i}", "symbol": symbol, "side": side,
                                     "type": "market", "time_in_force": "day", "qty": qty, "status": "accepted",
                                     "created_at": PLACED, "updated_at": PLACED, "submitted_at": PLACED})
    return ledger


def fill(ledger: Ledger, prices: list[float]) -> float:
    with ledger.tx() as db:
        return fill_batch(db, ledger.open_orders(db), ["AAA", "BBB"], np.array(prices), ledger.account()["cash"],
                          0.001, "2024-01-03", AT)


def rows(ledger: Ledger) -> list[tuple]:
    return [(o["id"], o["status"], o["filled_qty"], o["filled_at"], o["canceled_at"], o["updated_at"])
            for o in ledger.rows("SELECT * FROM orders ORDER BY seq")]


def test_a_symbols_scaled_down_buys_fill_in_the_order_they_were_placed(tmp_path):
    # three buys of AAA at 10 with 1,000 of cash and 0.1% costs: 121 shares need 1,211.21, so every
    # buy is scaled by 1,000 / 1,211.21 and AAA gets floor(121 · 0.82562) = floor(99.9) = 99 shares;
    # the first order takes its 60, the second the other 39 (the rest canceled), the third none
    ledger = books(tmp_path, 1_000.0, [("AAA", "buy", 60), ("AAA", "buy", 60), ("AAA", "buy", 1)], {})
    cash = fill(ledger, [10.0, 20.0])
    assert cash == pytest.approx(1_000.0 - 990.0 * 1.001, abs=1e-9)  # 9.01
    assert rows(ledger) == [("o0", "filled", 60, AT, None, AT), ("o1", "canceled", 39, AT, AT, AT),
                            ("o2", "canceled", 0, None, AT, AT)]
    assert ledger.positions()["AAA"]["qty"] == 99 and ledger.account()["cash"] == cash


def test_a_symbols_sells_all_fill_and_fund_the_buys(tmp_path):
    # two sells of BBB (held 10) at 20: 160 less 0.16 of costs; then the buy of 10 AAA at 10 needs 100.1
    ledger = books(tmp_path, 0.0, [("BBB", "sell", 4), ("BBB", "sell", 4), ("AAA", "buy", 10)], {"BBB": 10})
    cash = fill(ledger, [10.0, 20.0])
    assert cash == pytest.approx(160.0 - 0.16 - 100.1, abs=1e-9)
    assert [(r[0], r[1], r[2]) for r in rows(ledger)] == [("o0", "filled", 4), ("o1", "filled", 4),
                                                          ("o2", "filled", 10)]
    assert {s: p["qty"] for s, p in ledger.positions().items()} == {"AAA": 10, "BBB": 2}


def test_what_is_left_of_an_order_and_when_a_limit_is_marketable_or_touched():
    assert remaining({"qty": 10, "filled_qty": 3}) == 7
    buy, sell = {"type": "limit", "side": "buy", "limit_price": 10.0}, {"type": "limit", "side": "sell",
                                                                         "limit_price": 10.0}
    assert marketable({"type": "market", "side": "buy"}, 1e9) and marketable({"type": "market", "side": "sell"}, 0.0)
    # a buy limit at or above the price, a sell limit at or below it
    assert [marketable(buy, p) for p in (9.99, 10.0, 10.01)] == [True, True, False]
    assert [marketable(sell, p) for p in (9.99, 10.0, 10.01)] == [False, True, True]
    # a resting buy is touched when the session's low reaches its limit, a sell when the high does
    assert [touched(buy, low, 12.0) for low in (9.99, 10.0, 10.01)] == [True, True, False]
    assert [touched(sell, 8.0, high) for high in (9.99, 10.0, 10.01)] == [False, True, True]
