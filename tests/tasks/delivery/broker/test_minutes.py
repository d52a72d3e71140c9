"""The local paper broker on minute bars, driven by alpaca-py: fills, day orders, half days, the window.

The market is ``market.py``'s minute bars (AAA opens at ``10 + k / 100`` at the file's k-th
minute, BBB at ``20 + k / 100``; costs 1%, cash 10,000) over 06-30, the 07-03 half day
(13:00 New York, 17:00 UTC) and 07-05. Every price below is worked out from that rule.
"""

from __future__ import annotations

from datetime import datetime, timezone

import pandas as pd
import pytest
from alpaca.trading.enums import OrderStatus, TimeInForce

from tasks.data.bars import write_parquet
from tasks.delivery.broker.feed import FeedSource, load_feed
from tasks.delivery.broker.paper import PaperBroker
from tests.tasks.delivery.broker.market import CASH, COST, market, minute_open, minutes, write_bars, write_minutes
from tests.tasks.delivery.broker.test_paper import order


def test_an_order_placed_at_a_minute_bars_close_fills_at_the_next_minute_bars_open(tmp_path):
    with market(tmp_path, "2023-06-30T14:00", minute=True) as m:
        clock = m.client.get_clock()  # between two minute bars: the market is open
        assert (clock.timestamp.isoformat(), clock.is_open) == ("2023-06-30T14:01:00+00:00", True)
        assert clock.next_close.isoformat() == "2023-06-30T20:00:00+00:00"
        placed = order(m.client, "AAA", 10)
        assert placed.status == OrderStatus.ACCEPTED  # it waits for the next bar's open
        opened = m.advance("open").json()
        assert (opened["timestamp"], opened["is_open"]) == ("2023-06-30T14:01:00+00:00", True)
        price = minute_open("AAA", "2023-06-30T14:01")
        filled = m.client.get_order_by_id(placed.id)
        assert (filled.status, float(filled.filled_avg_price)) == (OrderStatus.FILLED, price)
        assert float(m.client.get_account().cash) == pytest.approx(CASH - 10 * price * (1 + COST), abs=1e-9)
        assert m.advance("close").json()["timestamp"] == "2023-06-30T14:02:00+00:00"
        assert float(m.client.get_account().equity) == pytest.approx(
            CASH - 10 * price * (1 + COST) + 10 * (price + 0.005), abs=1e-9)  # marked at the minute's close


def test_day_orders_expire_at_the_sessions_close_and_later_ones_are_for_the_next_session(tmp_path):
    with market(tmp_path, "2023-06-30T19:57", minute=True) as m:
        order(m.client, "AAA", 10)
        m.advance("bar")  # 19:58 fills it
        resting = order(m.client, "AAA", 1, limit=1.0)  # never touched
        cls = order(m.client, "BBB", 2, tif=TimeInForce.CLS)
        m.advance("bar")  # the 19:59 bar, the session's last: it closes at 16:00 New York
        assert m.client.get_order_by_id(resting.id).status == OrderStatus.EXPIRED
        on_close = m.client.get_order_by_id(cls.id)
        assert float(on_close.filled_avg_price) == minute_open("BBB", "2023-06-30T19:59") + 0.005
        clock = m.client.get_clock()
        assert (clock.is_open, clock.next_open.isoformat()) == (False, "2023-07-03T13:30:00+00:00")
        cash = float(m.client.get_account().cash)
        after = order(m.client, "AAA", 5)  # after the last close: for the next session, as at Alpaca
        opg = order(m.client, "BBB", 1, tif=TimeInForce.OPG)  # the market is closed: accepted
        m.advance("open")
        first = minute_open("AAA", "2023-07-03T13:30")
        assert (m.client.get_order_by_id(after.id).status, float(m.client.get_order_by_id(after.id).filled_avg_price)) \
            == (OrderStatus.FILLED, first)
        assert m.client.get_order_by_id(opg.id).status == OrderStatus.FILLED
        account = m.client.get_account()  # the last session's close, once, at the session's first open
        held = 10 * (minute_open("AAA", "2023-06-30T19:59") + 0.005) + 2 * (minute_open("BBB", "2023-06-30T19:59")
                                                                            + 0.005)
        assert float(account.last_equity) == pytest.approx(cash + held, abs=1e-9)
        m.advance("close")
        m.advance("bar")  # later minutes of the session leave it alone
        assert float(m.client.get_account().last_equity) == pytest.approx(cash + held, abs=1e-9)
        assert m.raw("POST", "/v2/orders", json={"symbol": "AAA", "qty": 1, "side": "buy", "type": "market",
                                                 "time_in_force": "opg"}).status_code == 422  # the market is open


def test_a_half_day_closes_at_13_00_new_york_time(tmp_path):
    with market(tmp_path, "2023-07-03T16:57", minute=True) as m:
        resting = order(m.client, "AAA", 1, limit=1.0)
        m.advance("bar")
        assert m.client.get_order_by_id(resting.id).status == OrderStatus.ACCEPTED  # 16:58: still in session
        m.advance("bar")  # 16:59, the half day's last minute
        expired = m.client.get_order_by_id(resting.id)
        assert (expired.status, expired.expired_at.isoformat()) == (OrderStatus.EXPIRED, "2023-07-03T17:00:00+00:00")
        clock = m.client.get_clock()
        assert (clock.timestamp.isoformat(), clock.is_open) == ("2023-07-03T17:00:00+00:00", False)
        assert clock.next_open.isoformat() == "2023-07-05T13:30:00+00:00"
        assert m.advance("open").json()["timestamp"] == "2023-07-05T13:30:00+00:00"  # the holiday is skipped


def test_a_wall_clock_fills_an_order_when_the_next_minute_bar_arrives(tmp_path):
    bars = tmp_path / "bars.parquet"
    write_minutes(bars, ["2023-06-30"])
    frame = pd.read_parquet(bars)
    write_parquet(frame[frame["ts"].isin(minutes(["2023-06-30"])[:31])], bars, "1min")  # up to the 14:00 bar
    now = datetime(2023, 6, 30, 14, 1, 30, tzinfo=timezone.utc)
    broker = PaperBroker.open(tmp_path / "b.db", bars, initial_cash=CASH, cost_pct=COST, mode="wall",
                              now=lambda: now)
    placed = broker.submit({"symbol": "AAA", "qty": 10, "side": "buy", "type": "market", "time_in_force": "day"})
    assert placed["status"] == "accepted" and broker.clock()["is_open"] is True
    write_parquet(frame, bars, "1min")  # the 14:01 bar (and the rest of the day) arrive
    now = datetime(2023, 6, 30, 14, 3, 30, tzinfo=timezone.utc)
    assert float(broker.order(placed["id"])["filled_avg_price"]) == minute_open("AAA", "2023-06-30T14:01")
    clock = broker.ledger.clock()  # as far as the time of day allows: the 14:03 bar has opened
    assert (clock["day"], clock["phase"]) == ("2023-06-30T14:03:00+00:00", "open")
    broker.ledger.close()


def test_the_feed_holds_a_trailing_window_of_sessions_kept_back_to_the_clock(tmp_path):
    bars = tmp_path / "bars.parquet"
    write_minutes(bars)
    days = lambda feed: sorted({feed.day(t).isoformat() for t in range(len(feed))})  # noqa: E731
    assert days(load_feed(bars, 1)) == ["2023-07-05"]
    two = load_feed(bars, 2)
    assert days(two) == ["2023-07-03", "2023-07-05"] and len(two) == 210 + 390
    assert [two.session_start(t) for t in (0, 209, 210, 599)] == [0, 0, 210, 210]
    assert days(load_feed(bars, 1, since=pd.Timestamp("2023-06-30T19:00", tz="UTC"))) == [
        "2023-06-30", "2023-07-03", "2023-07-05"]
    source = FeedSource(bars, 1)
    assert len(source.current()) == 390
    source.keep("2023-07-03T16:00:00+00:00")  # a clock standing before the window
    assert days(source.current()) == ["2023-07-03", "2023-07-05"]
    daily = tmp_path / "daily.parquet"
    write_bars(daily)
    assert len(load_feed(daily, 1)) == 6  # daily bars are read whole


def test_a_broker_opened_on_a_session_date_of_minute_bars_stands_at_its_last_close(tmp_path):
    bars = tmp_path / "bars.parquet"
    write_minutes(bars)
    broker = PaperBroker.open(tmp_path / "b.db", bars, initial_cash=CASH, cost_pct=COST, mode="simulated",
                              start=pd.Timestamp("2023-07-03").date(), sessions=1)
    assert broker.ledger.clock() | {"id": 1} == {"id": 1, "mode": "simulated", "day": "2023-07-03T16:59:00+00:00",
                                                 "phase": "close"}
    assert broker.clock()["timestamp"] == "2023-07-03T17:00:00+00:00"
    broker.ledger.close()
