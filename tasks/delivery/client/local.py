"""The trading client's one door to the local broker that is not HTTP: starting one.

Everything else the client asks a broker goes through alpaca-py's ``TradingClient``
(docs/delivery.md). A local broker is either already serving (``podracer broker``,
``podracer up``) or is started here, in a thread of this process, through the broker's
public entry point :func:`tasks.delivery.broker.service.start`; this is the only module of
the client that imports the broker package (``tests/tasks/test_layout.py`` holds it to that).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date, datetime
from pathlib import Path
from typing import Literal

from tasks.config import Params
from tasks.delivery.broker.service import start
from tasks.delivery.keys import local_keys
from tasks.health import answers

log = logging.getLogger("podracer.trade")


@contextmanager
def local_broker(params: Params, url: str | None = None, *, ledger: Path | None = None,
                 clock: Literal["simulated", "wall"] | None = None, day: date | datetime | None = None,
                 initial_cash: float | None = None, cost_pct: float | None = None) -> Iterator[str]:
    """The URL of a local paper broker for the ``with`` block: the one at ``url`` if it answers
    with the account's keys, else one started in this process over ``ledger`` (default
    ``data/broker/broker.db``) and stopped when the block ends.

    A new ledger's account stands at the close of the bar ``day`` (a session's date or a minute
    bar's start; default the latest bar) with
    ``initial_cash`` and ``cost_pct`` (default the config's ``env``); ``clock`` defaults to
    ``broker.clock``.
    """
    if url is not None and answers(f"{url}/v2/clock", local_keys(params).headers(), timeout=10.0):
        yield url
        return
    with start(params, ledger, clock, day, initial_cash, cost_pct) as started:
        if url is not None:
            log.info("no paper broker at %s: started one for this session at %s", url, started)
        yield started
