"""The paper broker's clock events (``tasks/delivery/broker/events.py``) by hand, through alpaca-py.

At an open the queued orders fill as one batch and unfilled ``opg`` ones are canceled; at a
close resting limits fill where the bar touched them, ``cls`` orders fill and ``day`` ones
expire; a symbol without a real bar fills nothing. Prices are ``market.py``'s (cash 10,000, costs 1%).
"""

from __future__ import annotations

import pandas as pd
import pytest
from alpaca.trading.enums import OrderStatus, TimeInForce

from tasks.data.bars import write_parquet
from tests.tasks.delivery.broker.books import assert_books_balance
from tests.tasks.delivery.broker.market import CASH, PRICES, SESSIONS, SYMBOLS, market
from tests.tasks.delivery.broker.test_paper import SELL, holdings, order


def test_orders_placed_at_a_close_fill_at_the_next_open_as_one_batch(tmp_path):
    with market(tmp_path) as m:
        a, b = order(m.client, "AAA", 100), order(m.client, "BBB", 100)
        assert (a.status, b.status) == (OrderStatus.ACCEPTED, OrderStatus.ACCEPTED)
        account = m.client.get_account()
        assert (float(account.cash), float(account.buying_power)) == (CASH, CASH - (1000 + 2000) * 1.01)
        assert m.advance("open").json()["timestamp"] == "2023-07-03T13:30:00+00:00"
        filled = m.client.get_order_by_id(a.id)
        assert (filled.status, filled.filled_qty, filled.filled_avg_price) == (OrderStatus.FILLED, "100", "11.0")
        assert float(m.client.get_account().cash) == pytest.approx(CASH - (1100 + 2100) * 1.01, abs=1e-9)
        assert holdings(m.client) == {"AAA": (100, 11.0), "BBB": (100, 21.0)}
        m.advance("close")
        account = m.client.get_account()
        assert float(account.equity) == pytest.approx(6768.0 + 100 * 11.2 + 100 * 20.8, abs=1e-9)
        assert float(account.last_equity) == CASH  # the previous close
        position = m.client.get_open_position("AAA")
        assert (position.market_value, position.current_price, position.cost_basis) == ("1120.0", "11.2", "1100.0")


def test_limit_orders_fill_at_the_open_when_marketable_else_at_their_limit_when_touched(tmp_path):
    with market(tmp_path) as m:
        touched = order(m.client, "AAA", 10, limit=10.6)  # open 11 is above; the day's low 10.5 reaches it
        patient = order(m.client, "BBB", 10, tif=TimeInForce.GTC, limit=20.0)  # 07-03's low 20.2: not yet
        never = order(m.client, "CCC", 10, limit=40.0)
        m.advance("bar")
        status = {o.symbol: (o.status, o.filled_avg_price) for o in
                  (m.client.get_order_by_id(x.id) for x in (touched, patient, never))}
        assert status == {"AAA": (OrderStatus.FILLED, "10.6"), "BBB": (OrderStatus.ACCEPTED, None),
                          "CCC": (OrderStatus.EXPIRED, None)}
        m.advance("open")  # 07-05 opens BBB at 19: marketable, filled at the open (better than the limit)
        assert m.client.get_order_by_id(patient.id).filled_avg_price == "19.0"


def test_on_open_and_on_close_orders(tmp_path):
    with market(tmp_path) as m:
        opg = order(m.client, "AAA", 10, tif=TimeInForce.OPG)
        opg_limit = order(m.client, "BBB", 10, tif=TimeInForce.OPG, limit=15.0)  # not marketable at 21
        cls = order(m.client, "CCC", 10, tif=TimeInForce.CLS)
        m.advance("open")
        assert m.client.get_order_by_id(opg.id).filled_avg_price == "11.0"
        assert m.client.get_order_by_id(opg_limit.id).status == OrderStatus.CANCELED
        assert m.client.get_order_by_id(cls.id).status == OrderStatus.ACCEPTED
        m.advance("close")
        assert m.client.get_order_by_id(cls.id).filled_avg_price == "52.5"  # the close


def test_a_symbol_without_a_bar_in_the_session_fills_nothing_and_is_marked_at_its_last_real_close(tmp_path):
    """A ragged feed (docs/data.md): CCC has no bar on 07-05 (a halt). The panel carries its 07-03
    close 52.5 there, a price nobody traded at: no CCC order fills in that session, a ``day``
    one expires at its close, a ``cls`` one is canceled there, a ``gtc`` one waits for 07-06's
    real open, and the CCC position
    stays marked at 52.5. AAA, in the same batch, fills at its real open 12."""
    rows = [{"symbol": s, "ts": pd.Timestamp(day, tz="UTC"), "open": o, "high": h, "low": lo, "close": c,
             "volume": 1e5} for s in SYMBOLS for day, (o, h, lo, c) in zip(SESSIONS, PRICES[s])
            if (s, day) != ("CCC", "2023-07-05")]
    write_parquet(pd.DataFrame(rows), tmp_path / "bars.parquet", "1d")
    with market(tmp_path) as m:
        assert m.broker.feed.current().real[:, 2].tolist() == [True, True, False, True, True, True]
        order(m.client, "CCC", 10)
        m.advance("bar")  # 07-03: 10 CCC at 52, cash 10,000 − 520·1.01 = 9,474.8; CCC closes at 52.5
        sell = order(m.client, "CCC", 10, SELL)  # market, day
        buy = order(m.client, "AAA", 100)
        limit = order(m.client, "CCC", 5, limit=60.0)  # marketable at the carried 52.5, were it a price
        patient = order(m.client, "CCC", 3, tif=TimeInForce.GTC)
        closing = order(m.client, "CCC", 2, tif=TimeInForce.CLS)  # 07-05's closing auction, which CCC misses
        m.advance("open")  # 07-05
        status = {x.client_order_id: (o.status, o.filled_qty, o.filled_avg_price) for x, o in
                  ((x, m.client.get_order_by_id(x.id)) for x in (sell, buy, limit, patient))}
        assert status == {sell.client_order_id: (OrderStatus.ACCEPTED, "0", None),
                          buy.client_order_id: (OrderStatus.FILLED, "100", "12.0"),
                          limit.client_order_id: (OrderStatus.ACCEPTED, "0", None),
                          patient.client_order_id: (OrderStatus.ACCEPTED, "0", None)}
        assert float(m.client.get_account().cash) == pytest.approx(9474.8 - 1200 * 1.01, abs=1e-9)  # 8,262.8
        during = order(m.client, "CCC", 1)  # in the session: no bar to fill at, so it rests
        assert (during.status, during.filled_qty) == (OrderStatus.NEW, "0")
        position = m.client.get_open_position("CCC")
        assert (position.qty, position.current_price, position.market_value) == ("10", "52.5", "525.0")
        account = m.client.get_account()
        assert float(account.equity) == pytest.approx(8262.8 + 100 * 12.0 + 10 * 52.5, abs=1e-9)
        assert float(account.last_equity) == pytest.approx(9474.8 + 10 * 52.5, abs=1e-9)  # 07-03's close
        m.advance("close")  # 07-05 closes: the day orders expire unfilled, the cls one is canceled, the gtc one waits
        got = {x.client_order_id: m.client.get_order_by_id(x.id).status
               for x in (sell, limit, patient, during, closing)}
        assert got == {sell.client_order_id: OrderStatus.EXPIRED, limit.client_order_id: OrderStatus.EXPIRED,
                       patient.client_order_id: OrderStatus.ACCEPTED, during.client_order_id: OrderStatus.EXPIRED,
                       closing.client_order_id: OrderStatus.CANCELED}
        assert holdings(m.client) == {"AAA": (100, 12.0), "CCC": (10, 52.0)}
        assert float(m.client.get_account().equity) == pytest.approx(8262.8 + 100 * 12.4 + 10 * 52.5, abs=1e-9)
        m.advance("open")  # 07-06: CCC trades again, at 50
        filled = m.client.get_order_by_id(patient.id)
        assert (filled.status, filled.filled_avg_price) == (OrderStatus.FILLED, "50.0")
        assert float(m.client.get_account().cash) == pytest.approx(8262.8 - 150 * 1.01, abs=1e-9)
    assert_books_balance(tmp_path / "broker.db")
