"""The champion watched live: after each trading cycle its paper record is tested for decay (docs/operations.md).

The **record** is the champion account's own: the equity the journal recorded after each of
the version's cycles (read from the broker, never replayed), from the bar it started trading
as champion (``watch_since``: its first delivered bar, set again after a rollback or a hand
move, which restart the watch). Beside it, **buy-and-hold** on the same bars: equal weights
of the symbols priced at the record's first bar, held, from the feature set's closes, as the
gate's buy-and-hold is.

The **test** is :func:`tasks.registry.decay.watch`, a CUSUM against the promise the version's
gate window made (its ``promise_*`` tags, written at registration) and against buy-and-hold,
with a threshold set for a stated mean time between false alarms (``watch.years``). Every
look is written on the version (``watch_bars``, ``watch_verdict``, ``watch_line``), which
``podracer status`` and the version's page in the MLflow UI show.

**Actions**, each once per watch and written as ``watch_action``:

- **decay** (below the promise's floor): the event ``podracer.champion.decayed``, which
  starts a CT cycle at once (the ``ct-cycle/on-decay`` deployment), new bars or not;
- **severe decay** (below buy-and-hold): the ``champion`` alias goes back to
  ``previous_champion`` if that version's own watch last held; otherwise the safe policy,
  **flat**: no version keeps the alias, the account's positions are closed and the model
  carries ``safe_policy`` until a gate or a hand move names a champion again. Flat, not
  buy-and-hold, because it is the one policy that cannot lose more while the evidence is
  read, and it needs no model of its own. The decayed version becomes ``previous_champion``,
  so ``podracer rollback`` can restore it by hand.

A record that cannot be tested (a NaN equity, too few bars, a version registered without a
promise) fails closed: the look is written with its reason and nothing acts on it.

Beside the record, the champion's **input drift** (:func:`input_drift`): how far its live
bars' features have moved from those it trained on, a warning line that never acts.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tasks.config import Params
from tasks.data.drift import drift_line, feature_drift
from tasks.delivery.client.bar_keys import bar_key
from tasks.registry.aliases import CHAMPION, PREVIOUS, alias_version, promote
from tasks.registry.decay import Promise, Watch, watch
from tasks.registry.store import client as store_client
from tasks.registry.tags import (
    DRIFT,
    MAX_TAG,
    SAFE,
    WATCH_ACTION,
    WATCH_BARS,
    WATCH_LINE,
    WATCH_SINCE,
    WATCH_VERDICT,
)
from tasks.registry.versions import CUTOFF
from trainers.common.metrics import periods_per_year

log = logging.getLogger("podracer.watch")
DECAYED = "podracer.champion.decayed"
"""The event a decayed champion emits; the ``ct-cycle/on-decay`` deployment runs a cycle on it."""
HOLDS = "holds"
DRIFT_BARS = 63
"""Live bars (a quarter of sessions) before the input drift is reported."""


@dataclass(frozen=True)
class Record:
    """A version's live record: per-interval simple returns of its account and of buy-and-hold
    between consecutive recorded bars."""

    bars: list[str]
    model: np.ndarray
    hold: np.ndarray


def live_record(cycles: Sequence[Mapping[str, Any]], keys: Sequence[str], closes: np.ndarray, version: str,
                since: str) -> Record:
    """The record of ``version`` from bar ``since`` on: its ``recorded`` journal cycles
    (``cycles``, oldest first) and, on the same bars, buy-and-hold of the symbols priced at the
    first of them (``closes`` ``[T, n]``, ``keys`` the bar names of its rows). A recorded bar
    the feature set does not have gives a NaN return, so the look fails closed naming it."""
    rows = {str(r["bar"]): float(r["body"].get("equity", np.nan)) for r in cycles
            if str(r["model_version"]) == version and r["state"] == "recorded" and str(r["bar"]) >= since}
    bars = sorted(rows)
    index = {k: i for i, k in enumerate(keys)}
    equity = np.array([rows[b] for b in bars], dtype=np.float64)
    hold = np.full(len(bars), np.nan)
    if bars and bars[0] in index:
        base = closes[index[bars[0]]]
        priced = np.isfinite(base) & (base > 0)
        for j, bar in enumerate(bars):
            if bar in index and priced.any():
                hold[j] = float(np.mean(closes[index[bar], priced] / base[priced]))
    return Record(bars, equity[1:] / equity[:-1] - 1.0, hold[1:] / hold[:-1] - 1.0)


@dataclass(frozen=True)
class Look:
    """One look at the champion's record and what the watch did about it."""

    version: str
    since: str
    watch: Watch
    action: str | None = None

    @property
    def verdict(self) -> str:
        w = self.watch
        return "fault" if w.fault else "severe decay" if w.collapsed else "decay" if w.decayed else HOLDS

    @property
    def line(self) -> str:
        return f"champion version {self.version}, since {self.since}: {self.watch.line}" + (
            f"; {self.action}" if self.action else "")


def restart(params: Params, version: str, bar: str) -> None:
    """Start ``version``'s watch afresh at ``bar``: its first bar as champion, again after a
    rollback or a hand move (an earlier verdict and action no longer apply)."""
    store, name = store_client(params.registry), params.registry.model_name
    store.set_model_version_tag(name, version, WATCH_SINCE, bar)
    tags = store.get_model_version(name, version).tags
    for key in (WATCH_ACTION, WATCH_VERDICT):
        if key in tags:
            store.delete_model_version_tag(name, version, key)
    if SAFE in store.get_registered_model(name).tags:
        store.delete_registered_model_tag(name, SAFE)


def look(params: Params, cycles: Sequence[Mapping[str, Any]], keys: Sequence[str], closes: np.ndarray,
         flatten: Callable[[], None], emit: Callable[[dict[str, Any]], None]) -> Look | None:
    """Test the champion's record, write the look on its version and act on it (above).
    ``flatten`` closes the champion account's positions; ``emit`` sends an event to Prefect.
    None when no version is champion or it has not traded yet."""
    registry = params.registry
    version = alias_version(registry, CHAMPION)
    if version is None:
        return None
    store, name = store_client(registry), registry.model_name
    tags = store.get_model_version(name, version).tags
    since = tags.get(WATCH_SINCE) or min((str(r["bar"]) for r in cycles if str(r["model_version"]) == version
                                          and r["state"] == "recorded"), default=None)
    if since is None:
        return None
    record = live_record(cycles, keys, closes, version, since)
    w = watch(record.model, record.hold, Promise.from_tags(tags), tolerance=params.watch.tolerance,
              years=params.watch.years, per_year=periods_per_year(params.data.freq), alpha=params.watch.alpha)
    done, seen, actions = tags.get(WATCH_ACTION, ""), Look(version, since, w), []
    if w.collapsed and not done.startswith(("rollback", "flat")):
        actions.append(_fall_back(params, seen, record.bars[-1], flatten))
    if (w.decayed or w.collapsed) and not done:
        try:
            emit(decayed_event(name, version, seen.line))
            actions.append(f"retrain asked at bar {record.bars[-1]}")
        except Exception as err:  # noqa: BLE001 - any failure to emit: the next look asks again
            log.warning("%s: the %s event was not sent (%s); the next look asks again", seen.line, DECAYED, err)
    action = "; ".join(actions) or None
    result = Look(version, since, w, action)
    for key, value in ((WATCH_SINCE, since), (WATCH_BARS, str(w.bars)), (WATCH_VERDICT, result.verdict),
                       (WATCH_LINE, result.line[:MAX_TAG])):
        store.set_model_version_tag(name, version, key, value)
    if action:
        store.set_model_version_tag(name, version, WATCH_ACTION, f"{action}: {w.line}"[:MAX_TAG])
        log.warning("%s", result.line)
    return result


def input_drift(params: Params, version: str, features: np.ndarray, names: list[str],
                keys: Sequence[str]) -> str | None:
    """The champion's input drift (:mod:`tasks.data.drift`): each feature's PSI between the bars
    it trained and was selected on (up to its ``data_cutoff``) and its live bars (from
    ``watch_since``), written on its version as ``drift_line``. A warning only: nothing acts on
    it. None before :data:`DRIFT_BARS` live bars: the features are trailing averages, so a few
    bars of them are a few values, whose PSI would be noise."""
    store, name = store_client(params.registry), params.registry.model_name
    tags = store.get_model_version(name, version).tags
    cutoff, since = tags.get(CUTOFF), tags.get(WATCH_SINCE)
    if cutoff is None or since is None:
        return None
    seen = sum(1 for k in keys if k[:10] <= cutoff)
    first = next((i for i, k in enumerate(keys) if k >= since), len(keys))
    if seen == 0 or len(keys) - first < DRIFT_BARS:
        return None
    line = drift_line(feature_drift(features, names, slice(0, seen), slice(first, None)), len(keys) - first)
    store.set_model_version_tag(name, version, DRIFT, line[:MAX_TAG])
    return line


def healthy(params: Params, version: str | None) -> bool:
    """Whether ``version``'s own watch last held: a version never watched, or whose last look
    found decay or could not test, is not a safe place to go back to."""
    if version is None:
        return False
    tags = store_client(params.registry).get_model_version(params.registry.model_name, version).tags
    return tags.get(WATCH_VERDICT) == HOLDS


def _fall_back(params: Params, seen: Look, bar: str, flatten: Callable[[], None]) -> str:
    """Severe decay: back to a healthy ``previous_champion``, else flat (above). Returns the action."""
    registry = params.registry
    store, name = store_client(registry), registry.model_name
    previous = alias_version(registry, PREVIOUS)
    if previous is not None and previous != seen.version and healthy(params, previous):
        promote(registry, previous)  # previous_champion becomes the decayed version
        return f"rollback to version {previous} at bar {bar}"
    store.delete_registered_model_alias(name, CHAMPION)
    store.set_registered_model_alias(name, PREVIOUS, seen.version)
    why = "no previous champion" if previous is None else f"previous version {previous}'s own watch did not hold"
    action = f"flat at bar {bar} ({why})"
    store.set_registered_model_tag(name, SAFE, f"{action}: {seen.line}"[:MAX_TAG])
    flatten()
    return action


def safe_line(params: Params) -> str | None:
    """Why no version trades, while the watch holds the account flat; None otherwise."""
    import mlflow

    try:
        store = store_client(params.registry)
        return store.get_registered_model(params.registry.model_name).tags.get(SAFE)
    except mlflow.exceptions.MlflowException:
        return None


def decayed_event(model_name: str, version: str, line: str) -> dict[str, Any]:
    """The :data:`DECAYED` event of ``version``, in the shape ``prefect_emit`` sends."""
    return {"event": DECAYED, "resource": {"prefect.resource.id": f"podracer.model.{model_name}"},
            "payload": {"version": version, "line": line}}


def bar_keys(timestamps: np.ndarray, freq: str) -> list[str]:
    """The journal's names of the feature set's bars."""
    return [bar_key(t, freq) for t in timestamps]
