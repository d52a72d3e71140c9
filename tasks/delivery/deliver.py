"""Stage 7, deliver: one cycle of the trading loop, with the champion, on the configured broker.

The latest bar's orders are submitted to the paper account through alpaca-py: with the
local broker they are ``accepted`` and fill at the next session's open, when that bar
arrives; nothing here is separate code from ``podracer trade`` (:mod:`tasks.delivery.loop`).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from tasks.config import Params
from tasks.delivery.loop import CycleResult
from tasks.delivery.session import trading_session
from tasks.storage import write_atomic

DELIVERED = "delivered.json"


def delivered_file(params: Params) -> Path:
    return params.dirs.broker / DELIVERED


def delivered_version(params: Params) -> str | None:
    """The champion version the last delivery traded with (what the registry poll compares)."""
    path = delivered_file(params)
    try:
        return str(json.loads(path.read_text())["version"])
    except (OSError, ValueError, KeyError):
        return None


def record_delivery(params: Params, result: CycleResult) -> None:
    write_atomic(delivered_file(params), json.dumps(
        {"version": result.version, "bar": result.bar, "orders": len(result.orders), "at": time.time()}))


def deliver(params: Params) -> CycleResult:
    """Trade the latest bar once with the champion (a trading session of one cycle), and
    record which version traded (the registry poll compares it with the champion)."""
    with trading_session(params, run_name="deliver") as session:
        result = session.loop.cycle()
    record_delivery(params, result)
    return result


deliver_task = task(deliver, name="deliver", cache_policy=NO_CACHE)
