"""A paper broker on a small hand-priced market, served on 127.0.0.1 for alpaca-py to drive.

Three symbols over the first six sessions of July 2023 (the 3rd is a half day, the 4th a
holiday). Every price is chosen by hand so that fills, costs and cash can be checked
against numbers worked out on paper. The same sessions as minute bars (:func:`write_minutes`)
follow a rule simple enough to price by hand: the k-th minute of the file opens at
``10 + k / 100`` (AAA) and ``20 + k / 100`` (BBB) and closes half a cent higher.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import requests
from alpaca.trading.client import TradingClient

from tasks.calendar import nyse_schedule
from tasks.data.bars import write_parquet
from tasks.delivery.broker.accounts import Exchange
from tasks.delivery.broker.paper import ClockMode, PaperBroker
from tasks.delivery.broker.service import BrokerServer
from tasks.delivery.keys import Keys

SESSIONS = ["2023-06-30", "2023-07-03", "2023-07-05", "2023-07-06", "2023-07-07", "2023-07-10"]
SYMBOLS = ["AAA", "BBB", "CCC"]
# (open, high, low, close) per session and symbol
PRICES = {
    "AAA": [(10.0, 10.5, 9.5, 10.0), (11.0, 11.5, 10.5, 11.2), (12.0, 12.6, 11.0, 12.4), (11.0, 11.4, 10.2, 10.8),
            (10.0, 10.4, 9.4, 9.8), (9.5, 10.1, 9.1, 10.0)],
    "BBB": [(20.0, 20.5, 19.5, 20.0), (21.0, 21.3, 20.2, 20.8), (19.0, 19.5, 18.1, 18.6), (18.0, 18.9, 17.6, 18.4),
            (18.5, 19.4, 18.2, 19.0), (19.5, 20.0, 19.1, 19.8)],
    "CCC": [(50.0, 51.0, 49.0, 50.0), (52.0, 53.0, 51.5, 52.5), (51.0, 52.0, 50.5, 51.0), (50.0, 50.5, 48.0, 49.0),
            (49.5, 50.2, 49.0, 50.0), (50.5, 51.0, 50.0, 50.8)],
}
KEYS = Keys("PKTESTBROKERKEY00001", "test-secret-0123456789abcdefghijklmnopqr")
CASH, COST = 10_000.0, 0.01


def write_bars(path: Path, sessions: list[str] = SESSIONS, symbols: list[str] = SYMBOLS) -> None:
    rows = [{"symbol": s, "ts": pd.Timestamp(day, tz="UTC"), "open": o, "high": h, "low": lo, "close": c,
             "volume": 1e5} for s in symbols for day, (o, h, lo, c) in zip(SESSIONS, PRICES[s]) if day in sessions]
    write_parquet(pd.DataFrame(rows), path, "1d")


def minutes(sessions: list[str] = SESSIONS[:3]) -> pd.DatetimeIndex:
    """Every trading minute's start (UTC) of ``sessions``, half days included."""
    days = nyse_schedule(pd.Timestamp(sessions[0]).date(), pd.Timestamp(sessions[-1]).date())
    return pd.DatetimeIndex([m for day, row in days.iterrows() if day.strftime("%Y-%m-%d") in sessions
                             for m in pd.date_range(row["open"], row["close"], freq="1min", inclusive="left")])


def minute_open(symbol: str, ts: str) -> float:
    """The open of ``symbol``'s minute bar starting at ``ts`` (UTC) in :func:`write_minutes`."""
    return MINUTE_BASE[symbol] + int(minutes().get_loc(pd.Timestamp(ts, tz="UTC"))) / 100


MINUTE_BASE = {"AAA": 10.0, "BBB": 20.0}


def write_minutes(path: Path, sessions: list[str] = SESSIONS[:3]) -> None:
    """Minute bars of AAA and BBB over ``sessions`` (06-30, the 07-03 half day, 07-05 by default)."""
    stamps = minutes(sessions)
    first = int(minutes().get_loc(stamps[0]))
    rows = [{"symbol": s, "ts": ts, "open": base + (first + k) / 100, "high": base + (first + k) / 100 + 0.02,
             "low": base + (first + k) / 100 - 0.02, "close": base + (first + k) / 100 + 0.005, "volume": 1e3}
            for s, base in MINUTE_BASE.items() for k, ts in enumerate(stamps)]
    write_parquet(pd.DataFrame(rows), path, "1min")


@dataclass
class Market:
    broker: PaperBroker
    client: TradingClient
    url: str
    bars: Path

    def advance(self, to: str = "next") -> requests.Response:
        return requests.post(f"{self.url}/podracer/v1/clock/advance", params={"to": to}, timeout=30,
                             headers=KEYS.headers())

    def raw(self, method: str, path: str, **kwargs: object) -> requests.Response:
        """A request with the keys, outside the SDK (for status codes and bodies)."""
        headers = {**KEYS.headers(), **kwargs.pop("headers", {})}  # type: ignore[dict-item]
        return requests.request(method, f"{self.url}{path}", headers=headers, timeout=30, **kwargs)  # type: ignore[arg-type]


@contextmanager
def market(root: Path, start: str = "2023-06-30", mode: ClockMode = "simulated", cash: float = CASH,
           db: Path | None = None, minute: bool = False) -> Iterator[Market]:
    """A fresh account of ``cash`` whose clock stands at the close of the bar ``start`` (a date,
    or with ``minute`` the UTC start of a minute bar of :func:`write_minutes`)."""
    bars = root / "bars.parquet"
    if not bars.exists():
        (write_minutes if minute else write_bars)(bars)
    when = pd.Timestamp(start, tz="UTC").to_pydatetime() if minute else pd.Timestamp(start).date()
    broker = PaperBroker.open(db or root / "broker.db", bars, initial_cash=cash, cost_pct=COST, mode=mode,
                              start=when)
    with BrokerServer(Exchange(broker, KEYS)) as server:
        yield Market(broker, TradingClient(KEYS.key_id, KEYS.secret, url_override=server.url), server.url, bars)
