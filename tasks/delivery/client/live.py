"""``podracer trade``: the loop that trades every new bar, and the kill switch.

The live loop runs the delivery cycle (:func:`tasks.delivery.client.deliver.cycle`) on the
latest bar once per champion and shadow version, then waits on the market clock until the
next bar is due, and looks for it (a nightly ingest and features) at most every
``LOOK_SECONDS`` until it is there. A daily bar is due at the next close; a minute bar a
minute after the latest one closed while the market is open, else a minute after the next
open. So on minute bars it runs one cycle per new minute bar, and the env's schedule
(``env.decide_every``) decides which of them are decisions (:meth:`TradingLoop._due`).
SIGTERM or Ctrl-C stop it between cycles; a halt (``podracer trade --halt`` or the daily
loss limit) is obeyed at the start of each cycle.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

from tasks.config import Params
from tasks.data import feature_set
from tasks.delivery.client import deliver
from tasks.delivery.client.bar_keys import bar_close, bar_key
from tasks.delivery.client.loop import CycleResult
from tasks.delivery.client.risk import halt, unhalt
from tasks.delivery.client.session import trading_session
from tasks.registry.aliases import SHADOW, alias_version, champion_version

log = logging.getLogger("podracer.trade")
LOOK_SECONDS = 300.0
MINUTE = timedelta(minutes=1)


def switch(params: Params, stop: bool) -> str:
    """Set the kill switch (and cancel the open orders of the champion's account and, while a
    shadow trades, of the shadow's), or clear it and every account's halt."""
    folder = params.dirs.broker
    if not stop:
        return "[green]✓ trade[/] trading resumed" if unhalt(folder) else "[green]✓ trade[/] trading was not halted"
    path = halt(folder, "halted by hand (podracer trade --halt)")
    with trading_session(params, log_to_mlflow=False) as session:
        canceled = session.client.cancel_orders()
        shadow = session.shadow() if alias_version(params.registry, SHADOW) is not None else None
        if shadow is not None:
            canceled += shadow.client.cancel_orders()
    return f"[yellow]✓ trade[/] halted ({path}); {len(canceled)} open order(s) canceled"


def forever(params: Params, show: Callable[[CycleResult], None], stop: threading.Event | None = None) -> None:
    """Trade every new bar until ``stop`` is set (SIGTERM and Ctrl-C set it)."""
    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with trading_session(params, run_name=f"trade {params.trade.broker} live") as session:
        traded: set[tuple[str, str | None, str | None]] = set()
        try:
            while not stop.is_set():
                latest = bar_key(feature_set.load(params.dirs.features).timestamps[-1], params.data.freq)
                state = (latest, champion_version(params.registry), alias_version(params.registry, SHADOW))
                if state not in traded:
                    show(deliver.cycle(session))
                    traded.add(state)
                wait = (due(session.client.get_clock(), latest, params.data.freq) - datetime.now(timezone.utc))
                stop.wait(min(max(wait.total_seconds(), params.trade.poll_seconds), LOOK_SECONDS))
        except KeyboardInterrupt:
            pass
    log.info("trading loop stopped")


def due(clock: Any, latest: str, freq: str) -> datetime:
    """When the bar after ``latest`` is due, by the broker's ``clock`` (alpaca-py's ``Clock``): the
    next close for daily bars; for minute bars the close of the minute after ``latest`` while the
    market is open, else the close of the next session's first minute."""
    closes = bar_close(latest, freq)
    if closes is None:
        return clock.next_close  # type: ignore[no-any-return]
    return (closes.to_pydatetime() if clock.is_open else clock.next_open) + MINUTE
