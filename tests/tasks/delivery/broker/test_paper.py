"""The local paper broker driven by the unmodified alpaca-py SDK: its lifecycle and fills by hand.

Every number below is worked out from the hand-priced market in ``market.py`` (cash 10,000,
costs 1%). Orders placed at a close fill at the next open as one batch: sells first, then
buys, scaled pro rata with whole shares when the cash is short (the env's rule).
"""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from alpaca.common.exceptions import APIError
from alpaca.trading.enums import OrderSide, OrderStatus, QueryOrderStatus, TimeInForce
from alpaca.trading.requests import (
    ClosePositionRequest,
    GetCalendarRequest,
    GetOrdersRequest,
    LimitOrderRequest,
    MarketOrderRequest,
)

from tests.tasks.delivery.broker.books import snapshot
from tests.tasks.delivery.broker.market import CASH, market, write_bars

BUY, SELL = OrderSide.BUY, OrderSide.SELL


def order(client, symbol, qty, side=BUY, tif=TimeInForce.DAY, limit=None, cid=None):
    kind = LimitOrderRequest if limit is not None else MarketOrderRequest
    extra = {"limit_price": limit} if limit is not None else {}
    return client.submit_order(kind(symbol=symbol, qty=qty, side=side, time_in_force=tif, client_order_id=cid,
                                    **extra))


def holdings(client) -> dict[str, tuple[int, float]]:
    return {p.symbol: (int(p.qty), float(p.avg_entry_price)) for p in client.get_all_positions()}


def api_error(call) -> APIError:
    with pytest.raises(APIError) as err:
        call()
    return err.value


def test_sells_fund_the_buys_and_short_cash_scales_every_buy_by_the_same_ratio(tmp_path):
    with market(tmp_path) as m:
        order(m.client, "AAA", 100), order(m.client, "BBB", 100)
        m.advance("bar")  # cash 6768, AAA 100, BBB 100
        sell, more, new = order(m.client, "AAA", 100, SELL), order(m.client, "BBB", 50), order(m.client, "CCC", 150)
        m.advance("open")  # opens 12, 19, 51
        # the sell first: 6768 + 1200 - 12 = 7956; the buys need (50·19 + 150·51)·1.01 = 8686, so the ratio is
        # 7956 / 8686 and the buys become floor(45.80) = 45 and floor(137.39) = 137
        cash = 7956 - (45 * 19 + 137 * 51) * 1.01
        assert float(m.client.get_account().cash) == pytest.approx(cash, abs=1e-9)
        assert holdings(m.client) == {"BBB": (145, (100 * 21 + 45 * 19) / 145), "CCC": (137, 51.0)}
        got = {o.symbol: (o.status, o.filled_qty) for o in (m.client.get_order_by_id(x.id) for x in (sell, more, new))}
        assert got == {"AAA": (OrderStatus.FILLED, "100"), "BBB": (OrderStatus.CANCELED, "45"),
                       "CCC": (OrderStatus.CANCELED, "137")}


def test_a_sell_beyond_the_free_shares_and_a_buy_without_buying_power_are_403(tmp_path):
    with market(tmp_path) as m:
        err = api_error(lambda: order(m.client, "AAA", 1, SELL))
        assert (err.status_code, err.code) == (403, 40310000)
        order(m.client, "AAA", 10)
        m.advance("bar")
        order(m.client, "AAA", 6, SELL)
        err = api_error(lambda: order(m.client, "AAA", 5, SELL))  # 4 of the 10 are free
        assert err.message == "insufficient qty available for order (requested: 5, available: 4)"
    with market(tmp_path / "poor", cash=0.0) as m:
        assert api_error(lambda: order(m.client, "AAA", 1)).status_code == 403


def test_during_a_session_a_market_order_fills_at_once_at_the_open_or_is_refused(tmp_path):
    with market(tmp_path) as m:
        m.advance("open")
        filled = order(m.client, "CCC", 10)
        assert (filled.status, filled.filled_avg_price) == (OrderStatus.FILLED, "52.0")
        assert float(m.client.get_account().cash) == pytest.approx(CASH - 520 * 1.01, abs=1e-9)
        err = api_error(lambda: order(m.client, "CCC", 200))  # 10,504 with costs, more than the cash
        assert (err.status_code, err.code) == (403, 40310000) and "insufficient buying power" in err.message
        assert api_error(lambda: order(m.client, "AAA", 1, tif=TimeInForce.OPG)).status_code == 422


def test_client_order_ids_are_unique_for_good_and_orders_can_be_found_listed_and_canceled(tmp_path):
    with market(tmp_path) as m:
        first = order(m.client, "AAA", 5, cid="mine-1")
        m.client.cancel_order_by_id(first.id)
        err = api_error(lambda: order(m.client, "AAA", 5, cid="mine-1"))  # even after the cancel
        assert (err.status_code, err.code) == (422, 40010001)
        assert m.client.get_order_by_client_id("mine-1").status == OrderStatus.CANCELED
        second, third = order(m.client, "BBB", 5), order(m.client, "CCC", 5)
        assert m.raw("DELETE", f"/v2/orders/{first.id}").status_code == 422  # already canceled
        assert m.raw("DELETE", "/v2/orders/00000000-0000-4000-8000-000000000000").status_code == 404
        open_ids = [o.id for o in m.client.get_orders(GetOrdersRequest(status=QueryOrderStatus.OPEN))]
        assert open_ids == [third.id, second.id]  # newest first
        listed = m.client.get_orders(GetOrdersRequest(status=QueryOrderStatus.ALL, direction="asc", limit=2))
        assert [o.id for o in listed] == [first.id, second.id]
        only = m.client.get_orders(GetOrdersRequest(status=QueryOrderStatus.ALL, symbols=["CCC"]))
        assert [o.id for o in only] == [third.id]
        closed = m.client.get_orders(GetOrdersRequest(status=QueryOrderStatus.CLOSED))
        assert [o.id for o in closed] == [first.id]
        after = m.client.get_orders(GetOrdersRequest(status=QueryOrderStatus.ALL,
                                                     after=datetime(2023, 7, 1, tzinfo=timezone.utc)))
        assert after == []  # all were placed at the 2023-06-30 close
        response = m.raw("DELETE", "/v2/orders")
        assert response.status_code == 207 and {r["id"] for r in response.json()} == {str(second.id), str(third.id)}
        assert m.client.get_orders(GetOrdersRequest(status=QueryOrderStatus.OPEN)) == []


def test_a_resent_order_is_a_duplicate_even_when_its_first_copy_holds_the_shares_or_the_cash(tmp_path):
    """A restarted loop resends its journaled orders with the same client order ids; the broker
    answers 422 (duplicate id), on which the loop fetches the order (docs/delivery.md, The trading
    loop), not 403 for the shares or cash that the first copy itself holds. Nothing changes."""
    with market(tmp_path) as m:
        db = m.broker.ledger.path
        order(m.client, "AAA", 10)
        m.advance("bar")  # 10 AAA bought at the 07-03 open of 11: cash 10,000 - 111.1 = 9,888.9
        sell = order(m.client, "AAA", 10, SELL, cid="pdr-v1-20230703-AAA")  # holds all 10 shares
        before = snapshot(db)
        err = api_error(lambda: order(m.client, "AAA", 10, SELL, cid="pdr-v1-20230703-AAA"))
        assert (err.status_code, err.code) == (422, 40010001) and "client_order_id" in err.message
        assert snapshot(db) == before
        m.advance("open")  # the sell fills at 07-05's open of 12: cash 9,888.9 + 120 - 1.2 = 10,007.7
        bought = order(m.client, "CCC", 190, cid="pdr-v1-20230705-CCC")  # at once at 51: 9,690 · 1.01 = 9,786.9
        assert float(m.client.get_account().cash) == pytest.approx(10_007.7 - 9_786.9, abs=1e-9)  # 220.8
        before = snapshot(db)
        err = api_error(lambda: order(m.client, "CCC", 190, cid="pdr-v1-20230705-CCC"))  # 220.8 cannot pay
        assert (err.status_code, err.code) == (422, 40010001) and "client_order_id" in err.message
        assert snapshot(db) == before
        assert m.client.get_order_by_client_id("pdr-v1-20230703-AAA").id == sell.id
        assert m.client.get_order_by_client_id("pdr-v1-20230705-CCC").status == OrderStatus.FILLED == bought.status


def test_a_symbol_gone_from_the_bars_is_refused_in_one_line_that_says_how_to_recover(tmp_path):
    """The bars are rewritten without a symbol the account holds (AAA) or has an open order in
    (CCC): no price of them is left, so the account can be neither valued nor closed out, nor its
    clock moved. Each such request gets one 500 line naming the symbols, the bars file and the
    two ways back; nothing changes, and with the bars restored the account is whole again."""
    with market(tmp_path) as m:
        db = m.broker.ledger.path
        order(m.client, "AAA", 10)
        m.advance("bar")  # 10 AAA at 11 (cost 1.1): cash 9,888.9, marked at the 07-03 close of 11.2
        order(m.client, "CCC", 1)
        write_bars(m.bars, symbols=["BBB"])
        before = snapshot(db)
        for method, path in (("GET", "/v2/account"), ("GET", "/v2/positions"), ("GET", "/v2/positions/AAA"),
                             ("DELETE", "/v2/positions/AAA"), ("DELETE", "/v2/positions"),
                             ("POST", "/podracer/v1/clock/advance")):
            response = m.raw(method, path)
            message = response.json()["message"]
            assert (response.status_code, response.json()["code"]) == (500, 50010000), f"{method} {path}"
            assert "in AAA, CCC, which the price feed" in message and str(m.bars) in message, message
            assert "put their bars back" in message and f"remove {db} to open a new account" in message
        assert snapshot(db) == before
        write_bars(m.bars)
        assert float(m.client.get_account().equity) == pytest.approx(9_888.9 + 112.0, abs=1e-9)


def test_closing_positions(tmp_path):
    with market(tmp_path) as m:
        order(m.client, "AAA", 10), order(m.client, "BBB", 7)
        m.advance("bar")
        part = m.client.close_position("AAA", ClosePositionRequest(percentage="35"))
        assert (part.side, part.qty) == (OrderSide.SELL, "3")  # floor(3.5)
        assert m.client.close_position("AAA", ClosePositionRequest(qty="2")).qty == "2"
        assert m.raw("DELETE", "/v2/positions/CCC").status_code == 404
        closed = m.client.close_all_positions(cancel_orders=True)
        assert {(c.symbol, c.status) for c in closed} == {("AAA", 200), ("BBB", 200)}
        m.advance("open")
        assert holdings(m.client) == {}


def test_clock_calendar_and_assets_follow_the_nyse_and_the_feed(tmp_path):
    with market(tmp_path) as m:
        clock = m.client.get_clock()
        assert (clock.is_open, clock.timestamp.isoformat()) == (False, "2023-06-30T20:00:00+00:00")
        assert clock.next_open.isoformat() == "2023-07-03T13:30:00+00:00"
        assert clock.next_close.isoformat() == "2023-07-03T17:00:00+00:00"  # a half day
        days = m.raw("GET", "/v2/calendar", params={"start": "2023-07-01", "end": "2023-07-06"}).json()
        assert days == [{"date": "2023-07-03", "open": "09:30", "close": "13:00"},
                        {"date": "2023-07-05", "open": "09:30", "close": "16:00"},
                        {"date": "2023-07-06", "open": "09:30", "close": "16:00"}]
        assert len(m.client.get_calendar(GetCalendarRequest(start="2023-07-01", end="2023-07-06"))) == 3
        assert m.client.get_asset("BBB").symbol == "BBB"
        assert [a.symbol for a in m.client.get_all_assets()] == ["AAA", "BBB", "CCC"]
        assert m.raw("GET", "/v2/assets/ZZZ").status_code == 404
        assert m.raw("POST", "/podracer/v1/clock/advance", params={"to": "bar"}).status_code == 200
        while m.raw("POST", "/podracer/v1/clock/advance").status_code == 200:
            pass
        assert m.raw("POST", "/podracer/v1/clock/advance").json()["code"] == 40010001  # 409: the feed ends


def test_the_books_survive_a_restart(tmp_path):
    with market(tmp_path) as m:
        placed = order(m.client, "AAA", 10)
        m.advance("open")
        before = (m.client.get_account().cash, holdings(m.client), m.client.get_clock().timestamp)
    with market(tmp_path) as m:  # same ledger file: the start date only applies to a new account
        assert (m.client.get_account().cash, holdings(m.client), m.client.get_clock().timestamp) == before
        assert m.client.get_order_by_id(placed.id).status == OrderStatus.FILLED


def test_a_wall_clock_fills_queued_orders_once_the_next_bar_arrives(tmp_path):
    """With the time of day far past 07-05, orders placed at the 07-03 close still wait for its bar."""
    from tasks.delivery.broker.paper import PaperBroker

    bars = tmp_path / "bars.parquet"
    write_bars(bars, sessions=["2023-06-30", "2023-07-03"])
    now = datetime(2023, 7, 7, 12, tzinfo=timezone.utc)
    broker = PaperBroker.open(tmp_path / "b.db", bars, initial_cash=CASH, cost_pct=0.01, mode="wall",
                              now=lambda: now)
    placed = broker.submit({"symbol": "AAA", "qty": 10, "side": "buy", "type": "market", "time_in_force": "day"})
    assert placed["status"] == "accepted" and broker.order(placed["id"])["status"] == "accepted"
    write_bars(bars)  # the nightly ingest lands 07-05..07-10
    assert broker.order(placed["id"])["filled_avg_price"] == "12.0"  # 07-05's open, not a later one
    assert broker.ledger.clock()["day"] == "2023-07-06"  # caught up to what the time of day allows
    assert broker.clock()["is_open"] is False


def test_serving_the_broker_leaves_the_host_process_logging_alone(tmp_path):
    """Embedded in `podracer run`'s deliver stage, the broker must not reconfigure logging:
    uvicorn's dictConfig would close every handler, and closing Prefect's API log handler
    inside a flow run deadlocked `make run`."""
    import logging

    class Kept(logging.Handler):
        closed = False

        def emit(self, record: logging.LogRecord) -> None:
            pass

        def close(self) -> None:
            self.closed = True
            super().close()

    kept = Kept()
    root = logging.getLogger()
    root.addHandler(kept)
    try:
        with market(tmp_path) as m:
            assert m.client.get_clock() is not None
        assert kept in root.handlers and not kept.closed
    finally:
        root.removeHandler(kept)


def test_an_account_left_from_another_market_says_how_to_start_a_new_one(tmp_path):
    """`-s data.source=arch-demo` after `make run`: the paper account's clock stands on a day
    the new market's feed does not have. The error names the ledger file to remove."""
    from tasks.delivery.broker.paper import BrokerError, PaperBroker

    bars, db = tmp_path / "bars.parquet", tmp_path / "b.db"
    write_bars(bars, sessions=["2023-06-30", "2023-07-03"])
    PaperBroker.open(db, bars, initial_cash=CASH, cost_pct=0.01, mode="simulated").ledger.close()
    write_bars(bars, sessions=["2023-06-30"])  # another market: its feed ends before the clock
    broker = PaperBroker.open(db, bars, initial_cash=CASH, cost_pct=0.01, mode="simulated")
    with pytest.raises(BrokerError, match=f"stands at 2023-07-03.*another market.*remove {db}"):
        broker.advance("next")
