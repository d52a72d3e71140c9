"""The trading loop on a simulated paper broker: orders, idempotent restarts, champion swaps, risk.

Each test registers the tiny pipeline's policy as champion, with its output layer set by
hand where the test needs known actions: tanh(±3) asks for ±99 shares (hmax 100).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from pathlib import Path

import mlflow
import numpy as np
import pytest
import torch
from alpaca.trading.client import TradingClient
from alpaca.trading.enums import OrderSide, QueryOrderStatus, TimeInForce
from alpaca.trading.requests import GetOrdersRequest, LimitOrderRequest, MarketOrderRequest

from standins.tiny import tiny_params
from tasks.config import Params
from tasks.config_ops import RiskParams
from tasks.data import feature_set
from tasks.data.indicators import MARKET_WIDE
from tasks.delivery.client.journal import JOURNAL, Journal
from tasks.delivery.client.local import local_broker
from tasks.delivery.client.loop import Policy, TradingLoop, client_order_id
from tasks.delivery.client.replay import advance
from tasks.delivery.client.risk import halt
from tasks.delivery.keys import local_keys
from tasks.errors import DataError
from tasks.model import bundle
from tasks.registry.register import register


@dataclass
class Desk:
    params: Params
    url: str
    client: TradingClient
    bars: list[str]

    def loop(self, params: Params | None = None) -> TradingLoop:
        """A new loop (as in a new process: only the journal file and the broker remain), on ``params``."""
        params = params or self.params
        return TradingLoop(params, self.client, Journal.of(self.client, params.dirs.broker / JOURNAL))

    def advance(self, to: str) -> None:
        advance(self.url, local_keys(self.params), to)

    def orders(self) -> list:
        return self.client.get_orders(GetOrdersRequest(status=QueryOrderStatus.ALL, direction="asc", limit=500))


def champion(params: Params, bias: list[float] | None) -> str:
    """Register the bundle (its output bias set to ``bias``, if given) as the new champion."""
    if bias is not None:
        weights = torch.load(params.dirs.models / bundle.WEIGHTS, weights_only=True)
        last = max(k for k in weights if k.endswith(".bias"))
        weights[last] = torch.tensor(bias)
        weights[last.replace("bias", "weight")] = torch.zeros_like(weights[last.replace("bias", "weight")])
        torch.save(weights, params.dirs.models / bundle.WEIGHTS)
    return register(params).version


@pytest.fixture
def desk(built_copy: Params, tmp_path: Path):
    """A champion and a fresh simulated account standing at the close of the fifth-last bar."""
    params = tiny_params(tmp_path, "registry.gate_margin=-1000", "trade.fill_timeout_seconds=2")
    bars = [str(t)[:10] for t in feature_set.load(params.dirs.features).timestamps[-5:]]
    keys = local_keys(params)
    with local_broker(params, ledger=tmp_path / "desk.db", clock="simulated", day=date.fromisoformat(bars[0])) as url:
        yield Desk(params, url, TradingClient(keys.key_id, keys.secret, url_override=url), bars)


def test_a_cycle_sends_the_policys_orders_sells_first_and_a_new_champion_takes_over(desk):
    first = champion(desk.params, [3.0, 3.0, 3.0, 3.0])
    pinned = Policy(desk.params, pinned=True)  # what a replay trades: the champion it started with
    assert pinned.current()[0] == first
    loop = desk.loop()
    bought = loop.cycle(len(feature_set.load(desk.params.dirs.features).timestamps) - 5)
    assert [(o["symbol"], o["side"], o["qty"], o["status"]) for o in bought.orders] == [
        (f"SYN00{i}", "buy", 99, "accepted") for i in range(4)]
    assert bought.orders[0]["client_order_id"] == client_order_id(first, desk.bars[0], "SYN000")
    desk.advance("bar")
    second = champion(desk.params, [3.0, 3.0, -3.0, -3.0])
    mixed = loop.cycle(len(feature_set.load(desk.params.dirs.features).timestamps) - 4)
    assert mixed.swapped_from == first and mixed.version == second
    assert pinned.current()[0] == first
    assert [(o["symbol"], o["side"], o["qty"]) for o in mixed.orders] == [
        ("SYN002", "sell", 99), ("SYN003", "sell", 99), ("SYN000", "buy", 99), ("SYN001", "buy", 99)]
    desk.advance("open")
    held = {p.symbol: int(p.qty) for p in desk.client.get_all_positions()}
    assert held["SYN000"] == 198 and "SYN002" not in held  # sells filled first; buys as the cash allowed


def test_the_same_bar_twice_sends_nothing_and_a_killed_cycle_resumes_without_duplicates(desk):
    champion(desk.params, [3.0, -3.0, 3.0, -3.0])
    t = len(feature_set.load(desk.params.dirs.features).timestamps) - 5

    def killed() -> None:
        raise KeyboardInterrupt("killed between submit and record")

    with pytest.raises(KeyboardInterrupt):
        desk.loop().cycle(t, after_submit=killed)
    sent = [o.client_order_id for o in desk.orders()]
    assert sent == [client_order_id("1", desk.bars[0], s) for s in ("SYN000", "SYN002")]
    resumed = desk.loop().cycle(t)  # a new process: memory is gone, the journal and the broker remain
    assert resumed.resumed and [o.client_order_id for o in desk.orders()] == sent
    assert [o["status"] for o in resumed.orders] == ["accepted", "accepted"]
    again = desk.loop().cycle(t)
    assert not again.resumed and [o.client_order_id for o in desk.orders()] == sent
    desk.advance("open")
    desk.client.submit_order(MarketOrderRequest(symbol="SYN001", qty=10, side=OrderSide.BUY,
                                                time_in_force=TimeInForce.DAY))  # a trade the loop never made
    desk.advance("close")
    after = desk.loop().cycle(t + 1)  # its shares come from the broker: it sells the 10 it did not buy
    assert [(o["symbol"], o["side"], o["qty"]) for o in after.orders] == [
        ("SYN001", "sell", 10), ("SYN000", "buy", 99), ("SYN002", "buy", 99)]
    account = desk.client.get_account()
    assert after.equity == float(account.equity) and after.cash == float(account.cash)


def test_a_new_champion_on_the_same_bar_replaces_the_earlier_orders(desk):
    champion(desk.params, [3.0, 3.0, 3.0, 3.0])
    t = len(feature_set.load(desk.params.dirs.features).timestamps) - 5
    desk.loop().cycle(t)
    champion(desk.params, [-3.0, 3.0, -3.0, -3.0])
    replaced = desk.loop().cycle(t)
    states = {o.client_order_id: o.status.value for o in desk.orders()}
    assert [s for cid, s in states.items() if cid.startswith("pdr-v1-")] == ["canceled"] * 4
    assert [o["symbol"] for o in replaced.orders] == ["SYN001"] and states[replaced.orders[0]["client_order_id"]] == \
        "accepted"


def test_orders_over_a_risk_limit_are_not_sent_and_the_halt_switches_stop_the_loop(desk):
    champion(desk.params, [3.0, 3.0, 3.0, 3.0])
    t = len(feature_set.load(desk.params.dirs.features).timestamps) - 5
    strict = desk.params.model_copy(update={"trade": desk.params.trade.model_copy(update={
        "risk": RiskParams(max_order_notional=1.0)})})
    blocked = desk.loop(strict).cycle(t)
    assert blocked.orders == [] and len(blocked.blocked) == 4 and desk.orders() == []
    assert blocked.blocked[0]["reason"].startswith("order notional ") and "> max_order_notional 1" in \
        blocked.blocked[0]["reason"]
    desk.advance("bar")
    halt(desk.params.dirs.broker, "halted by hand")
    stopped = desk.loop().cycle(t + 1)
    assert stopped.halted == "halted by hand" and stopped.orders == [] and desk.orders() == []
    with pytest.raises(DataError, match="after the broker's clock"):
        desk.loop().cycle(t + 3)  # a bar whose open the broker has not reached: trading it would look ahead


def test_a_daily_loss_beyond_the_limit_halts_and_cancels(desk):
    champion(desk.params, [3.0, 3.0, 3.0, 3.0])
    fs = feature_set.load(desk.params.dirs.features)
    last = len(fs.timestamps) - 1
    # the first of the last bars on which 99 shares of each stock bought at the open lose money by the close
    k = next(k for k in range(last - 3, last + 1) if (fs.prices[k] - fs.opens[k]).sum() < 0)
    for _ in range(k - 1 - (last - 4)):
        desk.advance("bar")
    desk.loop().cycle(k - 1)
    desk.advance("bar")  # filled at k's open, marked at k's close: a loss
    resting = desk.client.submit_order(LimitOrderRequest(symbol="SYN000", qty=1, side=OrderSide.BUY,
                                                         time_in_force=TimeInForce.GTC, limit_price=0.01))
    touchy = desk.params.model_copy(update={"trade": desk.params.trade.model_copy(update={
        "risk": RiskParams(daily_loss_limit=1e-9)})})
    result = desk.loop(touchy).cycle(k)
    assert result.halted is not None and result.halted.startswith("daily loss ") and result.orders == []
    assert (desk.params.dirs.broker / "HALT").exists()
    assert desk.client.get_order_by_id(resting.id).status.value == "canceled"


def test_the_keys_stay_out_of_logs_mlflow_and_the_ledger(desk, caplog):
    from tasks.delivery.client.session import trading_session

    caplog.set_level("DEBUG")
    champion(desk.params, [3.0, 3.0, 3.0, 3.0])
    with trading_session(desk.params, run_name="keys", url=desk.url) as session:
        session.loop.cycle(len(feature_set.load(desk.params.dirs.features).timestamps) - 5)
    secret, key_id = local_keys(desk.params).secret, local_keys(desk.params).key_id
    assert oct((desk.params.dirs.broker / "keys.json").stat().st_mode & 0o777) == "0o600"
    assert secret not in caplog.text and key_id not in caplog.text
    run = mlflow.search_runs(experiment_names=[desk.params.trade.experiment]).iloc[0]
    assert not any(secret in str(v) or key_id in str(v) for v in run.to_dict().values())
    stores = [p for p in Path(desk.params.dirs.broker.parent.parent).rglob("*") if p.is_file()
              and p.name != "keys.json"]
    assert stores and not any(secret.encode() in p.read_bytes() for p in stores)


def test_the_champion_never_buys_an_untradable_symbol_and_sells_a_held_one_that_stopped_trading(desk):
    """A ragged universe (docs/data.md): the loop passes the feature set's tradable row with the
    state. SYN003 is not tradable at the first bar (its indicators NaN, as the features stage
    leaves them): every symbol is asked for +99 shares, yet only the three others are bought.
    One bar later SYN000, now held, stops trading: its whole position is sold (first), and
    SYN003 is bought again."""
    champion(desk.params, [3.0, 3.0, 3.0, 3.0])
    folder = desk.params.dirs.features
    fs = feature_set.load(folder)
    t = len(fs.timestamps) - 5
    tradable, raw = np.array(fs.tradable), np.array(fs.features)
    per_stock = [i for i, name in enumerate(fs.feature_names) if name not in MARKET_WIDE]
    for bar, column in ((t, 3), (t + 1, 0)):
        tradable[bar, column] = False
        raw[bar, column, per_stock] = np.nan
    np.save(folder / "tradable.npy", tradable)
    np.save(folder / "features.npy", raw)
    first = desk.loop().cycle(t)
    assert [(o["symbol"], o["side"], o["qty"]) for o in first.orders] == [
        ("SYN000", "buy", 99), ("SYN001", "buy", 99), ("SYN002", "buy", 99)]
    desk.advance("bar")
    held = {p.symbol: int(p.qty) for p in desk.client.get_all_positions()}
    assert held == {"SYN000": 99, "SYN001": 99, "SYN002": 99}  # the cash covers three buys of 99 whole
    second = desk.loop().cycle(t + 1)
    assert [(o["symbol"], o["side"], o["qty"]) for o in second.orders] == [
        ("SYN000", "sell", 99), ("SYN001", "buy", 99), ("SYN002", "buy", 99), ("SYN003", "buy", 99)]
