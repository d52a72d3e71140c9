"""What the register stage is given: the pipeline's and a cycle's candidates, built from
named results; and a registration cut off half-way, which the next one deletes."""

import os
from datetime import date
from pathlib import Path

import pandas as pd

from tasks.model.backtest import BacktestResult
from tasks.model.train import TrainResult
from tasks.registry.evidence import Evidence
from tasks.registry.gate import Decision
from tasks.registry.register import COMPLETE, cycle_candidate, drop_incomplete, pipeline_candidate, register
from tasks.registry.report import GateVerdict
from tasks.registry.store import SERVER_ENV, client


def trained(folder: str, cutoff: str, start: str) -> TrainResult:
    return TrainResult(Path(folder), 1.0, 1, 0, {}, env_steps=10, seconds=1.0, device="cpu", cutoff=cutoff,
                       start=start)


def test_a_cycle_candidate_carries_the_decision_and_names_its_window():
    tested = BacktestResult({"challenger": {"sharpe": 1.0}, "champion": {"sharpe": 0.5},
                             "buy_and_hold": {"sharpe": 0.2}}, "2022-01-03", "2022-01-31", Path("bt"),
                            pd.DataFrame(), seen=4)
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
    assert dict(plain.tags) == {"eval_window": "2022-01-03..2022-01-31", "champion_seen_bars": "4",
                                "warm_start": "warm start from the champion"}


def test_the_pipeline_candidate_reads_the_backtest_and_gates_it_when_not_given(built):
    candidate = pipeline_candidate(built)
    assert candidate.model_dir == built.dirs.models and candidate.origin == "pipeline"
    assert candidate.cutoff == "2021-08-31" and candidate.reason.startswith(("promoted: vs buy-and-hold: ΔSharpe ", "enters shadow: vs buy-and-hold: ΔSharpe ", "refused: vs buy-and-hold: ΔSharpe "))
    assert set(candidate.metrics) == {"test", "buy_and_hold"}
    assert candidate.report.startswith(candidate.reason + "\n\n")
    assert candidate.report.endswith("Test window 2021-09-01 to 2021-12-31; trained and selected on data to "
                                     "2021-08-31.")
    assert [(a, p.name) for a, p in candidate.artifacts] == [("backtest", "metrics.json"), ("backtest", "equity.csv"),
                                                            ("backtest", "equity.png")]


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
