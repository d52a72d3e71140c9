"""The ``trade.broker: alpaca`` path, offline: real trading-loop cycles through alpaca-py's
``TradingClient`` against the Alpaca stand-in, which answers with recorded Alpaca responses
(tests/standins/data/alpaca_trading/), journaled in the client's own file."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from standins.tiny import tiny_params
from tasks.config import Params
from tasks.data import feature_set
from tasks.delivery.client.journal import JOURNAL, Journal
from tasks.delivery.client.session import trading_client, trading_session
from tasks.delivery.keys import Keys
from tasks.errors import ConfigError
from tasks.model import bundle
from tasks.registry.register import register
from tests.standins.alpaca_server import AlpacaStandin
from tests.standins.alpaca_trading import Call

KEY_ID, SECRET = "PKSTANDINTRADE0000001", "tr4ding-Secret-Key-0123456789abcdefghijkl"
HELD = {"SYN002": 500, "SYN003": 20}
"""The account's positions: the policy below sells from both, capped at what is held."""


class Killed(Exception):
    """The loop's process dying between submitting its orders and recording the cycle."""


@pytest.fixture
def standin() -> Iterator[AlpacaStandin]:
    with AlpacaStandin(key_id=KEY_ID, secret_key=SECRET) as server:
        yield server


@pytest.fixture
def champion(built_copy: Params, standin: AlpacaStandin, monkeypatch: pytest.MonkeyPatch) -> Params:
    """The tiny pipeline's policy, biased to buy SYN000/SYN001 and sell SYN002/SYN003, registered as
    champion; params that trade it on the stand-in; the stand-in account holds ``HELD``."""
    weights = torch.load(built_copy.dirs.models / bundle.WEIGHTS, weights_only=True)
    last = max(k for k in weights if k.endswith(".bias"))
    weights[last] = torch.tensor([3.0, 3.0, -3.0, -3.0])
    torch.save(weights, built_copy.dirs.models / bundle.WEIGHTS)
    params = tiny_params(built_copy.data_dir.parent, "registry.gate_margin=-1000", "trade.broker=alpaca",
                         f"trade.url={standin.url}")
    assert register(params).promoted
    fs = feature_set.load(params.dirs.features)
    for symbol, qty in HELD.items():
        standin.trading.hold(symbol, qty, float(fs.prices[-1, fs.symbols.index(symbol)]))
    monkeypatch.setenv("APCA_API_KEY_ID", KEY_ID)
    monkeypatch.setenv("APCA_API_SECRET_KEY", SECRET)
    return params


def journal(params: Params, standin: AlpacaStandin) -> Journal:
    """The client's journal of the stand-in's account."""
    return Journal(params.dirs.broker / JOURNAL, standin.trading.account["id"])


def posts(standin: AlpacaStandin, since: int = 0) -> list[Call]:
    return [c for c in standin.trading.calls[since:] if (c.method, c.path) == ("POST", "/v2/orders")]


def cycle_planned(params: Params, standin: AlpacaStandin, kill: bool = False) -> tuple[Any, list[dict[str, Any]]]:
    """One cycle in a fresh session; returns its result and the orders it journaled as planned
    (read when the submits are done; with ``kill`` the loop dies right there)."""
    planned: list[dict[str, Any]] = []

    def after_submit() -> None:
        planned.extend(journal(params, standin).cycles())
        if kill:
            raise Killed("killed between submit and record")

    with trading_session(params, log_to_mlflow=False) as session:
        result = session.loop.cycle(after_submit=after_submit)
    return result, planned


def sent_body(order: dict[str, Any], version: str, day: str) -> dict[str, Any]:
    return {"symbol": order["symbol"], "qty": float(order["qty"]), "side": order["side"], "type": "market",
            "time_in_force": "day", "client_order_id": f"pdr-v{version}-{day.replace('-', '')}-{order['symbol']}"}


def journal_text(params: Params) -> bytes:
    files = sorted(params.dirs.broker.glob(JOURNAL + "*"))  # the file and its WAL
    assert files
    return b"".join(f.read_bytes() for f in files)


def test_one_cycle_sends_exactly_the_planned_orders(champion: Params, standin: AlpacaStandin,
                                                    caplog: pytest.LogCaptureFixture,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    caplog.set_level(logging.DEBUG)
    result, planned = cycle_planned(champion, standin)
    day = str(feature_set.load(champion.dirs.features).timestamps[-1])[:10]
    assert (result.version, result.bar, result.halted, result.blocked) == ("1", day, None, [])
    [record] = [r for r in planned if r["state"] == "planned"]
    orders = record["body"]["planned"]
    # sells first, a sell capped at the shares held (read from the broker), then the buys
    assert [(o["side"], o["symbol"]) for o in orders] == [("sell", "SYN002"), ("sell", "SYN003"),
                                                         ("buy", "SYN000"), ("buy", "SYN001")]
    assert orders[1]["qty"] == HELD["SYN003"] and all(o["qty"] > 0 for o in orders)

    sent = posts(standin)
    assert [c.body for c in sent] == [sent_body(o, "1", day) for o in orders]
    assert all(isinstance(c.body["qty"], float) and c.body["qty"].is_integer() for c in sent)
    assert all(c.status == 200 for c in sent)
    calls = standin.trading.calls
    assert calls and all((c.key_id, c.secret_key) == (KEY_ID, SECRET) for c in calls)
    assert {(c.method, c.path) for c in calls} >= {("GET", "/v2/account"), ("GET", "/v2/positions"),
                                                   ("GET", "/v2/orders")}

    # the cycle's record: the stand-in's orders, as the broker answered them, journaled in the file
    assert (champion.dirs.broker / JOURNAL).exists()
    [recorded] = journal(champion, standin).cycles(day)
    assert (recorded["state"], recorded["model_version"]) == ("recorded", "1")
    by_id = {o["id"]: o for o in standin.trading.orders.values()}
    assert [o["id"] for o in recorded["body"]["orders"]] == list(by_id)
    assert [(o["client_order_id"], o["qty"], o["status"]) for o in recorded["body"]["orders"]] == [
        (c.body["client_order_id"], int(c.body["qty"]), "accepted") for c in sent]
    assert result.orders == recorded["body"]["orders"]
    assert (result.cash, result.equity) == (float(standin.trading.account["cash"]),
                                            float(standin.trading.account["equity"]))

    # the same bar again, in this session or a new one: nothing is sent
    before = len(standin.trading.calls)
    for _ in range(2):
        with trading_session(champion, log_to_mlflow=False) as session:
            again = session.loop.cycle()
        assert again.orders == result.orders
    assert posts(standin, before) == [] and len(standin.trading.orders) == len(orders)

    out, err = capsys.readouterr()
    for text in (caplog.text, out, err):
        assert SECRET not in text
    assert "pdr-v1-" in caplog.text  # the cycle did log its orders
    assert SECRET.encode() not in journal_text(champion) and KEY_ID.encode() not in journal_text(champion)


def test_restart_after_a_crash_between_submit_and_record_sends_nothing_new(
        champion: Params, standin: AlpacaStandin, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with pytest.raises(Killed):
        cycle_planned(champion, standin, kill=True)
    first = posts(standin)
    day = str(feature_set.load(champion.dirs.features).timestamps[-1])[:10]
    [state] = [r["state"] for r in journal(champion, standin).cycles(day)]
    assert state == "planned" and len(first) == 4 and all(c.status == 200 for c in first)
    orders = dict(standin.trading.orders)

    before = len(standin.trading.calls)
    with trading_session(champion, log_to_mlflow=False) as session:  # a fresh process: a new loop
        result = session.loop.cycle()
    assert result.resumed
    resent = posts(standin, before)
    ids = [c.body["client_order_id"] for c in first]
    assert [c.body for c in resent] == [c.body for c in first]
    assert [c.status for c in resent] == [422] * len(ids)  # "client_order_id must be unique"
    fetched = [c for c in standin.trading.calls[before:] if c.path == "/v2/orders:by_client_order_id"]
    assert [(c.query["client_order_id"], c.status) for c in fetched] == [(i, 200) for i in ids]
    assert standin.trading.orders == orders  # no new order at the broker
    assert [o["id"] for o in result.orders] == list(orders)
    [recorded] = journal(champion, standin).cycles(day)
    assert recorded["state"] == "recorded" and recorded["body"]["orders"] == result.orders
    assert SECRET not in caplog.text and SECRET.encode() not in journal_text(champion)


@pytest.mark.parametrize("env", [{}, {"APCA_API_KEY_ID": KEY_ID}, {"APCA_API_SECRET_KEY": SECRET}])
def test_missing_keys_are_a_one_line_config_error(tmp_path: Path, standin: AlpacaStandin,
                                                  monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    for name in ("APCA_API_KEY_ID", "APCA_API_SECRET_KEY"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    params = tiny_params(tmp_path, "trade.broker=alpaca", f"trade.url={standin.url}")
    with pytest.raises(ConfigError) as excinfo, trading_session(params, log_to_mlflow=False):
        pass
    text = str(excinfo.value)
    assert "\n" not in text and "APCA_API_KEY_ID" in text and "APCA_API_SECRET_KEY" in text
    assert SECRET not in text and KEY_ID not in text
    assert standin.trading.calls == []  # nothing was sent without keys


def test_a_broker_on_this_machine_is_reached_directly_whatever_proxy_the_environment_names(
        standin: AlpacaStandin, monkeypatch: pytest.MonkeyPatch) -> None:
    """The loop's client skips the environment's proxy for a broker on 127.0.0.1 (requests
    would send it to the proxy, and look the proxy up on every call); Alpaca's own API still goes
    through it."""
    import requests
    from alpaca.trading.client import TradingClient

    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    keys = Keys(KEY_ID, SECRET)
    with pytest.raises(requests.exceptions.ProxyError):  # what the environment does to a plain client
        TradingClient(KEY_ID, SECRET, paper=True, url_override=standin.url).get_account()
    assert trading_client(keys, standin.url).get_account().account_number == "010203ABCD"
    assert trading_client(keys, None)._session.trust_env and trading_client(
        keys, "https://paper-api.alpaca.markets")._session.trust_env


def test_standin_answers_in_alpacas_shapes(standin: AlpacaStandin) -> None:
    """The stand-in's own contract, through alpaca-py: keys required, recorded shapes parse,
    client order ids unique, cancels and the order list as Alpaca answers them."""
    from alpaca.common.exceptions import APIError
    from alpaca.trading.client import TradingClient
    from alpaca.trading.enums import OrderSide, OrderStatus, TimeInForce
    from alpaca.trading.requests import GetOrdersRequest, MarketOrderRequest

    with pytest.raises(APIError) as excinfo:
        TradingClient(KEY_ID, "wrong", paper=True, url_override=standin.url).get_account()
    assert (excinfo.value.status_code, excinfo.value.code) == (401, 40110000)
    client = TradingClient(KEY_ID, SECRET, paper=True, url_override=standin.url)
    assert client.get_account().account_number == "010203ABCD" and client.get_all_positions() == []
    assert client.get_clock().is_open is False
    order = client.submit_order(MarketOrderRequest(symbol="SYN000", qty=7, side=OrderSide.BUY,
                                                   time_in_force=TimeInForce.DAY, client_order_id="c-1"))
    assert (order.symbol, order.qty, order.status, order.client_order_id) == ("SYN000", "7", OrderStatus.ACCEPTED,
                                                                              "c-1")
    with pytest.raises(APIError) as excinfo:
        client.submit_order(MarketOrderRequest(symbol="SYN001", qty=1, side=OrderSide.SELL,
                                               time_in_force=TimeInForce.DAY, client_order_id="c-1"))
    assert (excinfo.value.status_code, excinfo.value.message) == (422, "client_order_id must be unique")
    assert client.get_order_by_client_id("c-1").id == order.id
    assert [o.id for o in client.get_orders(GetOrdersRequest(status="open", limit=500))] == [order.id]
    client.cancel_order_by_id(order.id)
    assert client.get_order_by_id(order.id).status == OrderStatus.CANCELED
    assert client.get_orders(GetOrdersRequest(status="open")) == []
    with pytest.raises(APIError) as excinfo:
        client.submit_order(MarketOrderRequest(symbol="SYN000", qty=7, side=OrderSide.BUY,
                                               time_in_force=TimeInForce.DAY, client_order_id="c-1"))
    assert excinfo.value.status_code == 422  # unique even after a cancel
    standin.trading.fills["SYN001"] = 101.5
    second = client.submit_order(MarketOrderRequest(symbol="SYN001", qty=2, side=OrderSide.SELL,
                                                    time_in_force=TimeInForce.DAY))
    filled = client.get_order_by_id(second.id)
    assert (filled.status, filled.filled_qty, filled.filled_avg_price) == (OrderStatus.FILLED, "2", "101.5")
    standin.trading.market_open = True
    third = client.submit_order(MarketOrderRequest(symbol="SYN002", qty=3, side=OrderSide.BUY,
                                                   time_in_force=TimeInForce.DAY))
    assert third.status == OrderStatus.NEW and client.get_clock().is_open is True
    assert [c.id for c in client.cancel_orders()] == [third.id]
    with pytest.raises(APIError) as excinfo:
        client.get_order_by_id("0b11f089-722d-4ced-9beb-e2eeed3637dc")
    assert (excinfo.value.status_code, excinfo.value.code) == (404, 40410000)
    assert all(c.status is not None for c in standin.trading.calls)


SAME_KEYS = {"APCA_SHADOW_API_KEY_ID": KEY_ID, "APCA_SHADOW_API_SECRET_KEY": SECRET}


@pytest.mark.parametrize("shadow_keys, said", [({}, "it needs a second key pair"),
                                               (SAME_KEYS, "its keys reach the champion's account")])
def test_on_alpaca_a_shadow_without_an_account_of_its_own_does_not_trade(
        champion: Params, standin: AlpacaStandin, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch,
        shadow_keys: dict[str, str], said: str) -> None:
    """docs/delivery.md, Shadow accounts: one warning line, and the champion trades alone."""
    from mlflow import MlflowClient

    from tasks.delivery.client.deliver import cycle
    from tasks.registry.store import connect

    for name, value in shadow_keys.items():
        monkeypatch.setenv(name, value)
    connect(champion.registry)
    MlflowClient().set_registered_model_alias(champion.registry.model_name, "shadow", "1")
    caplog.set_level(logging.WARNING)
    with trading_session(champion, log_to_mlflow=False) as session:
        result = cycle(session)
        again = cycle(session)  # a second cycle in the session says nothing more
    assert result.shadow is None and again.shadow is None
    assert [c.body["client_order_id"][:7] for c in posts(standin)] == ["pdr-v1-"] * 4  # the champion's alone
    warnings = [r.getMessage() for r in caplog.records if "shadow does not trade" in r.getMessage()]
    assert len(warnings) == 1 and said in warnings[0] and SECRET not in caplog.text
