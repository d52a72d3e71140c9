"""The clock's events on the paper account's books: what a bar's open and its close do to the orders.

The paper broker (``tasks/delivery/broker/paper.py``) moves its clock one event at a time,
each inside one ledger transaction; these two functions are those events. At an open, the
last session's close becomes ``last_equity`` (a session's first bar) and the queued orders
fill at the open in one batch by the env's rule (``tasks/delivery/broker/fills.py``); at a
close, resting limits the bar traded through fill at their limit, and at the session's close
``cls`` orders fill and ``day`` orders expire. A symbol without a real bar in the bar fills
nothing (docs/data.md, Ragged universes; docs/delivery.md, where this differs from Alpaca).
"""

from __future__ import annotations

import sqlite3

import numpy as np

from tasks.delivery.broker.clock import Calendar, iso
from tasks.delivery.broker.feed import Feed
from tasks.delivery.broker.fills import fill_batch, marketable, touched
from tasks.delivery.broker.ledger import Ledger


def holdings_value(db: sqlite3.Connection, feed: Feed, prices: np.ndarray) -> float:
    """The account's positions marked at ``prices`` (one per feed column)."""
    rows = db.execute("SELECT symbol, qty FROM positions WHERE qty > 0 ORDER BY symbol").fetchall()
    return float(sum(r["qty"] * prices[feed.column(r["symbol"])] for r in rows))


def open_event(ledger: Ledger, db: sqlite3.Connection, feed: Feed, bar: int, calendar: Calendar) -> None:
    """The bar opens: at a session's first bar, the last session's close becomes ``last_equity``;
    queued orders fill at the open, except those for a symbol without a real bar in this bar
    (they stay open)."""
    day, at = feed.day(bar).isoformat(), iso(feed.instants(bar, calendar)[0])
    account = dict(db.execute("SELECT cash, cost_pct FROM account").fetchone())
    if feed.session_start(bar) == bar:
        equity = account["cash"] + holdings_value(db, feed, feed.close[bar - 1])
        db.execute("UPDATE account SET last_equity = ?", (equity,))
    orders = ledger.open_orders(db)
    batch = [o for o in orders if o["time_in_force"] != "cls" and feed.trades(bar, o["symbol"])
             and marketable(o, feed.open[bar, feed.column(o["symbol"])])]
    fill_batch(db, batch, feed.symbols, feed.open[bar], account["cash"], account["cost_pct"], day, at)
    filled = {o["id"] for o in batch}
    for order in orders:
        if order["time_in_force"] == "opg" and order["id"] not in filled:
            Ledger.update_order(db, order["id"], status="canceled", canceled_at=at, updated_at=at)
    Ledger.set_clock(db, feed.key(bar), "open")


def close_event(ledger: Ledger, db: sqlite3.Connection, feed: Feed, bar: int, calendar: Calendar) -> None:
    """The bar closes: resting limits it traded through fill at their limit. At the session's
    close (every daily bar; a session's last minute bar) ``cls`` orders fill at the close and
    what is left of ``day`` orders expires. A symbol without a real bar here fills nothing:
    its ``cls`` orders are canceled."""
    day, at = feed.day(bar).isoformat(), iso(feed.instants(bar, calendar)[1])
    last = feed.closes_session(bar, calendar)
    cost_pct = db.execute("SELECT cost_pct FROM account").fetchone()["cost_pct"]
    cash = db.execute("SELECT cash FROM account").fetchone()["cash"]
    orders = ledger.open_orders(db)
    if last:
        on_close = [o for o in orders if o["time_in_force"] == "cls" and feed.trades(bar, o["symbol"])]
        cash = fill_batch(db, on_close, feed.symbols, feed.close[bar], cash, cost_pct, day, at)
        for order in orders:
            if order["time_in_force"] == "cls" and not feed.trades(bar, order["symbol"]):
                Ledger.update_order(db, order["id"], status="canceled", canceled_at=at, updated_at=at)
    for order in orders:
        j = feed.column(order["symbol"])
        if order["type"] == "limit" and order["time_in_force"] != "cls" and feed.real[bar, j] \
                and touched(order, feed.low[bar, j], feed.high[bar, j]):
            prices = feed.close[bar].copy()
            prices[j] = order["limit_price"]
            cash = fill_batch(db, [order], feed.symbols, prices, cash, cost_pct, day, at)
    for order in ledger.open_orders(db) if last else ():
        if order["time_in_force"] == "day":
            Ledger.update_order(db, order["id"], status="expired", expired_at=at, updated_at=at)
    Ledger.set_clock(db, feed.key(bar), "close")
