"""A local paper broker: an account of cash and whole-share positions in a JSON file.

It is in-process and persists between runs under ``data/broker/``, so nightly deliveries
accumulate like a real paper account. Its surface (account, positions, submit orders)
mirrors what an Alpaca-style HTTP broker offers, so delivery can swap one for the other.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tasks.errors import DataError


@dataclass(frozen=True)
class Order:
    symbol: str
    side: Literal["buy", "sell"]
    qty: int


@dataclass(frozen=True)
class Fill:
    symbol: str
    side: Literal["buy", "sell"]
    qty: int
    price: float
    cost: float
    status: Literal["filled", "rejected"]


class PaperBroker:
    """Fills market orders at the given prices, charging ``cost_pct`` of notional."""

    def __init__(self, path: Path, initial_cash: float, cost_pct: float) -> None:
        self.path, self.cost_pct = path, cost_pct
        if path.exists():
            try:
                state = json.loads(path.read_text())
                self.cash = float(state["cash"])
                self.positions = {str(k): int(v) for k, v in state["positions"].items()}
            except (ValueError, KeyError, TypeError):
                raise DataError(f"{path}: not a paper-broker account file") from None
        else:
            self.cash, self.positions = float(initial_cash), {}

    def equity(self, prices: dict[str, float]) -> float:
        return self.cash + sum(q * prices[s] for s, q in self.positions.items() if q)

    def submit(self, orders: list[Order], prices: dict[str, float]) -> list[Fill]:
        """Execute sells, then buys; reject a sell beyond the position or a buy beyond cash."""
        fills = []
        for order in sorted(orders, key=lambda o: o.side != "sell"):
            price = prices[order.symbol]
            notional = order.qty * price
            cost = notional * self.cost_pct
            held = self.positions.get(order.symbol, 0)
            if order.side == "sell" and order.qty <= held:
                self.positions[order.symbol] = held - order.qty
                self.cash += notional - cost
            elif order.side == "buy" and notional + cost <= self.cash:
                self.positions[order.symbol] = held + order.qty
                self.cash -= notional + cost
            else:
                fills.append(Fill(order.symbol, order.side, order.qty, price, 0.0, "rejected"))
                continue
            fills.append(Fill(order.symbol, order.side, order.qty, price, cost, "filled"))
        self._save()
        return fills

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        positions = {s: q for s, q in sorted(self.positions.items()) if q}
        tmp.write_text(json.dumps({"cash": self.cash, "positions": positions}, indent=1))
        os.replace(tmp, self.path)

