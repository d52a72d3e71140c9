"""Two paper accounts at one broker (docs/delivery.md, Shadow accounts): one key pair each, their
own books, one market and one clock. Prices are the hand-priced market of ``market.py``."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import pytest
import requests
from alpaca.trading.client import TradingClient
from alpaca.trading.enums import OrderSide, QueryOrderStatus, TimeInForce
from alpaca.trading.requests import GetOrdersRequest, MarketOrderRequest

from tasks.delivery.broker.accounts import Exchange
from tasks.delivery.broker.paper import PaperBroker
from tasks.delivery.broker.service import BrokerServer
from tasks.delivery.keys import SHADOW, Keys, role_path
from tasks.errors import ConfigError
from tests.tasks.delivery.broker.books import assert_books_balance, assert_error_json, read, snapshot
from tests.tasks.delivery.broker.market import CASH, COST, KEYS, write_bars

SHADOW_KEYS = Keys("PKTESTSHADOWKEY00002", "shadow-secret-0123456789abcdefghijklmnop")


@dataclass
class Books:
    url: str
    champion: TradingClient
    shadow: TradingClient
    db: Path
    shadow_db: Path

    def advance(self, keys: Keys, to: str) -> requests.Response:
        return requests.post(f"{self.url}/podracer/v1/clock/advance", params={"to": to}, headers=keys.headers(),
                             timeout=30)


def open_main(root: Path) -> PaperBroker:
    bars = root / "bars.parquet"
    if not bars.exists():
        write_bars(bars)
    return PaperBroker.open(root / "broker.db", bars, initial_cash=CASH, cost_pct=COST, mode="simulated",
                            start=date(2023, 6, 30))


@contextmanager
def two_accounts(root: Path) -> Iterator[Books]:
    """The champion's account (``broker.db``, its clock at the close of 2023-06-30 when new) and the
    shadow's (``broker-shadow.db``, opened on its first request), served as the broker serves them."""
    main = open_main(root)
    shadow_db = role_path(main.ledger.path, SHADOW)

    def shadow(like: PaperBroker) -> PaperBroker:
        return PaperBroker.open(shadow_db, like.feed.path, initial_cash=CASH, cost_pct=COST, mode=like.mode, like=like)

    with BrokerServer(Exchange(main, KEYS, {SHADOW: (SHADOW_KEYS, shadow)})) as server:
        yield Books(server.url, TradingClient(KEYS.key_id, KEYS.secret, url_override=server.url),
                    TradingClient(SHADOW_KEYS.key_id, SHADOW_KEYS.secret, url_override=server.url),
                    main.ledger.path, shadow_db)


def buy(client: TradingClient, symbol: str, qty: int, cid: str) -> None:
    client.submit_order(MarketOrderRequest(symbol=symbol, qty=qty, side=OrderSide.BUY, time_in_force=TimeInForce.DAY,
                                           client_order_id=cid))


def all_orders(client: TradingClient) -> list:
    return client.get_orders(GetOrdersRequest(status=QueryOrderStatus.ALL, limit=500))


def test_each_key_pair_is_its_own_account_and_one_advance_moves_both(tmp_path):
    with two_accounts(tmp_path) as books:
        assert not books.shadow_db.exists()  # opened on its first request
        buy(books.champion, "AAA", 10, "c-1")
        before = snapshot(books.db)
        buy(books.shadow, "BBB", 5, "s-1")
        buy(books.shadow, "CCC", 1, "c-1")  # the same id in another account is another order
        books.shadow.cancel_order_by_id(books.shadow.get_order_by_client_id("c-1").id)
        books.shadow.get_account(), books.shadow.get_all_positions(), books.shadow.get_clock()
        assert snapshot(books.db) == before, "a request with the shadow's keys changed the champion's ledger"
        assert books.champion.get_order_by_client_id("c-1").symbol == "AAA"

        assert books.advance(SHADOW_KEYS, "open").status_code == 200  # through either account: both move
        # the champion: 10 AAA at 11.00 + 1% = 111.10; the shadow: 5 BBB at 21.00 + 1% = 106.05
        assert float(books.champion.get_account().cash) == pytest.approx(10_000 - 111.10, abs=1e-9)
        assert float(books.shadow.get_account().cash) == pytest.approx(10_000 - 106.05, abs=1e-9)
        assert {p.symbol: p.qty for p in books.champion.get_all_positions()} == {"AAA": "10"}
        assert {p.symbol: p.qty for p in books.shadow.get_all_positions()} == {"BBB": "5"}
        assert [(o.client_order_id, o.status.value) for o in all_orders(books.champion)] == [("c-1", "filled")]
        assert sorted((o.client_order_id, o.status.value) for o in all_orders(books.shadow)) == [
            ("c-1", "canceled"), ("s-1", "filled")]

        assert books.advance(KEYS, "close").status_code == 200
        assert books.champion.get_clock().timestamp == books.shadow.get_clock().timestamp
        # marked at the 07-03 closes: AAA 11.20, BBB 20.80
        assert float(books.champion.get_account().equity) == pytest.approx(9_888.90 + 112.0, abs=1e-9)
        assert float(books.shadow.get_account().equity) == pytest.approx(9_893.95 + 104.0, abs=1e-9)
        assert read(books.db, "SELECT day, phase FROM clock") == read(books.shadow_db, "SELECT day, phase FROM clock") \
            == [{"day": "2023-07-03", "phase": "close"}]
    for db in (books.db, books.shadow_db):
        assert_books_balance(db)
    assert [r["client_order_id"] for r in read(books.db, "SELECT client_order_id FROM orders")] == ["c-1"]


def test_unknown_keys_and_crossed_pairs_are_refused(tmp_path):
    with two_accounts(tmp_path) as books:
        crossed = {"APCA-API-KEY-ID": SHADOW_KEYS.key_id, "APCA-API-SECRET-KEY": KEYS.secret}
        stranger = Keys("PKTESTSTRANGER000003", "stranger-secret-0123456789abcdefghijklm").headers()
        for headers in (crossed, stranger, {}):
            assert_error_json(requests.get(f"{books.url}/v2/account", headers=headers, timeout=30), 401, 40110000)
            assert_error_json(requests.post(f"{books.url}/podracer/v1/clock/advance", headers=headers, timeout=30),
                              401, 40110000)
        assert not books.shadow_db.exists()
        assert read(books.db, "SELECT day, phase FROM clock") == [{"day": "2023-06-30", "phase": "close"}]
    with pytest.raises(ConfigError, match="same API key id"):
        Exchange(open_main(tmp_path), KEYS, {SHADOW: (Keys(KEYS.key_id, "other"), lambda like: like)})


def test_an_account_opened_later_stands_where_the_market_clock_does_and_a_lagging_one_catches_up(tmp_path):
    with two_accounts(tmp_path) as books:
        assert books.advance(KEYS, "bar").status_code == 200  # the champion's clock: 07-03 close
        assert float(books.shadow.get_account().cash) == CASH  # a new account, opened here
        assert books.shadow.get_clock().timestamp == books.champion.get_clock().timestamp
        buy(books.shadow, "BBB", 5, "s-1")  # queued for the 07-05 open
    main = open_main(tmp_path)  # the champion's ledger alone moves on (a broker killed between the two steps)
    main.advance("bar")
    main.ledger.close()
    with two_accounts(tmp_path) as books:
        # the shadow's first request brings its clock level, through the 07-05 open where its order fills at
        # BBB's open, 19.00: 5·19 + 1% = 95.95
        assert books.shadow.get_order_by_client_id("s-1").filled_avg_price == "19.0"
        assert float(books.shadow.get_account().cash) == pytest.approx(CASH - 95.95, abs=1e-9)
        assert read(books.shadow_db, "SELECT day, phase FROM clock") == [{"day": "2023-07-05", "phase": "close"}]
