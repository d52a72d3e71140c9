"""Serving equals training on minute bars: a week of minute bars replayed equals the backtest to the cent.

A tiny 1-minute pipeline (4 symbols, 2023-10-02..2023-11-24) whose test window is the
Thanksgiving week: 11-20, 11-21 and 11-22 (390 minutes each), the holiday, and the 11-24 half
day (210 minutes, closing at 13:00 New York). The replayed policy decides every 5th bar
(``env.decide_every: 5``, as ``params.yaml`` ships), so its decisions land on every session's
last minute, whose orders fill at the next session's first open, across the night and the holiday.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import date
from pathlib import Path

import pandas as pd
import pytest
from alpaca.trading.client import TradingClient

from standins.tiny import tiny_params
from tasks.config import Params
from tasks.data import feature_set
from tasks.delivery.client.journal import JOURNAL, Journal
from tasks.delivery.client.local import local_broker
from tasks.delivery.client.loop import TradingLoop
from tasks.delivery.client.replay import REPLAY_DB, REPLAY_JOURNAL, replay, verdict
from tasks.delivery.keys import local_keys
from tasks.errors import ConfigError, DataError
from tasks.model import bundle
from tasks.registry.register import register
from tests.conftest import built_once
from tests.tasks.delivery.client.test_replay import saturated

MINUTE = ["data.freq=1min", "data.start=2023-10-02", "data.end=2023-11-24", "features.train_end=2023-11-03",
          "features.val_end=2023-11-17", "features.turbulence_refresh=390"]


def minute_params(root: Path, *overrides: str) -> Params:
    return tiny_params(root, *MINUTE, *overrides)


@pytest.fixture(scope="module")
def minute_built(tmp_path_factory: pytest.TempPathFactory) -> Params:
    """Ingest → validate → features → train → backtest once, on tiny minute bars (read-only)."""
    return built_once(tmp_path_factory, "minutes", minute_params)


@pytest.fixture
def minute_copy(minute_built: Params, tmp_path: Path) -> Params:
    import shutil

    shutil.copytree(minute_built.data_dir, tmp_path / "data")
    return minute_params(tmp_path, "registry.gate_margin=-1000")


@pytest.mark.slow
def test_a_week_of_minute_bars_replays_equal_to_the_backtest_to_the_cent(minute_copy):
    params = saturated(minute_copy, decide_every=5)  # it trades every decision, buys and sells
    result = replay(params, "test")
    assert (result.start, result.end, result.bars) == ("2023-11-20T14:30Z", "2023-11-24T17:59Z", 3 * 390 + 210)
    assert result.equal_to_the_cent, verdict(result)
    with sqlite3.connect(params.dirs.broker / REPLAY_JOURNAL) as db:
        cycles = db.execute("SELECT bar, body FROM trading_cycles ORDER BY bar").fetchall()
    decided = [json.loads(body)["decided"] for _, body in cycles]
    assert len(cycles) == result.bars and decided == [i % 5 == 0 for i in range(result.bars)]
    assert cycles[0][0] == "2023-11-17T20:59Z"  # the bar before the window: the 11-17 close
    with sqlite3.connect(params.dirs.broker / REPLAY_DB) as db:
        orders = db.execute("SELECT client_order_id, status, coalesce(filled_at, canceled_at) FROM orders").fetchall()
    assert all(len(cid.split("-")[2]) == 12 for cid, _, _ in orders)  # pdr-v1-YYYYMMDDHHMM-SYM
    assert {status for _, status, _ in orders} <= {"filled", "canceled"}  # none expired: each met its next open
    # decided at a session's last minute (15:59 New York): done at the next session's first open
    next_open = {"202311172059": "2023-11-20T14:30", "202311202059": "2023-11-21T14:30",
                 "202311212059": "2023-11-22T14:30", "202311222059": "2023-11-24T14:30"}  # 11-23: Thanksgiving
    overnight = [(cid.split("-")[2], at) for cid, _, at in orders if cid.split("-")[2] in next_open]
    assert "202311222059" in {bar for bar, _ in overnight}
    assert all(at == f"{next_open[bar]}:00+00:00" for bar, at in overnight)


def test_minute_bars_are_keyed_by_their_minute_and_a_bar_not_yet_closed_is_refused(minute_copy, tmp_path):
    register(minute_copy)
    stamps = feature_set.load(minute_copy.dirs.features).timestamps
    t = len(stamps) - 3
    keys = local_keys(minute_copy)
    start = pd.Timestamp(stamps[t - 1], tz="UTC").to_pydatetime()
    with local_broker(minute_copy, ledger=tmp_path / "desk.db", clock="simulated", day=start) as url:
        client = TradingClient(keys.key_id, keys.secret, url_override=url)
        loop = TradingLoop(minute_copy, client, Journal.of(client, minute_copy.dirs.broker / JOURNAL))
        with pytest.raises(DataError, match="2023-11-24T17:57Z is after the broker's clock"):
            loop.cycle(t)  # the clock stands at the close of the bar before: this one has not closed
        result = loop.cycle(t - 1)
        assert result.bar == "2023-11-24T17:56Z" and result.decided
        assert [r["bar"] for r in loop.journal.cycles()] == ["2023-11-24T17:56Z"]
        assert all(o["client_order_id"].startswith("pdr-v1-202311241756-") for o in result.orders)


def test_a_model_that_flattens_overnight_is_refused_in_one_line(minute_copy, tmp_path):
    meta = json.loads((minute_copy.dirs.models / bundle.META).read_text())
    meta["env"]["overnight"] = "flatten"
    (minute_copy.dirs.models / bundle.META).write_text(json.dumps(meta))
    register(minute_copy)
    keys = local_keys(minute_copy)
    with local_broker(minute_copy, ledger=tmp_path / "desk.db", clock="simulated", day=date(2023, 11, 24)) as url:
        client = TradingClient(keys.key_id, keys.secret, url_override=url)
        loop = TradingLoop(minute_copy, client, Journal.of(client, minute_copy.dirs.broker / JOURNAL))
        with pytest.raises(ConfigError, match="carries positions overnight only"):
            loop.cycle()
