"""What the register stage is given: the pipeline's and a cycle's candidates, built from
named results; the pipeline's gate facing the sitting champion; and a registration cut off
half-way, which the next one deletes."""

import json
import os
import shutil
from datetime import date
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from tasks.config import Params
from tasks.model import bundle
from tasks.model.backtest import BacktestResult, backtest, load_result
from tasks.model.train import TrainResult
from tasks.model.walkforward import Champion
from tasks.registry.aliases import CHALLENGER, CHAMPION, SHADOW
from tasks.registry.decision import Decision
from tasks.registry.evidence import Evidence
from tasks.registry.gate import GateVerdict, gate_report
from tasks.registry.register import COMPLETE, cycle_candidate, drop_incomplete, pipeline_candidate, register
from tasks.registry.store import SERVER_ENV, client
from tasks.registry.versions import CUTOFF
from tests.tasks.registry.test_register_deliver import aliases, with_margin


def trained(folder: str, cutoff: str, start: str) -> TrainResult:
    return TrainResult(Path(folder), 1.0, 1, 0, {}, env_steps=10, seconds=1.0, device="cpu", cutoff=cutoff,
                       start=start)


def test_a_cycle_candidate_carries_the_decision_and_names_its_window():
    tested = BacktestResult({"challenger": {"sharpe": 1.0}, "champion": {"sharpe": 0.5},
                             "buy_and_hold": {"sharpe": 0.2}}, "2022-01-03", "2022-01-31", Path("bt"),
                            pd.DataFrame({"challenger": 100.0 * 1.01 ** np.arange(13), "champion": 100.0,
                                          "buy_and_hold": 100.0}), seen=4)
    decision = Decision("shadow", (Evidence("champion", 20, 0.5, -0.2, 1.2, 0.2, 0.4),))
    verdict = GateVerdict(decision, "## report", Path("r/gate.md"), Path("r/tearsheet.html"))
    challenger = trained("challenger", "2021-12-31", "warm start from the champion")
    plain = cycle_candidate("0123456789abcdef", challenger, tested, verdict)
    assert (plain.model_dir, plain.cutoff, plain.decision, plain.since) == (
        Path("challenger"), "2021-12-31", decision, "2022-01-31")
    assert plain.reason == decision.line and plain.reason.startswith("enters shadow: vs champion: ΔSharpe +0.50")
    assert plain.run_name == f"ct {date.today()} data 01234567" and plain.origin == "ct" and plain.report == "## report"
    assert plain.metrics == {"window_challenger": {"sharpe": 1.0}, "window_champion": {"sharpe": 0.5},
                             "window_buy_and_hold": {"sharpe": 0.2}}
    assert [path for _, path in plain.artifacts] == [Path("r/gate.md"), Path("r/tearsheet.html"), *tested.files]
    tags = dict(plain.tags)
    promise = {key: tags.pop(key) for key in ("promise_mean", "promise_se", "promise_bars")}
    assert tags == {"eval_window": "2022-01-03..2022-01-31", "champion_seen_bars": "4",
                    "warm_start": "warm start from the champion"}
    # the live watch's reference: 1% a bar over a flat buy-and-hold, on 12 bars, with no spread
    assert float(promise["promise_mean"]) == pytest.approx(0.01) and promise["promise_bars"] == "12"


def test_the_pipeline_candidate_reads_the_backtest_and_gates_it_when_not_given(built_copy):
    built = built_copy  # the gate asks the registry for a champion (there is none: gated as before)
    candidate = pipeline_candidate(built)
    assert [e.benchmark for e in candidate.decision.evidence] == ["buy_and_hold"]
    assert candidate.model_dir == built.dirs.models and candidate.origin == "pipeline"
    assert candidate.cutoff == "2021-08-31" and candidate.reason.startswith(
        tuple(f"{said}: vs buy-and-hold: " for said in ("promoted", "enters shadow", "refused")))
    assert set(candidate.metrics) == {"test", "buy_and_hold"}
    assert candidate.report.startswith(candidate.reason + "\n\n")
    assert candidate.report.endswith("Test window 2021-09-01 to 2021-12-31; trained and selected on data to "
                                     "2021-08-31.")
    assert [(a, p.name) for a, p in candidate.artifacts] == [("backtest", "metrics.json"), ("backtest", "equity.csv"),
                                                            ("backtest", "equity.png")]


def retrained(params: Params) -> Params:
    """Another model in ``data/models/``: the trained policy's output layer ×50 (it trades
    otherwise than the one registered before), backtested on the test window again."""
    weights = torch.load(params.dirs.models / bundle.WEIGHTS, weights_only=True)
    last = max(k for k in weights if k.endswith(".weight") and k.startswith("net."))
    torch.save({**weights, last: weights[last] * 50.0}, params.dirs.models / bundle.WEIGHTS)
    backtest(params)
    return params


def test_the_pipeline_gate_faces_the_sitting_champion_on_a_clean_test_window(built_copy):
    params = with_margin(built_copy, -1000)  # every edge 'significant': the wiring is what is tested
    assert register(params).version == "1"  # the champion, selected up to 2021-08-31
    candidate = pipeline_candidate(retrained(params))
    assert [e.benchmark for e in candidate.decision.evidence] == ["champion", "buy_and_hold"]
    assert candidate.decision.action == "promote" and candidate.reason.startswith("promoted: vs champion: ΔSharpe ")
    assert "## Gate report: agent vs champion vs buy_and_hold" in candidate.report
    assert "had seen" not in candidate.report and set(candidate.metrics) == {"test", "buy_and_hold", "champion"}
    assert [(a, p.name) for a, p in candidate.artifacts][3:] == [("gate", "metrics.json"), ("gate", "equity.csv"),
                                                                ("gate", "equity.png")]
    compared = pd.read_csv(params.dirs.backtest / "champion" / "equity.csv", index_col=0)
    tested = pd.read_csv(params.dirs.backtest / "equity.csv", index_col=0)
    assert list(compared.columns) == ["agent", "champion", "buy_and_hold"]
    pd.testing.assert_frame_equal(compared[["agent", "buy_and_hold"]], tested)  # the same bars, the same agent


def test_a_champion_that_saw_test_bars_lets_the_new_model_into_shadow_at_most(built_copy):
    params = with_margin(built_copy, -1000)
    register(params)
    store, name = client(params.registry), params.registry.model_name
    store.set_model_version_tag(name, "1", CUTOFF, "2021-09-30")  # trained or selected into the test window
    result = register(retrained(params))
    assert result.reason.startswith("enters shadow (no clean window: champion version 1 had trained or selected on "
                                    "21 of the 85 test bars, so it can be promoted only on the record it trades): "
                                    "vs champion: ΔSharpe ")
    assert not result.promoted and aliases(params) == {CHAMPION: "1", CHALLENGER: "2", SHADOW: "2"}
    description = store.get_model_version(name, "2").description
    assert "it had seen 21 of its 85 bars" in description


def test_a_champion_that_cannot_trade_the_test_window_is_a_faulted_test_and_refuses(built_copy, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(built_copy.dirs.models, other)
    meta = json.loads((other / bundle.META).read_text())
    (other / bundle.META).write_text(json.dumps({**meta, "symbols": [f"X{s}" for s in meta["symbols"]]}))
    verdict = gate_report(with_margin(built_copy, -1000), load_result(built_copy.dirs.backtest),
                          champion=Champion("1", other, "2021-08-31", None))
    assert verdict.decision.action == "refuse" and verdict.compared is None
    assert verdict.reason.startswith("refused: vs champion: no test, champion version 1 cannot trade this test window "
                                     "(")
    assert "vs buy-and-hold: ΔSharpe" in verdict.reason


def test_a_registration_cut_off_half_way_is_deleted_by_the_next(built_copy):
    import mlflow

    params = built_copy
    register(params)
    store, name = client(params.registry), params.registry.model_name
    with mlflow.start_run(experiment_id=store.get_experiment_by_name(params.registry.experiment).experiment_id) as run:
        mlflow.set_tag(COMPLETE, "pending")  # what register() sets before it logs the model
    half = store.create_model_version(name, source=str(params.dirs.models), run_id=run.info.run_id)
    with mlflow.start_run(experiment_id=run.info.experiment_id) as other:  # a run of someone else's, or older code
        pass
    by_hand = store.create_model_version(name, source=str(params.dirs.models), run_id=other.info.run_id)  # kept
    assert drop_incomplete(params.registry) == [str(half.version)]
    left = {str(v.version) for v in store.search_model_versions(f"name='{name}'")}
    assert left == {"1", str(by_hand.version)}
    assert os.environ.get(SERVER_ENV) is None
