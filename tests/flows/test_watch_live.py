"""The champion's live watch end to end, as it runs under ``podracer up`` (docs/operations.md, the
watch): a planted regime change, the alarm, the retraining it asks for, the rollback and ``down``.

The ground is laid in this process, with the product's own functions (the stages, ``register``,
``simulate`` and one delivery cycle per new bar), before the services start: a tiny project of
30 stocks whose trends are ten times the default market's (``data.signal: 10``), traded by
allocation (``env.action: weights``, ``env.tilt: 1``) on a trend feature. Version 1, the trained
scorer, trades 10 new bars and its watch holds; then version 2, the ``ewm_40`` momentum rule
set by hand in a per-stock scorer (it scores each stock by its trailing trend, so it holds the
stocks that rose), is registered champion and trades 10 bars of its own, its watch holding too.

Then, with the services up: ``podracer simulate --bars 20 --turn`` plants the change (every
stock's trend turns over in 20 new sessions, one arrival); its event starts a CT cycle, which
brings the bars into the features; ``podracer trade --once`` trades the latest of them. The
record's newest return spans the 20 turned sessions, over which the momentum rule held the
stocks that now fall: one look at it finds severe decay under the shipped watch (``watch:``
at its defaults), moves the champion alias back to version 1, whose own watch held, and emits
``podracer.champion.decayed``, whose ``ct-cycle/on-decay`` run retrains; the runner delivers
version 1 again. ``podracer status`` shows the look that rolled the alias back.

Why it is built so: the watch needs 10 returns before it tests anything, and each return is one
trading cycle on a bar the features have; under the services each costs a CT cycle (about 20 s
alone on two cores, more beside other tests). So the 20 returns before the change are traded in this
process (about a second each), and the change itself is one arrival of many bars and one
trading cycle, as a trading loop that was down for four weeks would record it. At the tiny
project's 4 stocks and default trends, a turn is lost in the noise of a fresh market's own
drifts (the watch needs a few hundred bars to call it, docs/results.md); 30 stocks with ten
times the trend make the momentum rule lose far below buy-and-hold on the turned bars, so the
shipped thresholds call it at once. ``services.poll_seconds: 600``: the runner's polls cover
lost events, and none is lost here; a data poll would start one more CT cycle on the ground's
bars, which no event announced.
"""

from __future__ import annotations

import time

import pytest
import requests
import torch
import yaml

from standins.tiny import tiny_params
from tasks.config import Params, apply_override
from tasks.data.arrivals import simulate
from tasks.data.features import features
from tasks.data.validate import validate
from tasks.delivery.client.deliver import deliver
from tasks.model import bundle
from tasks.model.backtest import backtest
from tasks.registry.aliases import CHAMPION
from tasks.registry.register import register
from tasks.registry.store import client
from tests.conftest import build_through_backtest
from tests.flows.live_services import MODEL, READ, Project, kill_all, podracer, wait_for

MARKET = ["data.symbols=30", "data.signal=10", "features.indicators=[ewm_40_xs, vol_20]",
          "features.normalise=pooled", "env.action=weights", "env.tilt=1.0", "ppo.policy=shared"]
"""The project's market and policies (above); everything else is the tiny project's."""
TURNED = 20
"""Sessions of the planted change, in one arrival."""


def settle(path, assignments: list[str]) -> None:
    """Write ``KEY=VALUE`` assignments into the YAML file ``path``."""
    tree = yaml.safe_load(path.read_text())
    for assignment in assignments:
        apply_override(tree, assignment)
    path.write_text(yaml.safe_dump(tree, default_flow_style=None))


def trade_new_bars(params: Params, bars: int) -> None:
    """The champion trades the latest bar, then each of ``bars`` new sessions as it lands."""
    deliver(params)
    for _ in range(bars):
        simulate(params, 1)
        validate(params)
        features(params)
        deliver(params)


def momentum_rule(params: Params) -> None:
    """Replace the trained bundle with the ``ewm_40`` rule, a per-stock scorer whose score is the
    stock's trailing trend (``ewm_40_xs``: ReLU(x) − ReLU(−x)), and backtest it."""
    _, meta = bundle.load(params.dirs.models)
    assert meta.policy == "shared" and meta.feature_names[0] == "ewm_40_xs"
    actor = meta.actor()
    with torch.no_grad():
        for weights in actor.parameters():
            weights.zero_()
        actor.net[0].weight[0, 0], actor.net[0].weight[1, 0] = 1.0, -1.0
        actor.net[-1].weight[0, 0], actor.net[-1].weight[0, 1] = 1.0, -1.0
    bundle.save(params.dirs.models, actor.state_dict(), meta)
    backtest(params)


def tags_of(params: Params, version: str) -> dict[str, str]:
    """A version's tags, read from the project's store (before the services start)."""
    return client(params.registry).get_model_version(params.registry.model_name, version).tags


def aliases(p: Project) -> dict[str, str]:
    model = requests.get(f"{p.mlflow}/registered-models/get", params={"name": MODEL}, timeout=READ).json()
    return {a["alias"]: a["version"] for a in model["registered_model"].get("aliases", [])}


def runs_of(p: Project, flow: str, deployment: str) -> list[dict]:
    """The runs of ``flow/deployment``, oldest first."""
    found = requests.get(f"{p.api}/deployments/name/{flow}/{deployment}", timeout=READ).json()
    return requests.post(f"{p.api}/flow_runs/filter", timeout=READ, json={
        "deployments": {"id": {"any_": [found["id"]]}}, "sort": "EXPECTED_START_TIME_ASC"}).json()


def finished(p: Project, flow: str, deployment: str, count: int) -> list[dict] | None:
    """The deployment's runs once ``count`` of them have completed (a failed one fails the test)."""
    runs = runs_of(p, flow, deployment)
    failed = [r for r in runs if r["state_type"] in ("FAILED", "CRASHED")]
    assert not failed, failed[0]["state"]
    return runs if sum(r["state_type"] == "COMPLETED" for r in runs) >= count else None


def events(p: Project, name: str) -> list[dict]:
    return requests.post(f"{p.api}/events/filter", timeout=READ,
                         json={"filter": {"event": {"name": [name]}}, "limit": 50}).json()["events"]


@pytest.mark.slow
def test_a_planted_turn_raises_the_alarm_retrains_rolls_back_and_down_leaves_nothing(tmp_path):
    marks = [("", time.monotonic())]

    def lap(name: str) -> None:
        marks.append((name, time.monotonic()))

    built = build_through_backtest(tiny_params(tmp_path / "built", *MARKET))
    p = Project(tmp_path, built)
    settle(tmp_path / "params.yaml", [*MARKET, "services.poll_seconds=600"])
    # the gate would refuse the tiny scorer: it is made champion, as the services test's is
    ground = tiny_params(tmp_path, *MARKET, f"broker.port={p.ports['broker']}", "registry.gate_margin=-1000")
    assert register(ground).aliases == [CHAMPION]
    trade_new_bars(ground, 10)
    assert tags_of(ground, "1")["watch_verdict"] == "holds"
    momentum_rule(ground)
    assert register(ground).aliases == [CHAMPION]
    trade_new_bars(ground, 10)
    held = tags_of(ground, "2")
    assert held["watch_verdict"] == "holds" and held["watch_bars"] == "10", held["watch_line"]
    lap("ground")

    pids: list[int] = []
    try:
        podracer(tmp_path, "up", "-s", f"services.receiver_port={p.ports['receiver']}",
                 "-s", f"broker.port={p.ports['broker']}")
        pids = [r["pid"] for r in p.recorded()]
        lap("up")
        status = podracer(tmp_path, "status")
        assert "champion version 2, since " in status and ": watch over 10 bars: holds (" in status

        # the planted change: its event starts a CT cycle, which brings the turned bars into the features
        said = podracer(tmp_path, "simulate", "--bars", str(TURNED), "--turn")
        assert "trends turned over" in said and "event podracer.data.arrived emitted" in said
        wait_for("the new-data cycle", lambda: finished(p, "ct-cycle", "on-new-data", 1), 300)
        known = set(p.versions())
        lap("turn and its CT cycle")

        # one trading cycle on them: the watch finds severe decay, rolls back and asks for a retrain
        traded = podracer(tmp_path, "trade", "--once")
        tags = p.versions()["2"]
        assert f"WARNING {' '.join(tags['watch_line'].split())}" in traded
        assert tags["watch_verdict"] == "severe decay" and tags["watch_bars"] == "11", tags["watch_line"]
        assert tags["watch_line"].count(", alarm at bar 10") == 2  # both tests, on the return over the turn
        assert tags["watch_action"].startswith("rollback to version 1 at bar "), tags["watch_action"]
        assert "; retrain asked at bar " in tags["watch_action"]
        assert aliases(p)[CHAMPION] == "1" and aliases(p)["previous_champion"] == "2"
        lap("trading cycle")
        status = podracer(tmp_path, "status")
        assert f"rolled back by the watch: {' '.join(tags['watch_line'].split())}" in status, status

        # the event, and the on-decay cycle it starts, which registers a challenger
        sent = wait_for("the event", lambda: [e for e in events(p, "podracer.champion.decayed")
                                              if e["payload"]["version"] == "2"], 30)
        assert len(sent) == 1 and tags["watch_line"].startswith(sent[0]["payload"]["line"])
        wait_for("the event to start an on-decay run", lambda: runs_of(p, "ct-cycle", "on-decay"), 60)
        runs = wait_for("the on-decay cycle", lambda: finished(p, "ct-cycle", "on-decay", 1), 180)
        assert len(runs) == 1 and runs[0]["parameters"]["decayed"].startswith("champion version 2, since ")
        new = set(p.versions()) - known
        assert len(new) == 1 and p.versions()[new.pop()]["origin"] == "ct"
        lap("on-decay cycle")

        # the alias moved through the tracking server: the runner delivers version 1, whose watch starts again
        wait_for("the delivery of version 1", lambda: p.delivered() == "1", 90)
        bar = tags["watch_action"].removeprefix("rollback to version 1 at bar ").split(";")[0]
        assert aliases(p)[CHAMPION] == "1" and p.versions()["1"]["watch_since"] == bar
        lap("delivery")

        p.down_leaves_nothing(pids)
        p.nothing_left_the_machine()
        lap("down")
        print(", ".join(f"{name} {b - a:.0f} s" for (_, a), (name, b) in zip(marks, marks[1:]))
              + f"; {marks[-1][1] - marks[0][1]:.0f} s in all")
    finally:
        kill_all(tmp_path, pids)
