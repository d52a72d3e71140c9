"""The trading loop's pre-trade risk checks and its halt switches, worked out by hand
(docs/delivery.md, risk checks). tests/tasks/delivery/client/test_loop.py shows the loop obeying
them on a paper broker."""

from __future__ import annotations

import json
from datetime import datetime

from tasks.config_ops import RiskParams
from tasks.delivery.client.risk import HALT_FILE, PlannedOrder, check_orders, daily_loss, halt, halted, unhalt
from tasks.delivery.keys import SHADOW


def test_risk_checks_by_hand():
    limits = RiskParams(max_order_notional=1_000.0, max_position_weight=0.25, daily_loss_limit=0.05)
    orders = [PlannedOrder("A", "buy", 10, "a"), PlannedOrder("B", "buy", 20, "b"), PlannedOrder("C", "sell", 50, "c"),
              PlannedOrder("D", "buy", 5, "d")]
    prices = {"A": 99.0, "B": 60.0, "C": 30.0, "D": 40.0}
    passed, blocked = check_orders(orders, prices, held={"C": 50, "D": 120}, equity=20_000.0, limits=limits)
    # A: 990 <= 1000 and (10·99) / 20000 = 4.95%; B: 1200 > 1000; C: a sell of 1500 > 1000 is still too big;
    # D: (120 + 5)·40 / 20000 = 25.0%, not above 25%
    assert [o.symbol for o in passed] == ["A", "D"]
    # the cap, 1,000, is below 0.25 x 20,000 = 5,000: the reason says it blocks what the weight allows
    small = ", below max_position_weight x equity = 5,000: orders are never split, so the cap blocks trades the " \
            "weight allows (docs/delivery.md, risk checks)"
    assert [(b["symbol"], b["reason"]) for b in blocked] == [
        ("B", "order notional 1,200 > max_order_notional 1,000" + small),
        ("C", "order notional 1,500 > max_order_notional 1,000" + small)]
    # at equity 4,000 the weight allows 0.25 x 4,000 = 1,000, no more than the cap: the reason is the cap alone
    assert check_orders(orders[1:2], prices, {}, 4_000.0, limits)[1][0]["reason"] == \
        "order notional 1,200 > max_order_notional 1,000"
    assert check_orders([PlannedOrder("D", "buy", 6, "d")], prices, {"D": 120}, 20_000.0, limits)[1][0]["reason"] == \
        "position weight 25.2% > max_position_weight 25.0%"
    # what cannot be checked is blocked: a notional that is not a number, a buy against no equity
    unpriced = check_orders([PlannedOrder("A", "sell", 1, "a")], {"A": float("nan")}, {"A": 1}, 20_000.0, limits)
    assert unpriced[0] == [] and unpriced[1][0]["reason"] == \
        "order notional nan (last close nan) is not a number: it cannot be checked"
    for broke in (0.0, -5.0, float("nan")):
        assert check_orders(orders[:1], prices, {}, broke, limits)[1][0]["reason"] == \
            f"account equity {broke:,.2f} is not positive: a buy's weight cannot be checked"
    assert check_orders(orders[2:3], prices, {"C": 50}, 0.0, limits)[1][0]["reason"].startswith("order notional 1,500")
    assert check_orders([PlannedOrder("C", "sell", 10, "c")], prices, {"C": 50}, 0.0, limits)[1] == []  # 300: a sell
    assert daily_loss(float("nan"), 100_000.0, limits).endswith("is not a number: the daily loss cannot be checked")
    assert daily_loss(95_000.0, float("inf"), limits).startswith("account equity 95000.0 or previous close inf ")
    assert daily_loss(95_000.0, 100_000.0, limits) is None
    assert daily_loss(94_999.0, 100_000.0, limits) == ("daily loss 5.0% exceeds daily_loss_limit 5.0% (equity "
                                                       "94,999.00, previous close 100,000.00)")


def test_the_limits_themselves_pass_and_a_blocked_order_is_recorded_whole():
    limits = RiskParams(max_order_notional=1_000.0, max_position_weight=0.25, daily_loss_limit=0.05)
    # 10 shares of a stock not held, at 100, on equity 4,000: a notional of 1,000 (not above the cap) and a
    # weight of 1,000 / 4,000 = 25.0% (not above the limit) pass; on equity 3,960 the weight is 25.25%
    at_limits = PlannedOrder("E", "buy", 10, "pdr-v1-2024-01-02-E")
    assert check_orders([at_limits], {"E": 100.0}, {}, 4_000.0, limits) == ([at_limits], [])
    assert check_orders([at_limits], {"E": 100.0}, {}, 3_960.0, limits) == ([], [
        {"symbol": "E", "side": "buy", "qty": 10, "client_order_id": "pdr-v1-2024-01-02-E",
         "reason": "position weight 25.3% > max_position_weight 25.0%"}])
    # an equity above 0 but below 1 is positive: the buy's weight is checked (0.1 / 0.5 = 20%)
    tiny = PlannedOrder("E", "buy", 1, "t")
    assert check_orders([tiny], {"E": 0.1}, {}, 0.5, limits) == ([tiny], [])
    # a loss measured against a previous close below 1: 0.4 against 0.5 is 20%
    assert daily_loss(0.4, 0.5, limits) == ("daily loss 20.0% exceeds daily_loss_limit 5.0% (equity 0.40, "
                                            "previous close 0.50)")


def test_the_kill_switch_stops_every_account_and_a_shadows_halt_only_the_shadow(tmp_path):
    folder = tmp_path / "data" / "broker"  # not there yet: halting makes it
    assert halted(folder) is None and halted(folder, SHADOW) is None and unhalt(folder) is False
    shadow = halt(folder, "shadow daily loss", SHADOW)
    assert shadow == folder / f"{HALT_FILE}-shadow"
    assert halted(folder) is None and halted(folder, SHADOW) == "shadow daily loss"
    switch = halt(folder, "halted by hand")
    assert switch == folder / HALT_FILE and halt(folder, "halted again") == switch  # a second halt rewrites it
    written = json.loads(switch.read_text())
    assert written["reason"] == "halted again" and datetime.fromisoformat(written["at"]).utcoffset() is not None
    assert halted(folder) == "halted again" and halted(folder, SHADOW) == "halted again"  # the switch comes first
    assert unhalt(folder) is True and not switch.exists() and not shadow.exists()
    assert halted(folder) is None and halted(folder, SHADOW) is None and unhalt(folder) is False
    halt(folder, "shadow daily loss", SHADOW)
    assert unhalt(folder) is True and halted(folder, SHADOW) is None  # a shadow's halt alone is cleared too


def test_a_halt_file_that_cannot_be_read_still_halts(tmp_path):
    for text in ("not json", "[1, 2]", '{"at": "2024-01-02T21:00:00+00:00"}'):
        (tmp_path / HALT_FILE).write_text(text)
        assert halted(tmp_path) == "halted (unreadable halt file)" == halted(tmp_path, SHADOW)
