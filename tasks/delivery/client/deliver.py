"""Stage 7, deliver: one cycle of the trading loop, champion then shadow, and the record of what it delivered.

:func:`cycle` is the one delivery cycle: the champion trades the latest bar and
``data/broker/delivered.json`` records which version traded (the registry poll compares it
with the champion, docs/operations.md); then the shadow, if a version carries the alias,
trades the same bar in its own account (docs/delivery.md, Shadow accounts). :func:`deliver`
runs it in a session of its own (``podracer deliver``, the pipeline's last stage, the
``deliver`` flow, ``podracer trade --once``); the live loop (:mod:`tasks.delivery.client.live`) runs it on every
new bar. After the champion's cycle its live watch looks at its record (:func:`watch_champion`). With
the local broker the latest bar's orders are ``accepted`` and fill at the next session's
open, when that bar arrives (docs/delivery.md).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests
from alpaca.common.exceptions import APIError
from mlflow.exceptions import MlflowException

from tasks.config import Params
from tasks.data import feature_set
from tasks.delivery.client.loop import CycleResult, NoChampion, message
from tasks.delivery.client.session import Session, trading_session
from tasks.delivery.client.watch import Look, bar_keys, input_drift, look, restart, safe_line
from tasks.errors import PodracerError
from tasks.registry.aliases import SHADOW, alias_version
from tasks.registry.webhook import prefect_emit
from tasks.storage import write_atomic

log = logging.getLogger("podracer.trade")
DELIVERED = "delivered.json"


def delivered_file(params: Params) -> Path:
    return params.dirs.broker / DELIVERED


def delivered_version(params: Params) -> str | None:
    """The champion version the last delivery traded with (what the registry poll compares)."""
    try:
        return str(json.loads(delivered_file(params).read_text())["version"])
    except (OSError, ValueError, KeyError):
        return None


def cycle(session: Session) -> CycleResult:
    """Trade the latest bar once with the champion, record which version traded, then trade it
    with the shadow. Returns the champion's cycle with the shadow's as ``shadow``; with no
    champion, the shadow's cycle alone (no champion traded, nothing is recorded as delivered),
    and :class:`NoChampion` when neither exists."""
    try:
        result: CycleResult | None = session.loop.cycle()
        missing = None
    except NoChampion as err:
        safe = safe_line(session.loop.params)
        result, missing = None, NoChampion(f"{err}; {safe}") if safe else err
    if result is not None:
        params = session.loop.params
        first = result.version != delivered_version(params)  # its first bar as champion: its watch starts here
        write_atomic(delivered_file(params), json.dumps(
            {"version": result.version, "bar": result.bar, "orders": len(result.orders), "at": time.time()}))
        watch_champion(session, (result.version, result.bar) if first else None)
    shadow = shadow_cycle(session)
    if result is not None:
        result.shadow = shadow
        return result
    if shadow is None:
        assert missing is not None
        raise missing
    log.warning("no champion traded (no version has alias 'champion'); shadow version %s traded bar %s in "
                "its own account", shadow.version, shadow.bar)
    return shadow


def watch_champion(session: Session, started: tuple[str, str] | None = None,
                   emit: Callable[[dict[str, Any]], None] | None = None) -> Look | None:
    """The champion's live watch after its cycle (:mod:`tasks.delivery.client.watch`): its
    journal record against its promise and buy-and-hold, and its input drift; ``started``, a
    new champion's version and the bar it first traded, restarts its watch there. A watch that cannot look (the
    registry or the broker does not answer) logs one warning: the delivery stands, and the next
    cycle looks again at the longer record."""
    params = session.loop.params
    try:
        if started is not None:
            restart(params, *started)
        fs = feature_set.load(params.dirs.features)
        keys = bar_keys(fs.timestamps, params.data.freq)
        seen = look(params, session.loop.journal.cycles(), keys, fs.prices,
                    lambda: session.client.close_all_positions(cancel_orders=True), emit or prefect_emit)
        if seen is not None:
            input_drift(params, seen.version, fs.features, fs.feature_names, keys)
        return seen
    except (PodracerError, APIError, requests.RequestException, MlflowException) as err:
        log.warning("the champion's watch did not look: %s", err)
        return None


def shadow_cycle(session: Session) -> CycleResult | None:
    """The shadow's cycle on the latest bar, or None when no version carries ``shadow`` or it
    cannot trade. A shadow that fails logs one warning: the champion's delivery stands."""
    params = session.loop.params
    version = alias_version(params.registry, SHADOW)
    if version is None:
        return None
    try:
        loop = session.shadow()
        return None if loop is None else loop.cycle()
    except (PodracerError, APIError, requests.RequestException) as err:
        why = f"HTTP {err.status_code} {message(err)}" if isinstance(err, APIError) else str(err) or type(err).__name__
        log.warning("shadow version %s did not trade: %s", version, why)
        return None


def deliver(params: Params) -> CycleResult:
    """One delivery cycle in a trading session of its own (one MLflow run)."""
    with trading_session(params, run_name="deliver") as session:
        return cycle(session)
