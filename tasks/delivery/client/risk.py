"""Pre-trade risk checks of the trading loop (NautilusTrader's order path: policy → risk → broker).

Each check is configured in ``params.yaml`` (``trade.risk``). An order that fails a check
is not sent and the cycle records why; the daily loss limit halts the loop instead, and
``podracer trade --halt`` is the kill switch it obeys (a halt file beside the ledger).

The kill switch (``HALT``) stops every account. A shadow's own daily loss halts the shadow
only (``HALT-shadow``): a model on trial must not stop the champion (docs/delivery.md).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from tasks.config_ops import RiskParams
from tasks.delivery.keys import CHAMPION, ROLES, role_path

HALT_FILE = "HALT"


@dataclass(frozen=True)
class PlannedOrder:
    """One order a cycle means to send: whole shares, with its deterministic client order id."""

    symbol: str
    side: str
    qty: int
    client_order_id: str

    def as_dict(self) -> dict[str, Any]:
        return {"symbol": self.symbol, "side": self.side, "qty": self.qty, "client_order_id": self.client_order_id}


def check_orders(orders: list[PlannedOrder], prices: dict[str, float], held: dict[str, int], equity: float,
                 limits: RiskParams) -> tuple[list[PlannedOrder], list[dict[str, Any]]]:
    """Split ``orders`` into those that pass every check and those blocked, each with its reason.

    ``prices`` are the last closes the policy saw; a position's weight after a buy is its
    value at that price over the account's ``equity``. Sells only reduce risk and pass the
    weight check; the order cap applies to both sides. A cap below ``max_position_weight`` x
    ``equity`` (an account grown past the one the cap was sized for) says so in its reason,
    since the loop never splits an order and such a cap blocks what the weight allows. What
    cannot be checked fails closed: an order whose notional is not a finite number, and a buy
    while the equity is not a positive one.
    """
    passed, blocked = [], []
    for order in orders:
        price = prices[order.symbol]
        notional = order.qty * price
        reason = None
        if not math.isfinite(notional):
            reason = f"order notional {notional} (last close {price}) is not a number: it cannot be checked"
        elif notional > limits.max_order_notional:
            reason = f"order notional {notional:,.0f} > max_order_notional {limits.max_order_notional:,.0f}"
            room = limits.max_position_weight * equity
            if room > limits.max_order_notional:
                reason += (f", below max_position_weight x equity = {room:,.0f}: orders are never split, so the cap "
                           "blocks trades the weight allows (docs/delivery.md, risk checks)")
        elif order.side == "buy" and not (math.isfinite(equity) and equity > 0):
            reason = f"account equity {equity:,.2f} is not positive: a buy's weight cannot be checked"
        elif order.side == "buy":
            weight = (held.get(order.symbol, 0) + order.qty) * price / equity
            if weight > limits.max_position_weight:
                reason = f"position weight {weight:.1%} > max_position_weight {limits.max_position_weight:.1%}"
        if reason is None:
            passed.append(order)
        else:
            blocked.append({**order.as_dict(), "reason": reason})
    return passed, blocked


def daily_loss(equity: float, last_equity: float, limits: RiskParams) -> str | None:
    """The reason to halt when equity fell more than ``daily_loss_limit`` below the previous close,
    or when either is not a finite number (the loss cannot be checked: fail closed)."""
    if not (math.isfinite(equity) and math.isfinite(last_equity)):
        return (f"account equity {equity} or previous close {last_equity} is not a number: the daily loss cannot be "
                "checked")
    if last_equity > 0 and equity < last_equity * (1.0 - limits.daily_loss_limit):
        return (f"daily loss {1.0 - equity / last_equity:.1%} exceeds daily_loss_limit {limits.daily_loss_limit:.1%} "
                f"(equity {equity:,.2f}, previous close {last_equity:,.2f})")
    return None


def halt(folder: Path, reason: str, role: str = CHAMPION) -> Path:
    """Set the kill switch (the champion's: every cycle of every account refuses to trade until
    :func:`unhalt`), or another role's halt (that role's cycles only)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = role_path(folder / HALT_FILE, role)
    path.write_text(json.dumps({"reason": reason, "at": datetime.now(timezone.utc).isoformat()}))
    return path


def unhalt(folder: Path) -> bool:
    """Clear the kill switch and every role's halt; False if none was set."""
    paths = [role_path(folder / HALT_FILE, role) for role in ROLES]
    existed = any(p.exists() for p in paths)
    for path in paths:
        path.unlink(missing_ok=True)
    return existed


def halted(folder: Path, role: str = CHAMPION) -> str | None:
    """Why ``role``'s trading is halted (the kill switch, or its own halt), or None."""
    for path in dict.fromkeys((folder / HALT_FILE, role_path(folder / HALT_FILE, role))):
        if path.exists():
            try:
                return str(json.loads(path.read_text())["reason"])
            except (ValueError, KeyError, TypeError):
                return "halted (unreadable halt file)"
    return None
