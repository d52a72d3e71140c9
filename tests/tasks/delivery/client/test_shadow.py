"""Shadow trading (docs/delivery.md, Shadow accounts): in one delivery cycle the champion trades in
its account and the shadow in its own, through the same loop, with client order ids of their own."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import mlflow
import pytest
from mlflow import MlflowClient

from standins.tiny import tiny_params
from tasks.config import Params
from tasks.data import feature_set
from tasks.delivery.client.deliver import DELIVERED, deliver
from tasks.delivery.client.journal import JOURNAL, Journal
from tasks.delivery.client.loop import NoChampion, client_order_id
from tasks.delivery.keys import CHAMPION, ROLES, SHADOW
from tasks.registry import aliases
from tasks.registry.store import connect
from tests.tasks.delivery.client.test_deliver import NOBODY
from tests.tasks.delivery.client.test_loop import champion as register_biased

CHAMPION_BIAS, SHADOW_BIAS = [3.0, 3.0, 3.0, 3.0], [3.0, -3.0, 3.0, -3.0]
"""Output biases: the champion asks +99 shares of every symbol, the shadow +99 of SYN000 and SYN002
(and to sell the others, of which it holds none)."""


def ledger_orders(db: Path) -> list[str]:
    with sqlite3.connect(db) as connection:
        return [cid for (cid,) in connection.execute("SELECT client_order_id FROM orders ORDER BY seq")]


def account_id(db: Path) -> str:
    with sqlite3.connect(db) as connection:
        return connection.execute("SELECT id FROM account").fetchone()[0]


def with_aliases(params: Params, champion: str | None, shadow: str | None) -> None:
    """Set the two aliases by hand, as the CT cycle leaves them (a shadow carries ``shadow_since``)."""
    connect(params.registry)
    store, name = MlflowClient(), params.registry.model_name
    for alias, version in ((CHAMPION, champion), (SHADOW, shadow)):
        if version is None:
            store.delete_registered_model_alias(name, alias)
        else:
            store.set_registered_model_alias(name, alias, version)
    if shadow is not None:
        store.set_model_version_tag(name, shadow, "shadow_since", "2021-12-30")


@pytest.fixture
def two_versions(built_copy: Params, tmp_path: Path) -> tuple[Params, str, str]:
    """Version 1 (buys everything) and version 2 (buys SYN000 and SYN002), on params whose cycle
    starts a local broker over data/broker/ (no broker answers at ``trade.url``)."""
    params = tiny_params(tmp_path, "registry.gate_margin=-1000", f"trade.url={NOBODY}")
    return params, register_biased(params, CHAMPION_BIAS), register_biased(params, SHADOW_BIAS)


def test_client_order_ids_are_deterministic_and_differ_per_account():
    assert client_order_id("3", "2021-12-31", "SYN000") == "pdr-v3-20211231-SYN000"  # the champion's, as before
    assert client_order_id("3", "2021-12-31", "SYN000", SHADOW) == "pdr-shadow-v3-20211231-SYN000"
    assert client_order_id("3", "2021-12-31", "SYN000", SHADOW) == client_order_id("3", "2021-12-31", "SYN000", SHADOW)
    assert client_order_id("3", "2021-12-31", "SYN000", SHADOW) != client_order_id("3", "2021-12-31", "SYN000")
    assert ROLES == (aliases.CHAMPION, aliases.SHADOW)  # an account's role is the alias that trades in it


def test_one_cycle_trades_the_champion_and_the_shadow_each_in_its_own_account(two_versions):
    params, first, second = two_versions
    with_aliases(params, champion=first, shadow=second)
    bar = str(feature_set.load(params.dirs.features).timestamps[-1])[:10]
    result = deliver(params)  # `podracer trade --once`

    champion_db, shadow_db = params.dirs.broker / "broker.db", params.dirs.broker / "broker-shadow.db"
    champion_ids = [client_order_id(first, bar, f"SYN00{i}") for i in range(4)]
    shadow_ids = [client_order_id(second, bar, s, SHADOW) for s in ("SYN000", "SYN002")]
    assert ledger_orders(champion_db) == champion_ids  # the champion's orders, and no other
    assert ledger_orders(shadow_db) == shadow_ids  # the shadow's, and no other
    assert not set(ledger_orders(champion_db)) & set(ledger_orders(shadow_db))
    assert (result.role, result.version, result.bar) == (CHAMPION, first, bar)
    assert result.shadow is not None and (result.shadow.role, result.shadow.version) == (SHADOW, second)
    assert [o["client_order_id"] for o in result.shadow.orders] == shadow_ids
    # open orders: `accepted` while the wall clock's market is closed, `new` while it is open
    statuses = [o["status"] for o in result.orders + result.shadow.orders]
    assert len(statuses) == 6 and len(set(statuses)) == 1 and statuses[0] in ("accepted", "new")

    assert json.loads((params.dirs.broker / DELIVERED).read_text())["version"] == first  # the champion's alone
    journal = params.dirs.broker / JOURNAL
    assert account_id(champion_db) != account_id(shadow_db)
    assert [(r["model_version"], r["state"]) for r in Journal(journal, account_id(champion_db)).cycles()] == [
        (first, "recorded")]
    assert [(r["model_version"], r["state"]) for r in Journal(journal, account_id(shadow_db)).cycles()] == [
        (second, "recorded")]
    run = mlflow.search_runs(experiment_names=[params.trade.experiment]).iloc[0]
    assert (run["metrics.orders"], run["metrics.model_version"]) == (4.0, float(first))
    assert (run["metrics.shadow_orders"], run["metrics.shadow_model_version"]) == (2.0, float(second))

    again = deliver(params)  # a restarted loop on the same bar sends nothing, in either account
    assert again.shadow is not None and ledger_orders(champion_db) == champion_ids
    assert ledger_orders(shadow_db) == shadow_ids


def test_without_a_shadow_only_the_champion_trades_and_without_a_champion_the_shadow_still_does(two_versions):
    params, first, second = two_versions
    with_aliases(params, champion=first, shadow=None)
    alone = deliver(params)
    assert alone.shadow is None and len(alone.orders) == 4
    assert not (params.dirs.broker / "broker-shadow.db").exists()  # no shadow account was opened

    (params.dirs.broker / DELIVERED).unlink()
    with_aliases(params, champion=None, shadow=second)
    only = deliver(params)
    assert (only.role, only.version, only.shadow) == (SHADOW, second, None)
    assert [o["symbol"] for o in only.orders] == ["SYN000", "SYN002"]
    assert ledger_orders(params.dirs.broker / "broker-shadow.db") == [o["client_order_id"] for o in only.orders]
    assert not (params.dirs.broker / DELIVERED).exists()  # no champion traded: nothing delivered

    with_aliases(params, champion=None, shadow=None)
    with pytest.raises(NoChampion, match="nothing delivered"):
        deliver(params)
