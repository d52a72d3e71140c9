import os
import subprocess
import sys

import pandas as pd
import typer
from typer.testing import CliRunner

from flows.cli import app
from flows.stage_table import STAGES
from tests.conftest import REPO

runner = CliRunner()


def test_each_stage_with_a_command_is_a_podracer_command_with_the_tables_help():
    commands = typer.main.get_command(app).commands
    assert {name: commands[name].help for name in STAGES if name in commands} == {
        stage.name: stage.help for stage in STAGES.values() if stage.command}
    assert {"--profile", "--resume"} <= {opt for p in commands["train"].params for opt in p.opts}


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


def test_status_shows_the_shadow_under_the_registry_aliases(built_copy, tmp_path):
    """One line for the shadow: its version, its record from the CT cycle's tags ("no record yet"
    before one), and the equity of its own paper account, which has bought 10 SYN000 at the last
    bar's open where the champion's has traded nothing."""
    import requests
    from alpaca.trading.client import TradingClient
    from alpaca.trading.enums import OrderSide, TimeInForce
    from alpaca.trading.requests import MarketOrderRequest
    from mlflow import MlflowClient

    from standins.tiny import TINY, tiny_params
    from tasks.data import feature_set
    from tasks.delivery.client.local import local_broker
    from tasks.delivery.keys import SHADOW, local_keys
    from tests.tasks.delivery.client.test_loop import champion as register_biased
    from tests.tasks.delivery.client.test_shadow import CHAMPION_BIAS, SHADOW_BIAS, with_aliases

    paths = [f"data_dir={tmp_path / 'data'}", f"registry.tracking_uri=sqlite:///{tmp_path / 'mlflow' / 'mlflow.db'}",
             f"registry.artifact_root={tmp_path / 'mlflow' / 'artifacts'}"]
    params = tiny_params(tmp_path, "registry.gate_margin=-1000")
    first, second = register_biased(params, CHAMPION_BIAS), register_biased(params, SHADOW_BIAS)
    with_aliases(params, champion=first, shadow=second)  # shadow_since 2021-12-30
    fs = feature_set.load(params.dirs.features)
    day = str(fs.timestamps[-2])[:10]
    keys = local_keys(params, SHADOW)
    with local_broker(params, ledger=params.dirs.broker / "broker.db", clock="simulated",
                      day=pd.Timestamp(day).date()) as url:
        TradingClient(keys.key_id, keys.secret, url_override=url).submit_order(MarketOrderRequest(
            symbol="SYN000", qty=10, side=OrderSide.BUY, time_in_force=TimeInForce.DAY))
        assert requests.post(f"{url}/podracer/v1/clock/advance", params={"to": "open"}, headers=keys.headers(),
                             timeout=30).status_code == 200
        # marked at the open it filled at: the cash paid 10·open·(1 + cost), the shares are worth 10·open
        opened = float(fs.opens[-1, fs.symbols.index("SYN000")])  # the broker's open is the env's, bit for bit
        equity = params.env.initial_cash - 10 * opened * params.env.cost_pct
        assert f"{equity:,.2f}" != f"{params.env.initial_cash:,.2f}"  # what the champion's account holds

        def status() -> str:
            args = [a for o in [*TINY, *paths, f"broker.port={url.rsplit(':', 1)[1]}"] for a in ("-s", o)]
            result = runner.invoke(app, ["status", "-p", "/nonexistent/params.yaml", *args])
            assert result.exit_code == 0, result.output
            return " ".join(result.output.split())

        shown = status()
        assert "no services recorded" in shown and f"champion version {first}" in shown
        assert f"shadow version {second} (record after 2021-12-30): no record yet; paper equity {equity:,.2f}" in shown
        for tag, value in (("shadow_bars", "21"), ("shadow_sharpe_diff", "0.3174"), ("shadow_p", "0.0841")):
            MlflowClient().set_model_version_tag(params.registry.model_name, second, tag, value)
        assert (f"shadow version {second} (record after 2021-12-30): 21 bars of record, Sharpe difference +0.32, "
                f"p 0.084; paper equity {equity:,.2f}") in status()


def test_trade_shows_the_shadows_orders_after_the_champions_and_says_when_no_champion_traded():
    from rich.console import Console

    from flows.summary import traded
    from tasks.delivery.client.loop import CycleResult

    def shown(result: CycleResult) -> str:
        console = Console(width=200, record=True)
        console.print(traded(result))
        return " ".join(console.export_text().split())

    order = {"side": "buy", "symbol": "SYN000", "qty": 99, "status": "accepted"}
    both = CycleResult("2021-12-31", "1", "models:/podracer-ppo/1", orders=[order])
    both.shadow = CycleResult("2021-12-31", "2", "models:/podracer-ppo/2", "shadow")
    text = shown(both)
    assert text.index("Paper orders for bar 2021-12-31 from models:/podracer-ppo/1") < text.index(
        "Shadow account: Paper orders for bar 2021-12-31 from models:/podracer-ppo/2")
    assert "no champion traded" not in text
    alone = shown(CycleResult("2021-12-31", "2", "models:/podracer-ppo/2", "shadow", orders=[order]))
    assert alone.startswith("Shadow account: Paper orders for bar 2021-12-31 from models:/podracer-ppo/2")
    assert alone.endswith("no champion traded (no version has alias 'champion'): only the shadow traded, in its "
                          "own account")


def test_status_shows_whole_urls_and_log_paths_in_an_80_column_terminal(tmp_path):
    """`podracer status` of a recorded service (this process's PID, so it "runs"; nothing answers)."""
    import json
    from dataclasses import asdict

    from deploy.local.services import STATE, Running

    log = str(tmp_path / "data" / "services" / "a-rather-long-name-for-the-mlflow-tracking-server.log")
    url = "http://127.0.0.1:5000/#/experiments?workflowType=machine_learning"
    record = Running("mlflow", os.getpid(), url, log, "restarting", 2, "health check failed for 60 s: refused")
    (tmp_path / "data" / "services").mkdir(parents=True)
    (tmp_path / "data" / "services" / STATE).write_text(json.dumps([asdict(record)]))
    shown = runner.invoke(app, ["status", "-p", "/nonexistent/params.yaml", "-s", f"data_dir={tmp_path / 'data'}",
                                "-s", f"registry.tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}"],
                          env={"COLUMNS": "80"}, terminal_width=80)
    assert shown.exit_code == 0, shown.output
    words = shown.output.split()
    assert url in words and log in words, shown.output  # whole, not cut to fit a column
    assert "restarting" in shown.output
