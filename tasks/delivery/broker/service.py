"""The local paper broker's process: ``podracer broker`` in the foreground, or :func:`start` in a thread.

This module is the broker's public entry point; every other module of the package is
reached over HTTP. The foreground service binds ``broker.host`` on ``broker.port``; a
trading client that finds no broker answering (the pipeline's deliver stage, ``podracer
trade``) and a replay start the same app in a thread of their own process, on a free
port, against a ledger of their choosing (docs/delivery.md). Both serve two accounts
(:mod:`tasks.delivery.broker.accounts`): the champion's, over that ledger, and the shadow's,
over ``<ledger>-shadow.db`` beside it (opened on its first request), each with its keys from
:func:`tasks.delivery.keys.local_keys`.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date, datetime
from pathlib import Path
from types import TracebackType

import uvicorn

from tasks.config import Params
from tasks.data.bars import VALIDATED
from tasks.delivery.broker.accounts import Exchange
from tasks.delivery.broker.api import create_app
from tasks.delivery.broker.paper import ClockMode, PaperBroker
from tasks.delivery.keys import SHADOW, key_file, local_keys, role_path
from tasks.errors import PodracerError

log = logging.getLogger("podracer.broker")
LEDGER = "broker.db"


def open_exchange(params: Params, db: Path | None = None, clock: ClockMode | None = None,
                  day: date | datetime | None = None, initial_cash: float | None = None,
                  cost_pct: float | None = None) -> Exchange:
    """The champion's paper account in ``db`` (default ``data/broker/broker.db``) on the validated
    bars (minute bars: the last ``broker.feed_sessions`` sessions), and the shadow's in
    ``<db>-shadow.db`` on the same market and clock.

    A new champion account's clock stands at the close of the bar ``day`` (a session's date or a
    minute bar's start; default the latest bar);
    a new shadow account starts where the champion's clock stands. Both get ``initial_cash``
    and ``cost_pct`` (default the config's ``env``; a replay passes the champion's own, so that
    it trades the env it was trained in).
    """
    db = db or params.dirs.broker / LEDGER
    bars = params.dirs.validated / VALIDATED
    cash = params.env.initial_cash if initial_cash is None else initial_cash
    cost = params.env.cost_pct if cost_pct is None else cost_pct
    main = PaperBroker.open(db, bars, initial_cash=cash, cost_pct=cost, mode=clock or params.broker.clock, start=day,
                            sessions=params.broker.feed_sessions)

    def shadow(like: PaperBroker) -> PaperBroker:
        return PaperBroker.open(role_path(db, SHADOW), bars, initial_cash=cash, cost_pct=cost, mode=like.mode,
                                like=like)

    try:
        return Exchange(main, local_keys(params), {SHADOW: (local_keys(params, SHADOW), shadow)})
    except PodracerError:
        main.ledger.close()
        raise


class BrokerServer:
    """The broker app served by uvicorn in a background thread, on 127.0.0.1 (``port`` 0: a free one)."""

    def __init__(self, exchange: Exchange, port: int = 0, host: str = "127.0.0.1") -> None:
        self.exchange = exchange
        # log_config=None: uvicorn must not run logging.dictConfig, which closes every handler of
        # the process it is embedded in (the CLI's console, Prefect's API log handler: inside a flow
        # run that flush deadlocks against Prefect's event-loop thread).
        config = uvicorn.Config(create_app(exchange), host=host, port=port, log_level="warning",
                                log_config=None, access_log=False, lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="paper-broker", daemon=True)
        self.url = ""

    def __enter__(self) -> BrokerServer:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise PodracerError("broker: the HTTP server did not start (is the port taken?)")
            time.sleep(0.01)
        host, port = self.server.servers[0].sockets[0].getsockname()[:2]
        self.url = f"http://{host}:{port}"
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.exchange.close()


@contextmanager
def start(params: Params, db: Path | None = None, clock: ClockMode | None = None, day: date | datetime | None = None,
          initial_cash: float | None = None, cost_pct: float | None = None) -> Iterator[str]:
    """The paper accounts of :func:`open_exchange` served in a thread of this process, on a free
    port of 127.0.0.1, for the ``with`` block; yields its URL. Their keys are :func:`local_keys`."""
    with BrokerServer(open_exchange(params, db, clock, day, initial_cash, cost_pct)) as server:
        yield server.url


def serve(params: Params, port: int | None = None, clock: ClockMode | None = None,
          db: Path | None = None, stop: threading.Event | None = None) -> None:
    """Serve the paper accounts in the foreground until SIGTERM, Ctrl-C or ``stop`` (``podracer broker``).

    It logs the real URL once the port is bound (``--port 0`` picks a free one).
    """
    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        for number in (signal.SIGTERM, signal.SIGINT):
            signal.signal(number, lambda *_: stop.set())
    exchange = open_exchange(params, db, clock)
    with BrokerServer(exchange, params.broker.port if port is None else port, params.broker.host) as server:
        main = exchange.main
        log.info("paper broker on %s (%s clock, ledger %s, keys in %s; the shadow account: %s, %s)", server.url,
                 main.mode, main.ledger.path, key_file(params), role_path(main.ledger.path, SHADOW),
                 key_file(params, SHADOW))
        while not stop.wait(0.5):
            if not server.thread.is_alive():
                raise PodracerError(f"broker: the HTTP server on {server.url} stopped")
    log.info("paper broker stopped")
