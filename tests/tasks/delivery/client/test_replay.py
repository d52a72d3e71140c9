"""Serving equals training: the champion replayed on the paper broker equals its backtest to the cent.

The replay drives a fresh simulated account through alpaca-py, bar by bar over the test
window; the backtest runs the same policy through the training env. Both curves must
agree to the cent, with the same fills and costs, including when the cash runs short and
the buys are scaled down at the open.
"""

from __future__ import annotations

import json
import sqlite3

import mlflow
import pandas as pd
import pytest
import torch

from standins.tiny import tiny_params
from tasks.data import feature_set
from tasks.delivery.client.loop import Policy
from tasks.delivery.client.replay import REPLAY_DB, REPLAY_JOURNAL, replay, verdict
from tasks.model import bundle
from tasks.model.backtest import CURVE_FILE, backtest
from tasks.registry.register import register
from tasks.registry.store import client
from trainers.population.ensemble import Ensemble


def test_a_replay_of_the_test_window_equals_the_backtest_to_the_cent(built_copy, tmp_path):
    params = tiny_params(tmp_path, "registry.gate_margin=-1000")
    register(params)
    result = replay(params, "test")
    curve = pd.read_csv(params.dirs.backtest / CURVE_FILE, index_col=0)
    assert (result.start, result.end, result.bars) == (curve.index[1][:10], curve.index[-1][:10], len(curve) - 1)
    assert result.equal_to_the_cent and result.max_difference < 0.005
    assert verdict(result).startswith("equal to the backtest to the cent")
    assert result.final_equity == pytest.approx(curve["agent"].iloc[-1], abs=0.005)
    assert result.plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    run = mlflow.search_runs(experiment_names=[params.trade.experiment]).iloc[0]
    assert run["metrics.replay_max_difference"] == result.max_difference
    assert run["metrics.replay_bars"] == result.bars and run["params.broker"] == "local"


def test_parity_holds_when_the_cash_runs_short_and_the_policy_sells(built_copy, tmp_path):
    """A saturated policy (output layer ×50) on a 20,000 account: it buys and sells hmax shares
    by the sign of its features, and the cash binds, so the open's pro rata scaling is exercised."""
    params = saturated(tiny_params(tmp_path, "registry.gate_margin=-1000", "env.initial_cash=20000"),
                       initial_cash=20_000.0)
    result = replay(params, "test")
    assert result.equal_to_the_cent, verdict(result)
    with sqlite3.connect(params.dirs.broker / REPLAY_DB) as db:
        sells = db.execute("SELECT COUNT(*) FROM fills WHERE side = 'sell'").fetchone()[0]
        scaled = db.execute("SELECT COUNT(*) FROM orders WHERE side = 'buy' AND filled_qty < qty").fetchone()[0]
        replayed = db.execute("SELECT SUM(amount) FROM cash_ledger").fetchone()[0]
        cash = db.execute("SELECT cash FROM account").fetchone()[0]
    assert sells > 0 and scaled > 0  # both rules were exercised
    assert replayed == pytest.approx(cash, abs=0.005)  # the cash lines replay the account to the cent


def test_a_replay_lists_what_the_live_risk_checks_would_have_blocked_with_each_reason(built_copy, tmp_path):
    """The saturated policy on a 20,000 account, under a 1,000 order cap and a 0.2% daily loss
    limit: the replay sends everything (parity holds), and flagged.csv lists exactly the orders
    whose notional at their bar's close is over the cap, and exactly the bars whose equity fell
    more than 0.2% below the previous close."""
    params = saturated(tiny_params(tmp_path, "registry.gate_margin=-1000", "env.initial_cash=20000",
                                   "trade.risk.max_order_notional=1000", "trade.risk.max_position_weight=1",
                                   "trade.risk.daily_loss_limit=0.002"), initial_cash=20_000.0)
    result = replay(params, "test")
    assert result.equal_to_the_cent, verdict(result)
    flagged = pd.read_csv(result.risk, dtype={"bar": str})
    fs = feature_set.load(params.dirs.features)
    index = {pd.Timestamp(ts).strftime("%Y%m%d"): t for t, ts in enumerate(fs.timestamps)}
    with sqlite3.connect(params.dirs.broker / REPLAY_DB) as db:
        orders = db.execute("SELECT client_order_id, symbol, qty FROM orders").fetchall()
    notional = {cid: qty * fs.prices[index[cid.split("-")[2]], fs.symbols.index(symbol)] for cid, symbol, qty in orders}
    capped = flagged[flagged["reason"].str.startswith("order notional ", na=False)]
    assert set(capped["client_order_id"]) == {cid for cid, value in notional.items() if value > 1_000.0} != set()
    for bar, cid, reason in zip(capped["bar"], capped["client_order_id"], capped["reason"]):  # its bar, its notional
        assert bar.replace("-", "") == cid.split("-")[2]
        assert reason.startswith(f"order notional {notional[cid]:,.0f} > max_order_notional 1,000, below ")
    curve = pd.read_csv(result.curve)  # the cycle at a bar's close sees the previous close as last_equity
    paper = curve["paper"].to_numpy()
    fell = [curve["ts"].iloc[i][:10] for i in range(1, len(paper) - 1) if paper[i] < paper[i - 1] * (1 - 0.002)]
    halts = flagged[flagged["client_order_id"].isna()]
    assert halts["bar"].tolist() == fell != [] and halts["reason"].str.startswith("daily loss ").all()
    assert result.halts == len(fell)
    assert result.flagged == len(capped) == len(flagged) - len(halts)
    assert f"would have blocked {result.flagged} order(s) and halted on {result.halts} bar(s)" in verdict(result)


def test_a_policy_that_holds_its_decisions_replays_on_the_same_schedule(built_copy, tmp_path):
    """``env.decide_every: 3``: the loop decides on the window's first bar and every third bar
    after it, as the backtest's env did, and on the bars between sends no order."""
    params = saturated(tiny_params(tmp_path, "registry.gate_margin=-1000"), decide_every=3)
    result = replay(params, "test")
    assert result.equal_to_the_cent, verdict(result)
    with sqlite3.connect(params.dirs.broker / REPLAY_JOURNAL) as db:
        cycles = db.execute("SELECT bar, body FROM trading_cycles ORDER BY bar").fetchall()
    with sqlite3.connect(params.dirs.broker / REPLAY_DB) as db:
        # pdr-v1-YYYYMMDD-SYM
        ordered = {cid.split("-")[2] for (cid,) in db.execute("SELECT client_order_id FROM orders")}
    decided = [json.loads(body)["decided"] for _, body in cycles]
    assert len(cycles) == result.bars and decided == [i % 3 == 0 for i in range(result.bars)]
    assert ordered and ordered <= {bar.replace("-", "") for (bar, _), d in zip(cycles, decided) if d}


def test_an_ensemble_champion_replays_equal_to_its_backtest(built_copy, tmp_path):
    """The trained actor and its saturated copy as a two-member ensemble bundle: the pyfunc
    serves it through the paper broker exactly as the backtest's env ran it."""
    params = as_ensemble(tiny_params(tmp_path, "registry.gate_margin=-1000"))
    served = Policy(params).current()[1].unwrap_python_model()
    assert isinstance(served.actor, Ensemble) and len(served.meta.members) == 2
    store = client(params.registry)
    latest = max(store.search_model_versions(f"name='{params.registry.model_name}'"), key=lambda v: int(v.version))
    assert (latest.tags["algorithm"], latest.tags["members"]) == ("ensemble", "job 0 (ppo), job 1 (ppo)")
    result = replay(params, "test")
    assert result.equal_to_the_cent, verdict(result)


def as_ensemble(params):
    """Rewrite the trained bundle as an ensemble of its actor and a copy whose output layer
    is ×50 (so the two disagree), then backtest and register it again."""
    weights = torch.load(params.dirs.models / bundle.WEIGHTS, weights_only=True)
    last = max(k for k in weights if k.endswith(".weight") and k.startswith("net."))
    torch.save(bundle.ensemble_weights([weights, {**weights, last: weights[last] * 50.0}]),
               params.dirs.models / bundle.WEIGHTS)
    meta = json.loads((params.dirs.models / bundle.META).read_text())
    meta["members"] = [{"algorithm": "ppo", "net_dims": meta["net_dims"], "fitness": 0.0, "job": j} for j in (0, 1)]
    meta["algorithm"] = "ensemble"
    (params.dirs.models / bundle.META).write_text(json.dumps(meta))
    backtest(params)
    register(params)
    return params


def saturated(params, **env):
    """Scale the trained policy's output layer ×50, so it buys and sells hmax shares by the
    sign of its features, set ``env`` in its bundle, and backtest and register it again."""
    weights = torch.load(params.dirs.models / bundle.WEIGHTS, weights_only=True)
    last = max(k for k in weights if k.endswith(".weight") and k.startswith("net."))
    weights[last] = weights[last] * 50.0
    torch.save(weights, params.dirs.models / bundle.WEIGHTS)
    meta = json.loads((params.dirs.models / bundle.META).read_text())
    meta["env"].update(env)
    (params.dirs.models / bundle.META).write_text(json.dumps(meta))
    backtest(params)
    register(params)
    return params
