import json

import numpy as np
import pytest
import torch

import mlflow
from mlflow import MlflowClient
from tasks.data import features
from tasks.delivery.deliver import ACCOUNT_FILE, NoChampion, deliver
from tasks.model import bundle
from tasks.registry.register import CHALLENGER, CHAMPION, PREVIOUS, connect, promote, register
from tasks.registry.serving import policy_input
from tests.conftest import tiny_params
from trainers.env import MarketEnv


def with_margin(params, margin):
    return params.model_copy(update={"registry": params.registry.model_copy(update={"gate_margin": margin})})


def aliases(params):
    connect(params.registry)
    return {a: str(v) for a, v in MlflowClient().get_registered_model(params.registry.model_name).aliases.items()}


def test_gate_refusal_keeps_challenger_and_deliver_says_why(built_copy):
    refused = register(with_margin(built_copy, 1e9))
    assert not refused.promoted and refused.aliases == [CHALLENGER] and "<=" in refused.reason
    run = mlflow.get_run(refused.run_id)
    assert run.data.params["data_version"] == bundle.load(built_copy.dirs.models)[1].data_version
    assert "test_sharpe" in run.data.metrics and "buy_and_hold_sharpe" in run.data.metrics
    with pytest.raises(NoChampion, match="nothing delivered"):
        deliver(built_copy)


def test_promotion_moves_aliases(built_copy):
    first = register(with_margin(built_copy, -1e9))
    second = register(with_margin(built_copy, -1e9))
    assert first.promoted and second.promoted and (first.version, second.version) == ("1", "2")
    assert aliases(built_copy) == {CHAMPION: "2", PREVIOUS: "1"}
    assert promote(built_copy.registry, "1") == "2"
    assert aliases(built_copy) == {CHAMPION: "1", PREVIOUS: "2"}


def test_champion_sells_before_it_buys_on_the_paper_broker(built_copy):
    """A policy that wants to buy SYN000/SYN001 and sell SYN002/SYN003, holding the latter."""
    weights = torch.load(built_copy.dirs.models / bundle.WEIGHTS, weights_only=True)
    last = max(k for k in weights if k.endswith(".bias"))
    weights[last] = torch.tensor([3.0, 3.0, -3.0, -3.0])
    torch.save(weights, built_copy.dirs.models / bundle.WEIGHTS)
    register(with_margin(built_copy, -1e9))
    account = built_copy.dirs.broker / ACCOUNT_FILE
    account.parent.mkdir(parents=True)
    account.write_text(json.dumps({"cash": 0.0, "positions": {"SYN002": 500, "SYN003": 20}}))

    result = deliver(built_copy)
    assert [(f.side, f.symbol, f.status) for f in result.fills] == [
        ("sell", "SYN002", "filled"), ("sell", "SYN003", "filled"),
        ("buy", "SYN000", "filled"), ("buy", "SYN001", "filled")]
    sell, sold_out = result.fills[0], result.fills[1]
    assert sell.qty == 99 and sold_out.qty == 20  # trunc(tanh(-3) * hmax) shares, capped by the position
    saved = json.loads(account.read_text())
    assert saved["positions"] == {"SYN000": result.fills[2].qty, "SYN001": result.fills[3].qty, "SYN002": 401}
    assert 0 <= saved["cash"] == pytest.approx(result.cash)


def test_pyfunc_builds_the_same_state_and_orders_as_the_env(built_copy):
    register(with_margin(built_copy, -1e9))
    model = mlflow.pyfunc.load_model(f"models:/{built_copy.registry.model_name}@{CHAMPION}")
    actor, meta = bundle.load(built_copy.dirs.models)
    fs = features.load(built_copy.dirs.features)
    t = len(fs.timestamps) - 2
    env = MarketEnv(fs.market(), meta.scales, meta.env, 1, (t, t + 1), random_start=False)
    env.reset()
    frame = policy_input(meta, fs.prices[t], fs.features[t], np.zeros(len(meta.symbols)), meta.env.initial_cash)
    out = model.predict(frame)
    with torch.no_grad():
        expected = actor(env.observe())[0].numpy()
    np.testing.assert_allclose(out["action"].to_numpy(), expected, rtol=1e-6)
    assert out["order_qty"].dtype == np.int64
    with pytest.raises(Exception, match="no row for symbol"):
        model.predict(frame.iloc[1:])


def test_promote_unknown_version_is_an_error(tmp_path):
    params = tiny_params(tmp_path)
    connect(params.registry)
    with pytest.raises(Exception, match="no version 7"):
        promote(params.registry, "7")


def test_register_logs_one_nested_run_per_agent_per_generation(built_copy):
    import mlflow

    result = register(built_copy)
    runs = mlflow.search_runs(experiment_names=[built_copy.registry.experiment],
                              filter_string=f"tags.mlflow.parentRunId = '{result.run_id}'")
    evo = built_copy.evolution
    assert len(runs) == evo.population * evo.generations
    assert {"params.lr", "params.net_width", "params.parent", "metrics.fitness"} <= set(runs.columns)
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(result.run_id, "training")}
    assert {"training/leaderboard.csv", "training/evolution.png"} <= artifacts
