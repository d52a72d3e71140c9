"""Stage 7, deliver: one cycle of the trading loop with the champion, and the record of what it delivered.

:func:`cycle` is the one delivery cycle: the champion trades the latest bar and
``data/broker/delivered.json`` records which version traded (the registry poll compares it
with the champion, docs/operations.md). :func:`deliver` runs it in a session of its own
(``podracer deliver``, the pipeline's last stage, the ``deliver`` flow, ``podracer trade
--once``); the live loop (:mod:`tasks.delivery.client.live`) runs it on every new bar. With
the local broker the latest bar's orders are ``accepted`` and fill at the next session's
open, when that bar arrives (docs/delivery.md).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from tasks.config import Params
from tasks.delivery.client.loop import CycleResult
from tasks.delivery.client.session import Session, trading_session
from tasks.storage import write_atomic

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
    """Trade the latest bar once with the champion, and record which version traded."""
    result = session.loop.cycle()
    write_atomic(delivered_file(session.loop.params), json.dumps(
        {"version": result.version, "bar": result.bar, "orders": len(result.orders), "at": time.time()}))
    return result


def deliver(params: Params) -> CycleResult:
    """One delivery cycle in a trading session of its own (one MLflow run)."""
    with trading_session(params, run_name="deliver") as session:
        return cycle(session)


deliver_task = task(deliver, name="deliver", cache_policy=NO_CACHE)
