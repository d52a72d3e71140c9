"""The shadow: a model that passed the weak screen but not the test, trading beside the champion.

At most one version carries the ``shadow`` alias. Its registry tags hold its state: the
date its record starts after (``shadow_since``: the last bar of the window that chose it,
so the record is bars it never saw and was not chosen on), the record length at its latest
test (``shadow_tested``), and its latest record (``shadow_bars``, ``shadow_sharpe_diff``,
``shadow_p``, ``shadow_line``), which ``podracer status`` and the version page show. Each
cycle replays the frozen shadow over its record with the backtest's MDP, beside the
champion and buy-and-hold on the same bars (:func:`shadow_record`); its paper account at
the broker trades the same bars live (docs/delivery.md, shadow accounts). The gate
(:func:`tasks.registry.gate.decide_cycle`) promotes, keeps or retires it, and
:func:`settle` moves the aliases and writes the tags (docs/operations.md, the gate).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from tasks.config import Params, RegistryParams
from tasks.data import features
from tasks.errors import MissingInput
from tasks.model.backtest import BacktestResult, compare, since_window
from tasks.model.walkforward import Champion
from tasks.registry.evidence import binding
from tasks.registry.gate import SHADOW, Decision, alias_version, promote
from tasks.registry.store import client
from tasks.registry.tags import BARS, DIFF, LINE, P_VALUE, RETIRED, SINCE, TESTED
from tasks.registry.versions import fetch_bundle

log = logging.getLogger("podracer.register")
CT_FOLDER, RECORD_FOLDER = "shadow", "record"
"""Under ``data/ct/``: the shadow's fetched bundle, and its record's backtest."""
ARM = "shadow"


@dataclass(frozen=True)
class Shadow:
    version: str
    folder: Path
    """Its policy bundle, fetched into ``data/ct/shadow/``."""
    since: str
    tested: int


def current_shadow(params: Params) -> Shadow | None:
    """The version carrying ``shadow``, its bundle fetched; None when there is none."""
    registry = params.registry
    version = alias_version(registry, SHADOW)
    if version is None:
        return None
    tags = client(registry).get_model_version(registry.model_name, version).tags
    if SINCE not in tags:
        log.warning("version %s carries %s but no %s tag: it is not tested", version, SHADOW, SINCE)
        return None
    folder = fetch_bundle(registry, version, params.dirs.ct / CT_FOLDER)
    return Shadow(version, folder, tags[SINCE], int(tags.get(TESTED, "0")))


def shadow_record(params: Params, shadow: Shadow, champion: Champion | None) -> BacktestResult | None:
    """The shadow beside the champion (if any) and buy-and-hold over the bars after its
    ``since`` date; None when no bar has come since, or when it no longer fits the data."""
    window = since_window(features.load(params.dirs.features), shadow.since)
    if window is None:
        return None
    folders = {ARM: shadow.folder, **({"champion": champion.folder} if champion else {})}
    try:
        return compare(params, folders, window, params.dirs.ct / RECORD_FOLDER, f"Shadow v{shadow.version} record")
    except MissingInput as err:
        log.warning("shadow version %s has no record: %s", shadow.version, err)
        return None


def settle(registry: RegistryParams, decision: Decision, version: str, since: str) -> None:
    """Carry out ``decision`` on the registry: ``version`` is the new model (just registered)
    and ``since`` the last bar of the window that judged it (its record would start after)."""
    store, name = client(registry), registry.model_name
    fate = decision.shadow
    if fate is not None:
        worst = binding(fate.record)
        for key, value in ((TESTED, str(fate.tested)), (BARS, str(worst.bars)), (DIFF, f"{worst.diff:.4f}"),
                           (P_VALUE, f"{worst.p_value:.4f}"), (LINE, fate.line)):
            store.set_model_version_tag(name, fate.version, key, value)
        if fate.outcome == "promote":
            promote(registry, fate.version)
            log.info("shadow version %s promoted to champion: %s", fate.version, fate.line)
        elif fate.outcome == "retire":
            store.set_model_version_tag(name, fate.version, RETIRED, since)
            if alias_version(registry, SHADOW) == fate.version:
                store.delete_registered_model_alias(name, SHADOW)
            log.info("shadow version %s retired: %s", fate.version, fate.line)
    if decision.action == "promote":
        promote(registry, version)
    elif decision.action == "shadow":
        store.set_model_version_tag(name, version, SINCE, since)
        store.set_model_version_tag(name, version, TESTED, "0")
        store.set_registered_model_alias(name, SHADOW, version)


shadow_task = task(current_shadow, name="shadow", cache_policy=NO_CACHE)
record_task = task(shadow_record, name="shadow-record", cache_policy=NO_CACHE)
