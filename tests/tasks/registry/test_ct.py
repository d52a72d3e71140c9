"""The continuous-training cycle at tiny size: appended features, the early exit, one whole
cycle through the registry, and the checks that keep a failed cycle from registering."""

import json
import os
from datetime import date

import numpy as np
import pytest

from tasks.data import features
from tasks.data.arrivals import simulate
from tasks.data.validate import validate
from tasks.registry import ct
from tasks.registry.gate import CHAMPION, promote
from tasks.registry.register import COMPLETE, drop_incomplete, register
from tasks.registry.store import SERVER_ENV, client
from tests.standins.postgres import free_port


def test_appended_features_keep_the_stored_rows_and_equal_a_full_recompute(built_copy):
    params = built_copy
    before = features.load(params.dirs.features)
    stored = {a: np.array(getattr(before, a)) for a in features.ARRAYS}
    simulate(params, 3)
    validate(params)
    fs, appended = ct.with_features(params)
    full = features.build(params)  # everything recomputed from the validated bars
    assert appended == 3 and len(fs.timestamps) == len(stored["timestamps"]) + 3
    for name in features.ARRAYS:
        assert np.array_equal(getattr(fs, name), getattr(full, name)), name  # bit for bit
        assert np.array_equal(getattr(fs, name)[: len(stored[name])], stored[name]), name
    assert np.array_equal(fs.mean, before.mean) and np.array_equal(fs.std, before.std)  # train-only stats kept
    assert fs.splits["train"] == before.splits["train"] and fs.splits["test"][1] == before.splits["test"][1] + 3
    saved = features.load(params.dirs.features)
    assert all(np.array_equal(getattr(saved, a), getattr(fs, a)) for a in features.ARRAYS)


def test_a_cycle_with_nothing_new_ends_early_in_one_line(built_copy):
    params = built_copy
    version = ct.new_data(params, None).data_version
    found = ct.new_data(params, champion_data_version=version)
    assert found.nothing_new == (f"nothing new since data version {version[:8]} (last bar 2021-12-31): "
                                 "the cycle ends here")
    ct.record_processed(params, version, {})
    assert ct.new_data(params, None).nothing_new == found.nothing_new  # the last cycle's version counts too
    simulate(params, 1)
    assert ct.new_data(params, version).nothing_new is None


def test_one_cycle_registers_a_challenger_with_its_window_cutoff_and_report(built_copy, prefect_server):
    from flows.ct_cycle import ct_cycle

    params = built_copy
    first = register(params)
    promote(params.registry, first.version)
    simulate(params, 5)
    summary = ct_cycle(params)
    store, name = client(params.registry), params.registry.model_name
    version = store.get_model_version(name, summary.registered.version)
    fs = features.load(params.dirs.features)
    last = len(fs.timestamps) - 1
    cutoff = str(fs.timestamps[last - params.ct.eval_bars])[:10]  # the bar before the 63-bar window
    assert summary.appended_bars == 5 and str(version.version) == "2"
    assert version.tags["data_cutoff"] == cutoff and version.tags["origin"] == "ct"
    assert version.tags["eval_window"] == (f"{str(fs.timestamps[last - params.ct.eval_bars + 1])[:10]}.."
                                           f"{str(fs.timestamps[last])[:10]}")
    assert version.tags["champion_seen_bars"] == "0"  # the pipeline's champion selected up to 2021-08-31
    assert version.tags["warm_start"] == "warm start from the champion" and version.tags[COMPLETE] == "true"
    assert version.description.startswith("## Gate report: challenger vs champion vs buy_and_hold")
    assert f"({params.ct.eval_bars} bars)" in version.description
    metrics = json.loads((params.dirs.ct / "backtest" / "metrics.json").read_text())
    promoted = metrics["challenger"]["sharpe"] > max(metrics["champion"]["sharpe"], metrics["buy_and_hold"]["sharpe"])
    assert summary.registered.promoted is promoted
    assert (str(store.get_model_version_by_alias(name, CHAMPION).version) == "2") is promoted
    run = store.get_run(summary.registered.run_id)
    assert run.info.run_name == f"ct {date.today()} data {summary.data_version[:8]}"
    assert [d.dataset.digest for d in run.inputs.dataset_inputs] == [summary.data_version[:8]]
    assert run.data.metrics["window_challenger_sharpe"] == metrics["challenger"]["sharpe"]
    assert store.get_experiment(run.info.experiment_id).tags["mlflow.experimentKind"] == "custom_model_development"
    assert ct_cycle(params).note.startswith(f"nothing new since data version {summary.data_version[:8]}")


def test_a_down_tracking_server_stops_the_cycle_in_one_line_before_registering(tiny, monkeypatch):
    url = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv(SERVER_ENV, url)
    with pytest.raises(ct.TrackingDown) as err:
        ct.check_tracking(tiny)
    assert str(err.value) == (f"MLflow tracking server {url} does not answer: nothing registered; "
                              "the next cycle will retry")
    monkeypatch.delenv(SERVER_ENV)
    ct.check_tracking(tiny)  # a sqlite store needs no server


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


def test_a_refit_trains_the_challenger_through_the_window_and_moves_its_cutoff_to_the_last_bar(built_copy):
    import torch

    from tasks.model import bundle
    from tasks.model.walkforward import windows

    params = built_copy
    simulate(params, 3)
    validate(params)
    fs, _ = ct.with_features(params)
    w = windows(fs, 20)
    folder = ct.refit(params, "v-refit", fs, w, params.dirs.models)
    before, after = bundle.load(params.dirs.models)[0].state_dict(), bundle.load(folder)[0].state_dict()
    assert folder == params.dirs.ct / "refit" and any(not torch.equal(before[k], after[k]) for k in before)
    cmp = ct.Comparison({"challenger": {}, "buy_and_hold": {}}, None, None)
    refitted = ct.candidate(params, "v-refit", w, cmp, folder, True, "why", "report", folder / "policy.pt", "warm",
                            refitted=True)
    assert refitted.cutoff == w.last == str(fs.timestamps[-1])[:10] and ("refit", "true") in refitted.tags
    assert ct.candidate(params, "v", w, cmp, folder, True, "why", "r", folder, "warm", False).cutoff == w.cutoff
