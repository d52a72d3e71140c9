"""What the data layer dropped or masked goes to the MLflow run (docs/data.md: nothing is silent)."""

from __future__ import annotations

import json
from pathlib import Path

import mlflow
from mlflow import MlflowClient

from standins.tiny import tiny_params
from tasks.data.feature_set import COVERAGE
from tasks.registry.register import log_coverage
from tasks.registry.store import connect


def logged(tmp_path, summary):
    params = tiny_params(tmp_path)
    params.dirs.features.mkdir(parents=True)
    if summary is not None:
        (params.dirs.features / COVERAGE).write_text(json.dumps(summary))
    with mlflow.start_run(experiment_id=connect(params.registry)) as run:
        returned = log_coverage(params.dirs.features)
    data = mlflow.get_run(run.info.run_id).data
    artifacts = {a.path for a in MlflowClient().list_artifacts(run.info.run_id, "data")}
    return returned, data, artifacts, run.info.run_id


def test_the_run_counts_masked_bars_and_dropped_symbols_and_keeps_coverage_json(tmp_path):
    summary = {"symbols": 4, "bars": 30, "masked_cells": 23, "dropped_symbols": ["EARLY", "ONE"], "per_symbol": []}
    returned, data, artifacts, run_id = logged(tmp_path, summary)
    assert data.metrics == returned == {"data_masked_cells": 23.0, "data_dropped_symbols": 2.0}
    assert data.tags["data.dropped_symbols"] == "EARLY, ONE"
    assert artifacts == {f"data/{COVERAGE}"}
    path = mlflow.artifacts.download_artifacts(f"runs:/{run_id}/data/{COVERAGE}", dst_path=str(tmp_path / "down"))
    assert json.loads(Path(path).read_text()) == summary


def test_nothing_dropped_logs_zeros_and_no_tag(tmp_path):
    summary = {"symbols": 4, "bars": 30, "masked_cells": 0, "dropped_symbols": [], "per_symbol": []}
    _, data, artifacts, _ = logged(tmp_path, summary)
    assert data.metrics == {"data_masked_cells": 0.0, "data_dropped_symbols": 0.0}
    assert "data.dropped_symbols" not in data.tags and artifacts == {f"data/{COVERAGE}"}


def test_a_feature_set_without_coverage_json_logs_nothing(tmp_path):
    returned, data, artifacts, _ = logged(tmp_path, None)
    assert returned == {} and data.metrics == {} and artifacts == set()
