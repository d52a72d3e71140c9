"""The one delivery cycle: on the broker that answers, or on one it starts; it records what it delivered."""

from __future__ import annotations

import sqlite3
import threading

from standins.tiny import tiny_params
from tasks.data import feature_set
from tasks.delivery.client import live
from tasks.delivery.client.deliver import DELIVERED, deliver, delivered_version
from tasks.delivery.client.local import local_broker
from tasks.registry.store import client
from tasks.registry.tags import WATCH_LINE, WATCH_SINCE, WATCH_VERDICT
from tests.tasks.delivery.client.test_loop import champion

BUY_ALL = [3.0, 3.0, 3.0, 3.0]
"""The champion's output bias: +99 shares of every symbol, so a cycle always sends orders."""

NOBODY = "http://127.0.0.1:9"
"""A URL where no broker answers (the discard port)."""


def orders(db) -> list[tuple[str, str]]:
    with sqlite3.connect(db) as connection:
        return connection.execute("SELECT client_order_id, status FROM orders ORDER BY seq").fetchall()


def test_deliver_starts_a_broker_when_none_answers_and_the_live_loop_records_the_same_cycle(built_copy, tmp_path):
    params = tiny_params(tmp_path, "registry.gate_margin=-1000", f"trade.url={NOBODY}")
    version = champion(params, BUY_ALL)
    bar = str(feature_set.load(params.dirs.features).timestamps[-1])[:10]
    result = deliver(params)
    assert (result.version, result.bar) == (version, bar) and result.orders
    # the broker it started served data/broker/broker.db: the orders wait there, open (`accepted`
    # while the wall clock's market is closed, `new` while it is open), one status for all
    sent = orders(params.dirs.broker / "broker.db")
    assert [i for i, _ in sent] == [o["client_order_id"] for o in result.orders]
    assert len({s for _, s in sent}) == 1 and sent[0][1] in ("accepted", "new")
    assert delivered_version(params) == version
    # its first bar as champion starts its watch, which looks once the cycle is recorded
    tags = client(params.registry).get_model_version(params.registry.model_name, version).tags
    assert tags[WATCH_SINCE] == bar and tags[WATCH_VERDICT] == "fault"
    assert tags[WATCH_LINE].endswith("no test, only 0 bars since the promotion (the watch needs at least 10)")

    (params.dirs.broker / DELIVERED).unlink()
    stop, shown = threading.Event(), []
    trading = threading.Thread(target=live.forever, args=(params, lambda r: (shown.append(r), stop.set()), stop))
    trading.start()
    trading.join(timeout=300)
    assert not trading.is_alive() and [(r.version, r.bar) for r in shown] == [(version, bar)]
    assert delivered_version(params) == version  # recorded by the live loop's cycle too
    assert orders(params.dirs.broker / "broker.db") == sent  # the journal knew the bar was traded


def test_deliver_trades_on_the_broker_answering_at_trade_url(built_copy, tmp_path):
    params = tiny_params(tmp_path, "registry.gate_margin=-1000")
    version = champion(params, BUY_ALL)
    ledger = tmp_path / "running.db"
    with local_broker(params, ledger=ledger, clock="simulated") as url:
        result = deliver(params.model_copy(update={"trade": params.trade.model_copy(update={"url": url})}))
    assert result.version == version and result.orders
    assert [cid for cid, _ in orders(ledger)] == [o["client_order_id"] for o in result.orders]
    assert not (params.dirs.broker / "broker.db").exists()  # no second broker was started
    assert delivered_version(params) == version
