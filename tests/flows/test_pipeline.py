"""End-to-end: the Prefect flow at tiny size, twice, on Prefect's test harness."""

import pytest

from flows.pipeline import rlops_pipeline
from tasks.errors import ValidationFailed
from tests.conftest import tiny_params


@pytest.mark.slow
def test_pipeline_runs_end_to_end_and_again_with_reused_data(prefect_server, tmp_path):
    params = tiny_params(tmp_path, "registry.gate_margin=-1000")
    first = rlops_pipeline(params)
    assert not first.ingest.reused and first.register.version == "1"
    assert first.register.promoted and first.deliver is not None and first.deliver.version == "1"
    assert first.backtest.plot.exists() and first.validate.quarantined == 0
    second = rlops_pipeline(params)
    assert second.ingest.reused and second.ingest.data_version == first.ingest.data_version
    assert second.register.version == "2"
    stamps = {p.name: p.stat().st_mtime_ns for p in params.dirs.features.iterdir()}
    third = rlops_pipeline(params)  # outputs exist and inputs are unchanged: validate/features cached
    assert {p.name: p.stat().st_mtime_ns for p in params.dirs.features.iterdir()} == stamps
    assert third.features == second.features and third.register.version == "3"

    raw = params.dirs.raw / "SYN000.parquet"
    import pandas as pd

    frame = pd.read_parquet(raw)
    frame.loc[3, "high"] = frame.loc[3, "low"] * 0.5
    frame.to_parquet(raw)
    with pytest.raises(ValidationFailed, match="SYN000.parquet: 1"):
        rlops_pipeline(params)
    assert (params.dirs.quarantine / "SYN000.parquet").exists()
