"""Stage 7, deliver: the champion trades the latest bar on the paper broker.

Loads ``models:/<name>@champion``, describes the account and the latest bar with
:func:`tasks.registry.serving.policy_input` (raw indicators from the same feature code), lets the
pyfunc build the state and size the orders with the training env's own functions, and
submits the orders, sells before buys, to the local paper broker.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import pandas as pd
from prefect import task
from prefect.cache_policies import NO_CACHE

from tasks.config import Params
from tasks.data import features
from tasks.delivery.broker import Fill, Order, PaperBroker
from tasks.errors import DataError, PodracerError
from tasks.registry.register import CHAMPION, champion_version
from tasks.registry.serving import policy_input

log = logging.getLogger("podracer.deliver")
ACCOUNT_FILE = "paper_account.json"


class NoChampion(PodracerError):
    """No model version carries the ``champion`` alias yet."""


@dataclass(frozen=True)
class DeliverResult:
    model_uri: str
    version: str
    bar: str
    fills: list[Fill]
    cash: float
    equity: float


def orders_from(decision: pd.DataFrame) -> list[Order]:
    """Signed ``order_qty`` per symbol → orders, sells first."""
    rows = [(str(s), int(q)) for s, q in zip(decision["symbol"], decision["order_qty"]) if int(q) != 0]
    sells = [Order(s, "sell", -q) for s, q in rows if q < 0]
    buys = [Order(s, "buy", q) for s, q in rows if q > 0]
    return sells + buys


def deliver(params: Params) -> DeliverResult:
    """Trade the latest bar with the champion on the local paper broker."""
    import mlflow

    registry = params.registry
    version = champion_version(registry)
    if version is None:
        raise NoChampion(f"no version of {registry.model_name} has alias '{CHAMPION}' yet "
                         "(the gate refused every version); nothing delivered")
    uri = f"models:/{registry.model_name}@{CHAMPION}"
    model = mlflow.pyfunc.load_model(uri)
    meta = model.unwrap_python_model().meta
    fs = features.load(params.dirs.features)
    if meta.symbols != fs.symbols or meta.feature_names != fs.feature_names:
        raise DataError(f"{uri} (version {version}) trades {len(meta.symbols)} symbols with "
                        f"{meta.feature_names}; data/features has other symbols or indicators")
    last = len(fs.timestamps) - 1
    prices = dict(zip(fs.symbols, fs.prices[last].tolist()))
    broker = PaperBroker(params.dirs.broker / ACCOUNT_FILE, meta.env.initial_cash, meta.env.cost_pct)
    shares = np.array([broker.positions.get(s, 0) for s in fs.symbols], dtype=np.float64)
    frame = policy_input(meta, fs.prices[last], fs.features[last], shares, broker.cash)
    fills = broker.submit(orders_from(model.predict(frame)), prices)
    bar = str(fs.timestamps[last])[:10]
    for f in fills:
        log.info("%s %s %d %s @ %.2f", f.status, f.side, f.qty, f.symbol, f.price)
    return DeliverResult(uri, version, bar, fills, broker.cash, broker.equity(prices))


deliver_task = task(deliver, name="deliver", cache_policy=NO_CACHE)
