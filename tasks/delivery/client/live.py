"""``podracer trade``: the loop that trades every new bar, and the kill switch.

The live loop runs the delivery cycle (:func:`tasks.delivery.client.deliver.cycle`) on the
latest bar once per champion and shadow version, then waits on the market clock: it sleeps
until the next close, and looks for the new bar (a nightly ingest and features) at most
every ``LOOK_SECONDS`` until it is there. SIGTERM or Ctrl-C stop it between cycles; a halt
(``podracer trade --halt`` or the daily loss limit) is obeyed at the start of each cycle.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from datetime import datetime, timezone

from tasks.config import Params
from tasks.data import features
from tasks.delivery.client import deliver
from tasks.delivery.client.loop import CycleResult
from tasks.delivery.client.risk import halt, unhalt
from tasks.delivery.client.session import trading_session
from tasks.registry.gate import SHADOW, alias_version, champion_version

log = logging.getLogger("podracer.trade")
LOOK_SECONDS = 300.0


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
                latest = str(features.load(params.dirs.features).timestamps[-1])[:10]
                state = (latest, champion_version(params.registry), alias_version(params.registry, SHADOW))
                if state not in traded:
                    show(deliver.cycle(session))
                    traded.add(state)
                clock = session.client.get_clock()
                wait = (clock.next_close - datetime.now(timezone.utc)).total_seconds()
                stop.wait(min(max(wait, params.trade.poll_seconds), LOOK_SECONDS))
        except KeyboardInterrupt:
            pass
    log.info("trading loop stopped")
