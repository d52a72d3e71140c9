import os
import subprocess
import sys

import pandas as pd
from typer.testing import CliRunner

from flows.cli import app
from tests.conftest import REPO

runner = CliRunner()


def test_bad_config_is_one_red_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text("ppo:\n  lr: -1\n")
    result = runner.invoke(app, ["ingest"])
    assert result.exit_code == 1
    assert result.output.strip() == "✗ ingest: params.yaml: ppo: lr must be > 0"


def test_stages_run_on_their_own_and_validation_stops_on_a_bad_row(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text("data: {symbols: 3, start: 2020-01-01, end: 2021-12-31}\n"
                                         "features: {train_end: 2021-03-31, val_end: 2021-08-31}\n")
    assert runner.invoke(app, ["ingest"]).exit_code == 0
    result = runner.invoke(app, ["validate"])
    assert result.exit_code == 0 and "0 quarantined" in result.output
    assert runner.invoke(app, ["features"]).exit_code == 0
    raw = tmp_path / "data" / "raw" / "SYN001.parquet"
    frame = pd.read_parquet(raw)
    frame.loc[0, "high"] = frame.loc[0, "low"] / 2
    frame.to_parquet(raw)
    result = runner.invoke(app, ["validate"])
    assert result.exit_code == 1
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines[-1].startswith("✗ validate: validation failed: 1 of ")
    assert "data/raw/SYN001.parquet: 1 (" in lines[-1] and "Traceback" not in result.output


def test_validate_says_when_it_suspects_a_split(tmp_path, monkeypatch):
    from tests.tasks.data.test_bad_inputs import dates_only

    monkeypatch.chdir(tmp_path)
    frame = dates_only()
    frame.loc[(frame["symbol"] == "AAA") & (frame.index >= 30), ["open", "high", "low", "close"]] *= 0.5
    frame.to_csv(tmp_path / "bars.csv", index=False)
    (tmp_path / "params.yaml").write_text("data: {source: file, path: bars.csv}\n")
    assert runner.invoke(app, ["ingest"]).exit_code == 0
    result = runner.invoke(app, ["validate"])
    assert result.exit_code == 0
    assert " ".join(result.output.split()).endswith(
        "✓ validate 122 of 122 rows passed, 0 quarantined; report data/quarantine/report.md; "
        "1 suspected split(s): use split-adjusted data")


def test_importing_the_cli_or_the_runner_reads_no_settings_and_imports_no_prefect():
    """.env is loaded by the entry points when they run (tasks/settings.py), before Prefect,
    which reads its settings when imported, is imported."""
    code = ("import os, sys; before = dict(os.environ); import flows.cli, flows.deployments; "
            "assert dict(os.environ) == before, 'settings read at import'; "
            "assert not [m for m in sys.modules if m.split('.')[0] == 'prefect'], 'prefect imported'")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                          env={**{k: v for k, v in os.environ.items() if k != "DO_NOT_TRACK"},
                               "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr[-2000:]
    from tasks.settings import ENV_FILE

    assert "DO_NOT_TRACK=1" in ENV_FILE.read_text()  # so importing would have set it, had it read .env
