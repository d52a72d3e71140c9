"""The continuous-training cycle at tiny size: one whole cycle through the registry and its
early end; and a shadow trading beside the champion until its record passes
(docs/operations.md, the CT cycle and the gate); and the same on the shipped minute
configuration. A cycle killed during training, rerun from its checkpoint, is
tests/flows/test_services.py's (the runner killed mid-cycle); that a resumed training ends
where an uninterrupted one does is tests/tasks/model/test_train_resume.py's."""

import contextlib
import json
from datetime import date

import pytest

from flows import ct_cycle as cycle_module
from flows.ct_cycle import ct_cycle
from tasks.config import load_params
from tasks.data import feature_set, features
from tasks.data.arrivals import simulate
from tasks.data.ingest import ingest
from tasks.data.validate import validate
from tasks.delivery.client.deliver import deliver
from tasks.model.backtest import backtest
from tasks.model.train import train
from tasks.registry.aliases import CHALLENGER, CHAMPION, PREVIOUS, SHADOW, promote
from tasks.registry.register import COMPLETE, register
from tasks.registry.store import client
from tests.conftest import REPO
from tests.flows.test_pipeline import MINUTE_TINY


def test_one_cycle_registers_a_challenger_with_its_window_cutoff_and_report(built_copy, prefect_server):
    params = built_copy.model_copy(update={"registry": built_copy.registry.model_copy(update={"tearsheet": True})})
    first = register(params)
    promote(params.registry, first.version)
    simulate(params, 5)
    summary = ct_cycle(params)
    store, name = client(params.registry), params.registry.model_name
    version = store.get_model_version(name, summary.registered.version)
    fs = feature_set.load(params.dirs.features)
    last = len(fs.timestamps) - 1
    cutoff = str(fs.timestamps[last - params.ct.eval_bars])[:10]  # the bar before the 63-bar window
    assert summary.appended_bars == 5 and str(version.version) == "2"
    assert version.tags["data_cutoff"] == cutoff and version.tags["origin"] == "ct"
    assert version.tags["eval_window"] == (f"{str(fs.timestamps[last - params.ct.eval_bars + 1])[:10]}.."
                                           f"{str(fs.timestamps[last])[:10]}")
    assert version.tags["champion_seen_bars"] == "0"  # the pipeline's champion selected up to 2021-08-31
    assert version.tags["warm_start"] == "warm start from the champion" and version.tags[COMPLETE] == "true"
    line = summary.registered.reason
    assert version.description.startswith(f"{line}\n\n## Gate report: challenger vs champion vs buy_and_hold")
    assert version.tags["gate_reason"] == line and f"({params.ct.eval_bars} bars)" in version.description
    metrics = json.loads((params.dirs.ct / "backtest" / "metrics.json").read_text())
    screened = metrics["challenger"]["sharpe"] >= max(metrics["champion"]["sharpe"], metrics["buy_and_hold"]["sharpe"])
    assert line.startswith("enters shadow" if screened else "refused: vs champion: ΔSharpe ")
    assert f"over {params.ct.eval_bars} bars" in line and not summary.registered.promoted  # never on its window
    assert str(store.get_model_version_by_alias(name, CHAMPION).version) == "1"
    assert version.tags.get("shadow_since") == (version.tags["eval_window"][-10:] if screened else None)
    run = store.get_run(summary.registered.run_id)
    assert run.info.run_name == f"ct {date.today()} data {summary.data_version[:8]}"
    assert [d.dataset.digest for d in run.inputs.dataset_inputs] == [summary.data_version[:8]]
    assert run.data.metrics["window_challenger_sharpe"] == metrics["challenger"]["sharpe"]
    assert store.get_experiment(run.info.experiment_id).tags["mlflow.experimentKind"] == "custom_model_development"
    assert sorted(a.path for a in store.list_artifacts(run.info.run_id, "gate")) == [
        "gate/equity.csv", "gate/equity.png", "gate/gate.md", "gate/metrics.json", "gate/tearsheet.html"]
    sheet = (params.dirs.ct / "report" / "tearsheet.html").read_text(encoding="utf-8")
    assert "Challenger vs champion" in sheet and "<svg" in sheet  # quantstats drew it: registry.tearsheet
    assert ct_cycle(params).note.startswith(f"nothing new since data version {summary.data_version[:8]}")


def test_a_shadow_trades_beside_the_champion_and_is_promoted_when_its_record_passes(built_copy, prefect_server):
    """The gate forced open (``gate_margin: -1000``, every edge 'significant'), so that the
    wiring is what is tested: a cycle's challenger enters shadow, never champion; the shadow
    trades its own paper account beside the champion's; once its record has traded
    ``ct.shadow_bars`` bars, the next cycle tests it and promotes it."""
    params = built_copy.model_copy(update={
        "registry": built_copy.registry.model_copy(update={"gate_margin": -1000.0}),
        "ct": built_copy.ct.model_copy(update={"shadow_bars": 10})})
    store, name = client(params.registry), params.registry.model_name
    assert register(params).aliases == [CHAMPION]  # version 1: the pipeline's gate promotes directly
    simulate(params, 5)
    first = ct_cycle(params)
    assert first.note.startswith("version 2: enters shadow") and alias_map(store, name) == {
        CHAMPION: "1", SHADOW: "2", CHALLENGER: "2"}
    since = store.get_model_version(name, "2").tags["shadow_since"]
    assert since == str(feature_set.load(params.dirs.features).timestamps[-1])[:10]
    sheet = (params.dirs.ct / "report" / "tearsheet.html").read_text(encoding="utf-8")
    assert "no tearsheet drawn (registry.tearsheet: false)" in sheet and "<svg" not in sheet  # the tiny config's

    both = deliver(params)  # one trading cycle: the champion, then the shadow in its own account
    assert (both.version, both.role, both.shadow.version, both.shadow.role) == ("1", "champion", "2", "shadow")
    assert both.shadow.orders and all(o["client_order_id"].startswith("pdr-shadow-v2-") for o in both.shadow.orders)
    assert all(o["client_order_id"].startswith("pdr-v1-") for o in both.orders)
    assert ledger_ids(params.dirs.broker / "broker.db").isdisjoint(ledger_ids(params.dirs.broker / "broker-shadow.db"))
    assert any(i.startswith("pdr-shadow-v2-") for i in ledger_ids(params.dirs.broker / "broker-shadow.db"))

    simulate(params, 10)
    second = ct_cycle(params)
    assert second.note.startswith("version 3: shadow version 2 promoted to champion: vs champion: ΔSharpe ")
    assert "over 10 bars" in second.note
    assert alias_map(store, name) == {CHAMPION: "2", PREVIOUS: "1", SHADOW: "3", CHALLENGER: "3"}
    tags = store.get_model_version(name, "2").tags
    assert (tags["shadow_bars"], tags["shadow_tested"], tags["shadow_since"]) == ("10", "10", since)
    after = deliver(params)
    assert (after.version, after.shadow.version) == ("2", "3")


def test_a_look_is_recorded_before_registration_so_a_failed_cycle_does_not_look_again(
        built_copy, prefect_server, monkeypatch):
    """The gate forced open, as above. The cycle that tests the shadow dies registering: the
    look is on the shadow's version already, so the rerun on the same bars does not test it
    again (the decision of a spent look is lost, never retaken; docs/operations.md, the gate)."""
    params = built_copy.model_copy(update={
        "registry": built_copy.registry.model_copy(update={"gate_margin": -1000.0}),
        "ct": built_copy.ct.model_copy(update={"shadow_bars": 10, "generations": 1})})
    store, name = client(params.registry), params.registry.model_name
    register(params)
    simulate(params, 5)
    assert ct_cycle(params).note.startswith("version 2: enters shadow")
    simulate(params, 10)

    def dies(*args, **kwargs):
        raise RuntimeError("the tracking server died while registering")

    monkeypatch.setattr(cycle_module, "register_task", dies)
    with pytest.raises(RuntimeError, match="died while registering"):
        ct_cycle(params)
    tags = store.get_model_version(name, "2").tags
    assert (tags["shadow_tested"], tags["shadow_bars"]) == ("10", "10")
    assert tags["shadow_line"].startswith("shadow version 2 promoted to champion: ")  # the look, not carried out
    assert alias_map(store, name) == {CHAMPION: "1", SHADOW: "2", CHALLENGER: "2"}
    monkeypatch.undo()
    again = ct_cycle(params)
    assert again.note.startswith("version 3: shadow version 2 stays in shadow: ")
    assert store.get_model_version(name, "2").tags["shadow_tested"] == "10"
    assert alias_map(store, name) == {CHAMPION: "1", SHADOW: "2", CHALLENGER: "3"}


def alias_map(store, name: str) -> dict[str, str]:
    return {a: str(v) for a, v in store.get_registered_model(name).aliases.items()}


def ledger_ids(path) -> set[str]:
    import sqlite3

    with contextlib.closing(sqlite3.connect(path)) as db:
        return {row[0] for row in db.execute("SELECT client_order_id FROM orders")}


@pytest.mark.slow
def test_a_cycle_on_the_minute_config_runs_through_the_gate_and_delivers_minute_bars(tmp_path, prefect_server):
    """params.minute.yaml at tiny size, the gate forced open: the first champion; a session of
    new minutes; a cycle whose challenger, judged on the newest 390 minutes, enters shadow;
    both trade the latest minute bar; half a session more, and the next cycle promotes the
    shadow on its 195-minute record, which then trades as the champion."""
    params = load_params(REPO / "params.minute.yaml", [
        *MINUTE_TINY, f"data_dir={tmp_path / 'data'}", f"registry.tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}",
        f"registry.artifact_root={tmp_path / 'artifacts'}", "ct.eval_bars=390", "ct.shadow_bars=195"])
    for stage in (ingest, validate, features.features, train, backtest):
        stage(params)
    store, name = client(params.registry), params.registry.model_name
    assert register(params).aliases == [CHAMPION] and name == "podracer-ppo-1min"
    assert simulate(params, 390).last == "2023-10-30T19:59:00+00:00"  # Monday's whole session
    first = ct_cycle(params)
    assert first.appended_bars == 390 and first.note.startswith("version 2: enters shadow")
    assert "over 390 bars" in first.note and alias_map(store, name) == {CHAMPION: "1", SHADOW: "2", CHALLENGER: "2"}
    tags = store.get_model_version(name, "2").tags
    assert (tags["eval_window"], tags["data_cutoff"]) == ("2023-10-30..2023-10-30", "2023-10-27")
    both = deliver(params)  # the champion, then the shadow in its own account, on the last minute bar
    assert (both.version, both.shadow.version) == ("1", "2") and "2023-10-30" in str(both.bar)

    simulate(params, 195)  # Tuesday to 16:44 UTC: the shadow's record is 195 minutes
    second = ct_cycle(params)
    assert second.note.startswith("version 3: shadow version 2 promoted to champion: vs champion: ΔSharpe ")
    assert "over 195 bars" in second.note
    assert alias_map(store, name) == {CHAMPION: "2", PREVIOUS: "1", SHADOW: "3", CHALLENGER: "3"}
    after = deliver(params)
    assert after.version == "2" and "2023-10-31" in str(after.bar)


def test_the_cycles_slot_is_leased_for_a_minute_so_a_killed_cycle_frees_it_soon(monkeypatch):
    """A cycle killed with its runner cannot release its slot; the lease runs out instead, and
    must do so before the data poll's rerun asks for it (docs/operations.md, The supervisor),
    not after Prefect's default 300 s."""
    taken: list[dict] = []
    monkeypatch.setattr(cycle_module, "concurrency", lambda *a, **kw: taken.append(kw) or contextlib.nullcontext())
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:9/api")
    with cycle_module._hold_slot():
        pass
    assert taken[0]["lease_duration"] == 60.0 and taken[0]["occupy"] == 1
    monkeypatch.delenv("PREFECT_API_URL")
    with cycle_module._hold_slot():
        pass
    assert len(taken) == 1  # `podracer ct` on a temporary server takes no slot
