"""The CT-loop benchmark's plumbing (benchmarks/perf/cycle.py): its scratch config and what it parses."""

from pathlib import Path

from benchmarks.perf.cycle import ROOT, history_cells, row, scratch_params, service_seconds, task_seconds


def test_scratch_params_keep_the_repo_store_and_ports_out(tmp_path: Path):
    tree = scratch_params(tmp_path, ROOT / "params.yaml", tiny=False, extra=["services.start_timeout=240"])
    assert tree["data_dir"] == str(tmp_path / "data")
    assert tree["registry"]["tracking_uri"] == f"sqlite:///{tmp_path / 'mlflow' / 'mlflow.db'}"
    assert tree["registry"]["artifact_root"].startswith(str(tmp_path))
    ports = [tree["services"][k] for k in ("prefect_port", "mlflow_port", "receiver_port", "runner_port")]
    ports.append(tree["broker"]["port"])
    assert len(set(ports)) == 5 and 4200 not in ports and 8730 not in ports
    assert tree["services"]["start_timeout"] == 240
    assert tree["data"]["symbols"] == 30 and tree["ct"]["eval_bars"] == 63  # otherwise params.yaml's own values
    assert str(ROOT / "data") not in str(tree)


def test_tiny_adds_the_suites_sizes_and_a_gate_that_promotes(tmp_path: Path):
    tree = scratch_params(tmp_path, ROOT / "params.yaml", tiny=True, extra=[])
    assert tree["data"]["symbols"] == 4 and tree["ct"]["eval_bars"] == 20
    assert tree["registry"]["gate_margin"] == -1000
    assert tree["evolution"]["search_space"] == {"lr": [0.0001, 0.001], "net_width": [12, 20]}


def test_up_lines_and_task_runs_are_read():
    said = ("prefect answers at http://127.0.0.1:5001 (pid 12, 9.5 s) mlflow answers at "
            "http://127.0.0.1:5002 (pid 13, 4.0 s)")
    assert service_seconds(said) == {"prefect": 9.5, "mlflow": 4.0}
    runs = [{"name": "train challenger-0", "start_time": "2026-01-01T00:00:10Z", "end_time": "2026-01-01T00:01:10Z"},
            {"name": "ingest new bars-0", "start_time": "2026-01-01T00:00:00+00:00",
             "end_time": "2026-01-01T00:00:02.5+00:00"},
            {"name": "register-0", "start_time": "2026-01-01T00:02:00Z", "end_time": None}]
    assert task_seconds(runs) == [("ingest new bars", 2.5), ("train challenger", 60.0)]


def test_the_history_cells_take_the_cycle_the_alias_rounds_and_the_targets_met():
    rows = [row("`podracer up`, until it returns (every service answers)", "47.1 s"),
            row("CT cycle, flow run start → end (completed)", "91.6 s (1.5 min)", "≤ 15 min", True),
            row("alias → v1, round 1: first order at the broker", "12.3 s (17 orders)", "≤ 30 s", True),
            row("… its deliver flow run created / started (webhook → event → runner)", "3.1 s / 9.9 s"),
            row("alias → v2, round 2", "**no delivery within 300 s**", "≤ 30 s", False)]
    assert history_cells(rows) == ("91.6 s (1.5 min)", "12.3 s (17 orders); **no delivery within 300 s**", "2 of 3")
