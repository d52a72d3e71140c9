"""How the local broker fills orders: in batches, by the training env's own rule.

Orders queued for an open (market orders placed while the market was closed, marketable
limits, ``opg``) fill there as one batch through :func:`trainers.common.orders.fill_orders`: sells
first, then buys, scaled down pro rata with whole shares when the cash is short, with
``cost_pct`` of each notional charged. ``cls`` orders fill the same way at the close.
The batch is laid out over the feed's symbols in the feed's order, the order the env
sums them in, so the broker's cash is the env's cash to the last bit (docs/delivery.md, Parity).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from tasks.delivery.broker.ledger import FillRow, Ledger
from trainers.common.orders import fill_orders


def remaining(order: dict[str, Any]) -> int:
    return int(order["qty"]) - int(order["filled_qty"])


def fill_batch(db: sqlite3.Connection, orders: Sequence[dict[str, Any]], symbols: list[str], prices: np.ndarray,
               cash: float, cost_pct: float, day: str, at: str) -> float:
    """Fill ``orders`` at ``prices`` (one per feed symbol) as one batch; return the new cash.

    Each order gets its share of its symbol's filled quantity in submission order; an
    order that fills completely is ``filled``. The rest of a scaled-down buy cannot fill
    at this event and is ``canceled`` (with ``filled_qty`` telling how much did fill).
    """
    column = {s: j for j, s in enumerate(symbols)}
    held = {r["symbol"]: int(r["qty"]) for r in db.execute("SELECT symbol, qty FROM positions").fetchall()}
    shares = np.array([held.get(s, 0) for s in symbols], dtype=np.float64)
    sold, bought = np.zeros(len(symbols)), np.zeros(len(symbols))
    for order in orders:
        (sold if order["side"] == "sell" else bought)[column[order["symbol"]]] += remaining(order)
    sold = np.minimum(sold, shares)
    result = fill_orders(*(torch.as_tensor(a, dtype=torch.float64).unsqueeze(0) for a in (sold, bought)),
                         torch.tensor([cash], dtype=torch.float64), torch.as_tensor(shares).unsqueeze(0),
                         torch.as_tensor(prices, dtype=torch.float64).unsqueeze(0), cost_pct)
    left = {"sell": result.sold[0].numpy().copy(), "buy": result.bought[0].numpy().copy()}
    for order in orders:
        j = column[order["symbol"]]
        price = float(prices[j])
        qty = int(min(remaining(order), left[order["side"]][j]))
        left[order["side"]][j] -= qty
        if qty:
            Ledger.book_fill(db, FillRow(order["id"], order["symbol"], order["side"], qty, price,
                                         qty * price * cost_pct), day, at)
        done = qty == remaining(order)
        Ledger.update_order(db, order["id"], status="filled" if done else "canceled", updated_at=at,
                            **({} if done else {"canceled_at": at}))
    new_cash = float(result.cash[0])
    Ledger.set_cash(db, new_cash)
    return new_cash


def marketable(order: dict[str, Any], price: float) -> bool:
    """A market order always; a limit order when ``price`` is at or better than its limit."""
    if order["type"] == "market":
        return True
    return price <= order["limit_price"] if order["side"] == "buy" else price >= order["limit_price"]


def touched(order: dict[str, Any], low: float, high: float) -> bool:
    """Did the session trade through a resting limit order's price?"""
    return low <= order["limit_price"] if order["side"] == "buy" else high >= order["limit_price"]
