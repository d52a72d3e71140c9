"""A trading session: the broker client, its journal and an MLflow run, for the loop's cycles.

``trade.broker: local`` talks to the paper broker at ``trade.url``, else to a
``podracer broker`` answering on ``broker.port``, else to one started in this process
over ``data/broker/broker.db`` for the session (:mod:`tasks.delivery.client.local`).
``trade.broker: alpaca`` talks to Alpaca's paper API with the keys from the environment.
Either way the client is alpaca-py's ``TradingClient`` and the journal is the client's own
``data/broker/journal.db``: one code path (docs/delivery.md).

A session holds a second loop for the shadow, on an account of its own (docs/delivery.md,
Shadow accounts): the local broker's shadow keys, or on Alpaca a second key pair
(``APCA_SHADOW_API_KEY_ID`` / ``APCA_SHADOW_API_SECRET_KEY``, or ``alpaca-keys-shadow.json``).
It is built the first time a shadow trades; without Alpaca shadow keys the shadow does not
trade, and one warning says so.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import date
from functools import cache
from typing import Any
from urllib.parse import urlsplit

import requests
from alpaca.common.exceptions import APIError
from alpaca.trading.client import TradingClient

from tasks.config import Params
from tasks.delivery.client.journal import JOURNAL, Journal
from tasks.delivery.client.local import local_broker
from tasks.delivery.client.loop import CycleResult, TradingLoop, message
from tasks.delivery.keys import CHAMPION, KEY_VARS, SHADOW, Keys, key_vars, load_keys, local_keys, role_path
from tasks.errors import ConfigError, PodracerError
from tasks.registry.store import connect

log = logging.getLogger("podracer.trade")
ALPACA_KEY_FILE = "alpaca-keys.json"
LOOPBACK = ("127.0.0.1", "localhost", "::1")


class BrokerFailure(PodracerError):
    """The broker refused a request the loop cannot go on without, or could not be reached."""


@dataclass(frozen=True)
class Session:
    loop: TradingLoop
    """The champion's loop, on the champion's account (``client``)."""
    client: TradingClient
    url: str
    keys: Keys
    shadow: Callable[[], TradingLoop | None] = lambda: None
    """The shadow's loop on the shadow's account (built on the first call), or None where the
    shadow cannot trade (Alpaca without a second key pair)."""


def cycle_metrics(result: CycleResult) -> dict[str, float]:
    """The cycle's metrics; a shadow's carry its role as a prefix (``shadow_equity``, ...)."""
    filled = sum(1 for o in result.orders if o.get("status") == "filled")
    prefix = "" if result.role == CHAMPION else f"{result.role}_"
    metrics = {"equity": result.equity, "cash": result.cash, "orders": len(result.orders),
               "orders_filled": filled, "orders_blocked": len(result.blocked),
               "model_version": float(result.version), "halted": float(result.halted is not None)}
    return {prefix + name: float(value) for name, value in metrics.items()}


def log_cycle(result: CycleResult, step: int) -> None:
    """The cycle as metrics of the active MLflow run (one run per trading session), at once."""
    import mlflow

    if mlflow.active_run() is None:
        return
    mlflow.log_metrics(cycle_metrics(result), step=step)


class BatchedMetrics:
    """The cycles' metrics held and written to the active MLflow run in batches, for a replay:
    it trades a bar in milliseconds, hundreds a session on minute bars, and one write per bar
    would take most of its time. :meth:`flush` writes what is held (call it before the run ends)."""

    BATCH = 1000
    """Metrics per write: MLflow's ``log_batch`` limit."""

    def __init__(self) -> None:
        self.held: list[Any] = []

    def __call__(self, result: CycleResult, step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.held += [Metric(key, value, now, step) for key, value in cycle_metrics(result).items()]
        if len(self.held) >= self.BATCH:
            self.flush()

    def flush(self) -> None:
        import mlflow

        run = mlflow.active_run()
        if run is not None:
            for at in range(0, len(self.held), self.BATCH):
                mlflow.MlflowClient().log_batch(run.info.run_id, metrics=self.held[at : at + self.BATCH])
        self.held = []


def trading_client(keys: Keys, url: str | None) -> TradingClient:
    """alpaca-py's client for ``keys`` at ``url`` (None: Alpaca's paper API). A broker on this
    machine is reached directly: the client skips the environment's proxy settings, which
    requests otherwise looks up on every call (a minute-bar replay makes over ten thousand)."""
    client = TradingClient(keys.key_id, keys.secret, paper=True, url_override=url)
    if url is not None and urlsplit(url).hostname in LOOPBACK:
        client._session.trust_env = False  # alpaca-py 0.44 builds its requests.Session itself
    return client


@contextmanager
def trading_session(params: Params, run_name: str | None = None, url: str | None = None,
                    log_to_mlflow: bool = True) -> Iterator[Session]:
    """The loop on the configured broker, inside an MLflow run of the ``trade.experiment``."""
    with ExitStack() as stack:
        if params.trade.broker == "alpaca":
            keys = load_keys(params.dirs.broker / ALPACA_KEY_FILE)
            url = url or params.trade.url
            where = url or "Alpaca paper"
        else:
            keys = local_keys(params)
            url = where = stack.enter_context(local_broker(
                params, url or params.trade.url or f"http://127.0.0.1:{params.broker.port}"))
        client = trading_client(keys, url)
        if log_to_mlflow:
            stack.enter_context(mlflow_run(params, run_name or f"trade {params.trade.broker} {date.today()}", where))
        try:
            journal = Journal.of(client, params.dirs.broker / JOURNAL)
            loop = TradingLoop(params, client, journal, log_cycle)

            @cache
            def shadow() -> TradingLoop | None:
                return shadow_loop(params, url, loop)

            yield Session(loop, client, where, keys, shadow)
        except APIError as err:
            hint = f" (check {' / '.join(KEY_VARS)})" if err.status_code in (401, 403) and \
                params.trade.broker == "alpaca" else ""
            raise BrokerFailure(f"broker {where}: HTTP {err.status_code} {message(err)}{hint}") from None
        except requests.RequestException as err:
            raise BrokerFailure(f"broker {where}: unreachable ({type(err).__name__})") from None


def shadow_loop(params: Params, url: str | None, champion: TradingLoop) -> TradingLoop | None:
    """The shadow's loop on its own account at ``url``; None, with one warning, where it has no
    keys (Alpaca) or its keys reach the champion's account."""
    try:
        if params.trade.broker == "alpaca":
            keys = load_keys(role_path(params.dirs.broker / ALPACA_KEY_FILE, SHADOW), names=key_vars(SHADOW))
        else:
            keys = local_keys(params, SHADOW)
    except ConfigError as err:
        log.warning("the shadow does not trade on %s: it needs a second key pair (%s)", params.trade.broker, err)
        return None
    client = trading_client(keys, url)
    journal = Journal.of(client, params.dirs.broker / JOURNAL)
    if journal.account == champion.journal.account:
        log.warning("the shadow does not trade: its keys reach the champion's account %s; give it a key pair "
                    "of its own", journal.account)
        return None
    return TradingLoop(params, client, journal, log_cycle, alias=SHADOW)


@contextmanager
def mlflow_run(params: Params, name: str, where: str) -> Iterator[Any]:
    """An MLflow run of ``trade.experiment`` (created on first use) holding a session's params."""
    import mlflow

    connect(params.registry)
    experiment = mlflow.get_experiment_by_name(params.trade.experiment)
    experiment_id = experiment.experiment_id if experiment else mlflow.create_experiment(
        params.trade.experiment, artifact_location=params.registry.artifact_root.resolve().as_uri())
    with mlflow.start_run(experiment_id=experiment_id, run_name=name) as run:
        risk = params.trade.risk
        mlflow.log_params({"broker": params.trade.broker, "broker_url": where,
                           "model": params.registry.model_name, "risk.max_order_notional": risk.max_order_notional,
                           "risk.max_position_weight": risk.max_position_weight,
                           "risk.daily_loss_limit": risk.daily_loss_limit})
        yield run
