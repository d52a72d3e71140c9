"""The champion's live watch (tasks/delivery/client/watch.py): its record from the journal and the
closes, checked by hand; and what it does on a registry (a throwaway sqlite store, no model files)
with records whose truth is known: a champion that holds, decays, turns over, or cannot be read;
a rollback only to a version whose own watch held, else flat; each action once per watch."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import pytest

from tasks.config import Params, RegistryParams
from tasks.delivery.client.standing import watch_lines
from tasks.delivery.client.watch import DECAYED, HOLDS, input_drift, live_record, look, restart
from tasks.registry.aliases import CHAMPION, PREVIOUS, alias_version, promote
from tasks.registry.decay import Promise
from tasks.registry.store import client
from tasks.registry.tags import SAFE, WATCH_ACTION, WATCH_SINCE, WATCH_VERDICT
from tasks.registry.versions import CUTOFF
from tests.tasks.registry.conftest import registry  # noqa: F401 - the fixture


def rows(version: str, bars: list[str], equity: list[float], state: str = "recorded") -> list[dict[str, Any]]:
    return [{"bar": b, "model_version": version, "state": state, "body": {"equity": e}} for b, e in zip(bars, equity)]


def test_the_record_is_the_versions_recorded_equity_beside_buy_and_hold_on_the_same_bars():
    keys = ["d0", "d1", "d2", "d3", "d4"]
    closes = np.array([[9.0, 20.0], [10.0, 20.0], [11.0, 20.0], [11.0, 22.0], [10.0, 22.0]])
    cycles = (rows("3", ["d1", "d2", "d3", "d4"], [100.0, 110.0, 99.0, 99.0]) + rows("2", ["d0", "d1"], [5.0, 7.0])
              + rows("3", ["d0"], [1.0]) + rows("3", ["d3"], [1.0], state="halted"))
    r = live_record(cycles, keys, closes, "3", since="d1")  # d0 is before its watch began
    assert r.bars == ["d1", "d2", "d3", "d4"]
    assert r.model.tolist() == pytest.approx([0.1, -0.1, 0.0])
    # buy-and-hold bought equal weights at d1: values 1, (1.1 + 1)/2, (1.1 + 1.1)/2, (1 + 1.1)/2
    assert r.hold.tolist() == pytest.approx([0.05, 1.1 / 1.05 - 1, 1.05 / 1.1 - 1])
    missing = live_record(rows("3", ["d1", "d9"], [100.0, 101.0]), keys, closes, "3", since="d1")
    assert math.isnan(missing.hold[0])  # a bar the feature set does not have: the look fails closed


PROMISE = Promise(mean=0.0005, se=0.004 / math.sqrt(252), bars=252)  # an information ratio of about 2


@pytest.fixture
def params(registry: RegistryParams, tmp_path) -> Params:  # noqa: F811 - the imported fixture
    """The registry tests' store (versions 1..3), version 2 champion with its promise, version 1 before it."""
    store = client(registry)
    for key, value in PROMISE.tags().items():
        store.set_model_version_tag(registry.model_name, "2", key, value)
    promote(registry, "1")
    promote(registry, "2")
    return Params(data_dir=tmp_path / "data", registry=registry)


def market(active_mean: float, bars: int = 504, seed: int = 0, nan_at: int | None = None):
    """Journal cycles of version 2 and one stock's closes: its account earns buy-and-hold's
    return plus an active return of ``active_mean`` a bar (sd 0.004)."""
    rng = np.random.default_rng(seed)
    bench = rng.normal(0.0003, 0.01, bars)
    equity = 1e6 * np.cumprod(np.r_[1.0, 1.0 + bench + rng.normal(active_mean, 0.004, bars)])
    if nan_at is not None:
        equity[nan_at] = np.nan
    keys = [f"b{i:05d}" for i in range(bars + 1)]
    closes = np.cumprod(np.r_[1.0, 1.0 + bench])[:, None] * 50.0
    return rows("2", keys, equity.tolist()), keys, closes


class Calls:
    def __init__(self, fail: bool = False) -> None:
        self.events: list[dict[str, Any]] = []
        self.flattened = 0
        self.fail = fail

    def emit(self, event: dict[str, Any]) -> None:
        if self.fail:
            raise ConnectionError("no Prefect server")
        self.events.append(event)

    def flatten(self) -> None:
        self.flattened += 1


def tags(params: Params, version: str) -> dict[str, str]:
    return client(params.registry).get_model_version(params.registry.model_name, version).tags


def test_a_champion_that_keeps_its_promise_holds_and_nothing_acts(params):
    calls = Calls()
    seen = look(params, *market(0.0005), calls.flatten, calls.emit)
    assert seen.verdict == HOLDS and seen.action is None
    assert (calls.events, calls.flattened) == ([], 0)
    assert tags(params, "2")[WATCH_VERDICT] == HOLDS and tags(params, "2")[WATCH_SINCE] == "b00000"
    assert alias_version(params.registry, CHAMPION) == "2"


def strong(params: Params) -> None:
    store = client(params.registry)
    for key, value in Promise(0.002, 0.004 / math.sqrt(2520), 2520).tags().items():
        store.set_model_version_tag(params.registry.model_name, "2", key, value)


def test_a_decay_above_buy_and_hold_asks_for_a_retrain_once_and_keeps_the_champion(params):
    """A strong promise (an information ratio of 8, read from ten years) whose edge is gone:
    the record runs at buy-and-hold, far below the promise's floor, never below the market."""
    strong(params)
    calls = Calls()
    seen = look(params, *market(0.0, bars=504, seed=3), calls.flatten, calls.emit)
    assert seen.verdict == "decay" and seen.action.startswith("retrain asked at bar")
    assert [e["event"] for e in calls.events] == [DECAYED] and calls.events[0]["payload"]["version"] == "2"
    assert alias_version(params.registry, CHAMPION) == "2" and calls.flattened == 0
    again = look(params, *market(0.0, bars=504, seed=3), calls.flatten, calls.emit)
    assert again.action is None and len(calls.events) == 1  # one event per watch


def test_a_severe_decay_rolls_back_to_a_previous_champion_whose_watch_held(params):
    client(params.registry).set_model_version_tag(params.registry.model_name, "1", WATCH_VERDICT, HOLDS)
    calls = Calls()
    seen = look(params, *market(-0.0005, seed=2), calls.flatten, calls.emit)
    assert seen.verdict == "severe decay"
    assert seen.action.startswith("rollback to version 1 at bar") and "retrain asked" in seen.action
    assert alias_version(params.registry, CHAMPION) == "1" and alias_version(params.registry, PREVIOUS) == "2"
    assert calls.flattened == 0 and len(calls.events) == 1
    assert tags(params, "2")[WATCH_ACTION].startswith("rollback to version 1")


@pytest.mark.parametrize("previous_verdict", [None, "decay", "fault"])
def test_a_severe_decay_goes_flat_when_the_previous_champion_is_not_known_healthy(params, previous_verdict):
    if previous_verdict is not None:
        client(params.registry).set_model_version_tag(params.registry.model_name, "1", WATCH_VERDICT,
                                                      previous_verdict)
    calls = Calls()
    seen = look(params, *market(-0.0005, seed=2), calls.flatten, calls.emit)
    assert seen.action.startswith("flat at bar") and calls.flattened == 1
    assert alias_version(params.registry, CHAMPION) is None and alias_version(params.registry, PREVIOUS) == "2"
    safe = client(params.registry).get_registered_model(params.registry.model_name).tags[SAFE]
    assert safe.startswith("flat at bar") and "previous version 1's own watch did not hold" in safe
    restart(params, "1", "b00600")  # a hand move names a champion again: the safe policy ends
    assert SAFE not in client(params.registry).get_registered_model(params.registry.model_name).tags


def test_a_nan_in_the_record_or_no_promise_fails_closed_and_nothing_acts(params):
    calls = Calls()
    broken = look(params, *market(-0.0005, seed=2, nan_at=300), calls.flatten, calls.emit)
    assert broken.verdict == "fault" and "return nan" in broken.watch.fault and broken.action is None
    store = client(params.registry)
    for key in PROMISE.tags():
        store.delete_model_version_tag(params.registry.model_name, "2", key)
    unpromised = look(params, *market(-0.0005, seed=2), calls.flatten, calls.emit)
    assert unpromised.watch.fault.startswith("its promise cannot be read") and unpromised.action is None
    assert (calls.events, calls.flattened) == ([], 0) and alias_version(params.registry, CHAMPION) == "2"


def test_an_event_that_could_not_be_sent_is_asked_again_at_the_next_look(params):
    strong(params)
    record = market(0.0, bars=504, seed=3)
    assert look(params, *record, Calls().flatten, Calls(fail=True).emit).action is None
    calls = Calls()
    assert look(params, *record, calls.flatten, calls.emit).action.startswith("retrain asked")


def test_a_restart_begins_the_record_again_and_forgets_the_last_verdict(params):
    calls = Calls()
    look(params, *market(0.0005), calls.flatten, calls.emit)
    restart(params, "2", "b00490")
    assert WATCH_VERDICT not in tags(params, "2") and tags(params, "2")[WATCH_SINCE] == "b00490"
    seen = look(params, *market(0.0005), calls.flatten, calls.emit)
    assert seen.watch.bars == 14 and seen.since == "b00490"  # b00490..b00504: 15 values, 14 returns


def test_status_shows_the_latest_look_the_action_and_the_safe_policy(params):
    assert watch_lines(params.registry, "2") == ["champion version 2: not watched yet (no recorded trading cycle)"]
    look(params, *market(-0.0005, seed=2), Calls().flatten, Calls().emit)  # no healthy previous: flat
    lines = watch_lines(params.registry, alias_version(params.registry, CHAMPION))
    assert len(lines) == 1 and lines[0].startswith("safe policy: flat at bar")
    assert "severe decay" in lines[0] and "champion version 2, since b00000: watch over" in lines[0]
    shown = watch_lines(params.registry, "2")  # the decayed version's own page
    assert shown[1].startswith("champion version 2, since b00000: watch over") and "severe decay" in shown[1]
    assert shown[2].startswith("watch action: flat at bar")


def test_status_names_the_look_that_rolled_the_champion_back(params):
    """The action is written on the decayed version, which is no longer champion: status shows
    its line under the champion it rolled back to, until the aliases move on."""
    client(params.registry).set_model_version_tag(params.registry.model_name, "1", WATCH_VERDICT, HOLDS)
    look(params, *market(-0.0005, seed=2), Calls().flatten, Calls().emit)
    assert (alias_version(params.registry, CHAMPION), alias_version(params.registry, PREVIOUS)) == ("1", "2")
    shown = watch_lines(params.registry, "1", "2")
    assert shown[-1].startswith("rolled back by the watch: champion version 2, since b00000: watch over 504 bars: "
                                "severe decay (") and "; rollback to version 1 at bar b00504" in shown[-1]
    assert watch_lines(params.registry, "1") == shown[:-1]
    promote(params.registry, "2")  # by hand: version 1's watch rolled nothing back
    assert not any(line.startswith("rolled back") for line in watch_lines(params.registry, "2", "1"))


def test_the_input_drift_is_a_warning_on_the_champions_version_and_in_status(params):
    store = client(params.registry)
    keys = [str(d)[:10] for d in pd.bdate_range("2020-01-01", periods=200)]
    rng = np.random.default_rng(1)
    x = rng.normal(size=(200, 20, 2))
    x[137:, :, 1] += 3.0  # vol_20 moves in the live bars
    assert input_drift(params, "2", x, ["ewm_40_xs", "vol_20"], keys) is None  # no cutoff, no watch yet
    store.set_model_version_tag(params.registry.model_name, "2", CUTOFF, keys[100])
    store.set_model_version_tag(params.registry.model_name, "2", WATCH_SINCE, keys[138])
    assert input_drift(params, "2", x, ["ewm_40_xs", "vol_20"], keys) is None  # 62 live bars: too few to say
    store.set_model_version_tag(params.registry.model_name, "2", WATCH_SINCE, keys[137])
    line = input_drift(params, "2", x, ["ewm_40_xs", "vol_20"], keys)
    assert line.startswith("input drift over 63 live bars against the training window: large shift in vol_20")
    assert watch_lines(params.registry, "2")[-1] == f"warning: {line}"
    assert alias_version(params.registry, CHAMPION) == "2"  # it never acts
