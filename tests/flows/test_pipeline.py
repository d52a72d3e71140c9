"""End-to-end: the Prefect flow at tiny size, twice, on Prefect's test harness; and the
shipped minute configuration, as a user runs it."""

import pandas as pd
import pytest
import yaml

from flows.pipeline import rlops_pipeline
from standins.tiny import tiny_params
from tasks.config import Params, load_params
from tasks.errors import ValidationFailed
from tests.conftest import REPO
from tests.flows.test_cli_commands import say


def test_the_summary_holds_one_result_per_step_of_the_stage_table_in_its_order():
    from dataclasses import fields

    from flows.pipeline import PipelineSummary
    from flows.stage_table import STAGES

    assert [f.name for f in fields(PipelineSummary)] == [*STAGES, "note"]


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
    assert [e.benchmark for e in second.gate.decision.evidence] == ["champion", "buy_and_hold"]  # version 1 sits
    assert list(second.gate.compared.curve.columns) == ["agent", "champion", "buy_and_hold"]
    stamps = {p.name: p.stat().st_mtime_ns for p in params.dirs.features.iterdir()}
    third = rlops_pipeline(params)  # outputs exist and inputs are unchanged: validate/features cached
    assert {p.name: p.stat().st_mtime_ns for p in params.dirs.features.iterdir()} == stamps
    assert third.features == second.features and third.register.version == "3"

    raw = params.dirs.raw / "SYN000.parquet"
    frame = pd.read_parquet(raw)
    frame.loc[3, "high"] = frame.loc[3, "low"] * 0.5
    frame.to_parquet(raw)
    with pytest.raises(ValidationFailed, match="SYN000.parquet: 1"):
        rlops_pipeline(params)
    assert (params.dirs.quarantine / "SYN000.parquet").exists()


def test_the_minute_config_sets_only_what_differs_from_the_defaults():
    """params.minute.yaml is merged with the code's defaults (tasks/config.py), so a key that
    repeats its default is noise; each key it sets must change something."""
    tree = yaml.safe_load((REPO / "params.minute.yaml").read_text())
    keys = [f"{section}.{key}" if isinstance(values, dict) else section
            for section, values in tree.items() for key in (values if isinstance(values, dict) else [None])]
    minute, default = load_params(REPO / "params.minute.yaml").flat(), Params().flat()
    assert [k for k in keys if minute[k] == default[k]] == []
    assert (minute["data.freq"], minute["registry.model_name"], minute["data_dir"]) == (
        "1min", "podracer-ppo-1min", "data/minute")


MINUTE_TINY = [  # params.minute.yaml at tiny size: 3 symbols x 3 weeks of minutes, one short generation
    "data.symbols=3", "data.start=2023-10-09", "data.end=2023-10-27",
    "features.train_end=2023-10-17", "features.val_end=2023-10-20",  # test: the week of Oct 23, 5 sessions
    "env.episode_len=32", "env.min_episode_len=8", "ppo.num_envs=4", "ppo.horizon=16", "ppo.batch_size=32",
    "ppo.repeat_times=2", "evolution.population=2", "evolution.generations=1", "evolution.iterations_per_generation=1",
    "registry.gate_margin=-1000",
]


@pytest.mark.slow
def test_the_shipped_minute_config_runs_end_to_end_as_written(tmp_path, prefect_server):
    """``podracer run -p params.minute.yaml`` in a fresh project, only made tiny: its own data
    folder and model name, minute bars through every stage, a test window that says it is short."""
    (tmp_path / "mlflow").mkdir()
    overrides = [arg for pair in (("-s", o) for o in MINUTE_TINY) for arg in pair]
    said = say(tmp_path, "run", "-p", str(REPO / "params.minute.yaml"), *overrides)
    assert "Backtest 2023-10-23 to 2023-10-27, 5 sessions (1,950 bars) (test window, after costs)" in said
    assert "sharpe *" in said and "* extrapolated from 5 sessions to a year of 252" in said
    assert "model podracer-ppo-1min version 1 (alias champion)" in said
    assert "artifacts plot data/minute/backtest/equity.png, metrics data/minute/backtest/metrics.json" in said
    assert "Paper orders for bar 2023-10-27" in said and "models:/podracer-ppo-1min/1" in said
    assert not (tmp_path / "data" / "raw").exists()  # the daily run's folders stay untouched
    assert len(pd.read_parquet(tmp_path / "data/minute/raw/SYN000.parquet")) == 15 * 390
