import mlflow
import numpy as np
import pytest
import torch
from mlflow import MlflowClient

from standins.tiny import tiny_params
from tasks.data import feature_set
from tasks.delivery.client.deliver import deliver
from tasks.delivery.client.loop import NoChampion
from tasks.model import bundle
from tasks.registry.aliases import CHALLENGER, CHAMPION, PREVIOUS, promote
from tasks.registry.register import register
from tasks.registry.serving import policy_input
from tasks.registry.store import connect
from trainers.common.env import MarketEnv


def with_margin(params, margin):
    return params.model_copy(update={"registry": params.registry.model_copy(update={"gate_margin": margin})})


def aliases(params):
    connect(params.registry)
    return {a: str(v) for a, v in MlflowClient().get_registered_model(params.registry.model_name).aliases.items()}


def test_gate_refusal_keeps_challenger_and_deliver_says_why(built_copy):
    refused = register(with_margin(built_copy, 1e9))
    assert not refused.promoted and refused.aliases == [CHALLENGER]
    assert refused.reason.startswith("refused: vs buy-and-hold: ΔSharpe ") and "≥ α 0.05" in refused.reason
    run = mlflow.get_run(refused.run_id)
    assert run.data.params["data_version"] == bundle.load(built_copy.dirs.models)[1].data_version
    assert "test_sharpe" in run.data.metrics and "buy_and_hold_sharpe" in run.data.metrics
    # what the data layer masked or dropped (docs/data.md): the tiny market is gap-free, so nothing
    assert (run.data.metrics["data_masked_cells"], run.data.metrics["data_dropped_symbols"]) == (0.0, 0.0)
    assert {"data/coverage.json"} == {a.path for a in MlflowClient().list_artifacts(refused.run_id, "data")}
    with pytest.raises(NoChampion, match="nothing delivered"):
        deliver(built_copy)


def test_promotion_moves_aliases(built_copy):
    from tests.tasks.registry.test_register import retrained

    first = register(with_margin(built_copy, -1e9))
    second = register(with_margin(retrained(built_copy), -1e9))  # another model: it faces the first as champion
    assert first.promoted and second.promoted and (first.version, second.version) == ("1", "2")
    assert aliases(built_copy) == {CHAMPION: "2", PREVIOUS: "1"}
    assert promote(built_copy.registry, "1") == "2"
    assert aliases(built_copy) == {CHAMPION: "1", PREVIOUS: "2"}


def test_pyfunc_builds_the_same_state_and_orders_as_the_env(built_copy):
    register(with_margin(built_copy, -1e9))
    model = mlflow.pyfunc.load_model(f"models:/{built_copy.registry.model_name}@{CHAMPION}")
    actor, meta = bundle.load(built_copy.dirs.models)
    fs = feature_set.load(built_copy.dirs.features)
    t = len(fs.timestamps) - 2
    env = MarketEnv(fs.market(), meta.scales, meta.env, 1, (t, t + 1), random_start=False)
    env.reset()
    frame = policy_input(meta, fs.prices[t], fs.features[t], np.zeros(len(meta.symbols)), meta.env.initial_cash)
    out = model.predict(frame)
    with torch.no_grad():
        expected = actor(env.observe())
    np.testing.assert_allclose(out["action"].to_numpy(), expected[0].numpy(), rtol=1e-6)
    env.step(expected)  # the env sizes the same action at the next open; with ample cash the counts agree
    assert out["order_qty"].dtype == np.int64 and out["order_qty"].abs().sum() > 0
    np.testing.assert_array_equal(out["order_qty"].to_numpy(), env.shares[0].numpy().astype(np.int64))
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
    assert set(runs["params.algorithm"]) == {"ppo"} and runs["tags.mlflow.runName"].str.endswith("-ppo").all()
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(result.run_id, "training")}
    assert {"training/leaderboard.csv", "training/evolution.png"} <= artifacts
