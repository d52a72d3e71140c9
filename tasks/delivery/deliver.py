"""Stage 7, deliver: one cycle of the trading loop, with the champion, on the configured broker.

The latest bar's orders are submitted to the paper account through alpaca-py: with the
local broker they are ``accepted`` and fill at the next session's open, when that bar
arrives; nothing here is separate code from ``podracer trade`` (:mod:`tasks.delivery.loop`).
"""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from tasks.config import Params
from tasks.delivery.loop import CycleResult
from tasks.delivery.session import trading_session


def deliver(params: Params) -> CycleResult:
    """Trade the latest bar once with the champion (a trading session of one cycle)."""
    with trading_session(params, run_name="deliver") as session:
        return session.loop.cycle()


deliver_task = task(deliver, name="deliver", cache_policy=NO_CACHE)
