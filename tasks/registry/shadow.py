"""The shadow: a model that passed the weak screen but not the test, trading beside the champion.

At most one version carries the ``shadow`` alias. Its registry tags hold its state: the
date its record starts after (``shadow_since``: the last bar of the window that chose it,
so the record is bars it never saw and was not chosen on), the record length at its latest
test (``shadow_tested``), and its latest record (``shadow_bars``, ``shadow_sharpe_diff``,
``shadow_p``, ``shadow_line``), which ``podracer status`` and the version page show; a
retired one gets ``shadow_retired`` (the date) and ``shadow_retired_reason``. Each cycle
replays the frozen shadow over its record with the backtest's MDP, beside the champion and
buy-and-hold on the same bars (:func:`shadow_record`); its paper account at the broker
trades the same bars live (docs/delivery.md, shadow accounts). The gate
(:func:`tasks.registry.decision.decide_cycle`) promotes, keeps or retires it.

Each look is written down (:func:`record_look`) as soon as the gate has taken it, before
anything acts on it: a cycle that fails later does not look again on the same record, so
the looks a year stay bounded. :func:`settle` then moves the aliases. A shadow whose state
cannot be read (no ``shadow_since``, or no record on this data) is a one-line error, never
taken for a free seat; a shadow that loses its seat any other way than by the gate (a newer
model given the alias) is retired explicitly first (docs/operations.md, the gate).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from tasks.config import Params, RegistryParams
from tasks.data import feature_set
from tasks.errors import MissingInput
from tasks.model.backtest import BacktestResult, compare, since_window
from tasks.model.walkforward import Champion
from tasks.registry.aliases import SHADOW, alias_version, promote
from tasks.registry.decision import Decision, ShadowFate
from tasks.registry.evidence import binding
from tasks.registry.store import client
from tasks.registry.tags import BARS, DIFF, LINE, MAX_TAG, P_VALUE, RETIRED, RETIRED_WHY, SINCE, TESTED
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
    """The version carrying ``shadow``, its bundle fetched; None when there is none.

    A shadow without ``shadow_since`` has no record to test, and the seat must not be given
    away as if it were free: a one-line :class:`MissingInput` naming the version."""
    registry = params.registry
    version = alias_version(registry, SHADOW)
    if version is None:
        return None
    tags = client(registry).get_model_version(registry.model_name, version).tags
    if SINCE not in tags:
        raise MissingInput(f"{registry.model_name} version {version} carries the {SHADOW} alias but no {SINCE} "
                           "tag: its record cannot be found; tag it with the date its record starts after, "
                           f"or take the {SHADOW} alias off it")
    folder = fetch_bundle(registry, version, params.dirs.ct / CT_FOLDER)
    return Shadow(version, folder, tags[SINCE], int(tags.get(TESTED, "0")))


def shadow_record(params: Params, shadow: Shadow, champion: Champion | None) -> BacktestResult | None:
    """The shadow beside the champion (if any) and buy-and-hold over the bars after its
    ``since`` date; None when no bar has come since (nothing to test yet). A shadow that
    cannot be replayed on this data (another universe or features) is a one-line
    :class:`MissingInput` naming it: its seat is not free."""
    window = since_window(feature_set.load(params.dirs.features), shadow.since)
    if window is None:
        return None
    folders = {ARM: shadow.folder, **({"champion": champion.folder} if champion else {})}
    try:
        return compare(params, folders, window, params.dirs.ct / RECORD_FOLDER, f"Shadow v{shadow.version} record")
    except MissingInput as err:
        raise MissingInput(f"{params.registry.model_name} shadow version {shadow.version} has no record after "
                           f"{shadow.since}: {err}") from None


def record_look(registry: RegistryParams, fate: ShadowFate) -> None:
    """Write the shadow's latest record and the record length at its latest test
    (``shadow_tested``) on its version: done as soon as the gate has looked, so that a
    cycle that fails afterwards does not take the same look again. Idempotent."""
    store, name = client(registry), registry.model_name
    values = [(TESTED, str(fate.tested))]
    if fate.record:
        worst = binding(fate.record)
        values += [(BARS, str(worst.bars)), (DIFF, f"{worst.diff:.4f}"), (P_VALUE, f"{worst.p_value:.4f}"),
                   (LINE, fate.line[:MAX_TAG])]
    for key, value in values:
        store.set_model_version_tag(name, fate.version, key, value)


def retire(registry: RegistryParams, version: str, day: str, why: str) -> None:
    """Retire shadow ``version``: tag it ``shadow_retired`` (``day``) and ``why`` (a line that
    names it), take the ``shadow`` alias off it, and say so in the log."""
    store, name = client(registry), registry.model_name
    store.set_model_version_tag(name, version, RETIRED, day)
    store.set_model_version_tag(name, version, RETIRED_WHY, why[:MAX_TAG])
    if alias_version(registry, SHADOW) == version:
        store.delete_registered_model_alias(name, SHADOW)
    log.warning("%s", why)


def settle(registry: RegistryParams, decision: Decision, version: str, since: str) -> None:
    """Carry out ``decision`` on the registry: ``version`` is the new model (just registered)
    and ``since`` the last bar of the window that judged it (its record would start after).

    The shadow's look is written first (again: :func:`record_look` is idempotent, so settling
    after the cycle wrote it changes nothing). A new model given the ``shadow`` alias while
    another version holds it retires that one first, saying so: a seat is never taken
    silently, and no shadow's record is restarted."""
    store, name = client(registry), registry.model_name
    fate = decision.shadow
    if fate is not None:
        record_look(registry, fate)
        if fate.outcome == "promote":
            promote(registry, fate.version)
            log.info("shadow version %s promoted to champion: %s", fate.version, fate.line)
        elif fate.outcome == "retire":
            retire(registry, fate.version, since, fate.line)
    if decision.action == "promote":
        promote(registry, version)
    elif decision.action == "shadow":
        holder = alias_version(registry, SHADOW)
        if holder is not None and holder != version:
            retire(registry, holder, since, f"shadow version {holder} retired: its seat goes to version {version} "
                                            f"({decision.line})")
        store.set_model_version_tag(name, version, SINCE, since)
        store.set_model_version_tag(name, version, TESTED, "0")
        store.set_registered_model_alias(name, SHADOW, version)
