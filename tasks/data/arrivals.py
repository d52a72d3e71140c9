"""New bars arriving: extend the embedded market by new bars, as a real data arrival.

Continuous training needs data that grows. ``podracer simulate --bars N`` calls
:func:`simulate`, which generates the next ``N`` bars of the synthetic market after the
last ingested bar (:func:`future_bars`) and merges them into ``data/raw/``
(:func:`append_bars`) exactly as a fetched arrival would land. At ``data.freq: 1d`` the
bars are the next ``N`` NYSE sessions; at ``1min`` the next ``N`` NYSE minutes (half days
included), crossing into the next sessions when the last one ends, refined from a daily
market by :mod:`tasks.data.synthetic_intraday` as ingest's minute bars are:

* **Deterministic:** the future is a pure function of ``data.seed`` and the last stored
  bar (plus the market's shape), so the same state always grows the same way.
* **Continuous:** each symbol's new path is rescaled to start from its last real close, so
  the first new bar's move is one generated return (a day's, or a minute's, or the
  overnight gap after a session's last minute), not a jump to another level.
* **Recorded:** the manifest gets the new file digests, row count and an ``appended``
  entry, so a later ``ingest`` with the same spec reuses the files without reporting a
  hand edit, while the data version (a hash of the files) changes and triggers retraining.

:func:`emit_arrival` announces the arrival as the Prefect event ``podracer.data.arrived``
that the CT deployment's trigger listens for (docs/operations.md). Should the cycle it
starts crash or fail, or the event be lost, the runner's data poll announces the same bars
again (:func:`unprocessed`, :func:`polled_arrival`) until a cycle has finished on them.
"""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import asdict, dataclass
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tasks.caching import data_version
from tasks.calendar import calendar_index, nyse_sessions
from tasks.config import Params
from tasks.data.bars import COLUMNS, PRICE_COLUMNS, read_parquet, to_contract, write_parquet
from tasks.data.ingest import _load_manifest, _write_manifest
from tasks.data.synthetic_daily import daily_market, symbol_names
from tasks.data.synthetic_intraday import minute_chunks
from tasks.errors import ConfigError, DataError, MissingInput
from tasks.storage import file_digest

log = logging.getLogger("podracer.arrivals")
ARRIVED = "podracer.data.arrived"
"""The Prefect event name of a data arrival (the CT deployment's trigger expects it)."""


@dataclass(frozen=True)
class Arrival:
    """What one arrival added to ``data/raw/``: rows, sessions, their range and versions.

    ``first`` and ``last`` are dates for daily bars, ISO times (UTC) for minute bars."""

    bars: int
    sessions: int
    first: str
    last: str
    data_version: str
    previous_version: str


def _stored(raw: Path) -> dict[str, tuple[pd.DataFrame, str | None]]:
    """Every raw file's bars and recorded frequency, by symbol (the file's stem)."""
    files = sorted(raw.glob("*.parquet"))
    if not files:
        raise MissingInput(f"{raw}: no raw bars (run `podracer ingest` first)")
    return {f.stem: read_parquet(f) for f in files}


def _when(ts: pd.Timestamp) -> str:
    """A bar's time as the manifest and messages write it: the date of a daily bar (00:00
    UTC), the ISO time of an intraday one."""
    return str(ts.date()) if ts == ts.normalize() else ts.isoformat()


def _last_session(stored: dict[str, tuple[pd.DataFrame, str | None]]) -> pd.Timestamp:
    """The last ts every symbol shares; a symbol that ends elsewhere is a DataError."""
    lasts = {s: frame["ts"].max() for s, (frame, _) in stored.items()}
    first_symbol = next(iter(lasts))
    for symbol, last in lasts.items():
        if pd.isna(last):
            raise DataError(f"data/raw: {symbol} has no bars")
        if last != lasts[first_symbol]:
            raise DataError(f"data/raw: {symbol} ends on {_when(last)} but {first_symbol} on "
                            f"{_when(lasts[first_symbol])}; an arrival needs one common last bar")
    return pd.Timestamp(lasts[first_symbol])


def _future_seed(seed: int, last: date | pd.Timestamp) -> int:
    """A seed for the bars after ``last``: a hash of (data.seed, last date or minute), so the
    same stored state always grows the same future, and each step of growth draws fresh shocks."""
    digest = hashlib.sha256(f"podracer.arrival:{seed}:{last.isoformat()}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def _next_sessions(after: date, count: int) -> pd.DatetimeIndex:
    """The first ``count`` NYSE sessions strictly after ``after`` (UTC midnights)."""
    span = 2 * count + 10  # calendar days; doubled until it holds enough sessions
    while len(sessions := nyse_sessions(after + timedelta(days=1), after + timedelta(days=span))) < count:
        span *= 2
    return sessions[:count]


def _next_minutes(after: pd.Timestamp, count: int) -> pd.DatetimeIndex:
    """The first ``count`` NYSE minute-bar starts strictly after ``after`` (UTC), half days included."""
    span = count // 200 + 10  # calendar days; doubled until they hold enough minutes
    while len(later := (m := calendar_index("1min", after, after + pd.Timedelta(days=span)))[m > after]) < count:
        span *= 2
    return later[:count]


def _stored_market(params: Params) -> tuple[dict[str, tuple[pd.DataFrame, str | None]], list[str], pd.Timestamp]:
    """The stored bars, the synthetic market's symbol names and their common last bar, checked
    against the config: the embedded market, its symbols, its frequency."""
    data = params.data
    if data.source != "synthetic":
        raise ConfigError(f"simulate works on the embedded market (data.source synthetic), not source {data.source}")
    stored = _stored(params.dirs.raw)
    names = symbol_names(data.symbols)
    if sorted(stored) != names:
        odd = min(set(stored) ^ set(names))
        raise DataError(f"data/raw: symbol {odd} does not match the synthetic market's {data.symbols} symbols "
                        "(run `podracer ingest` again)")
    held = {freq for _, freq in stored.values() if freq is not None}
    if held - {data.freq}:
        raise DataError(f"data/raw: holds {min(held)} bars but data.freq is {data.freq} (run `podracer ingest` again)")
    return stored, names, _last_session(stored)


def _continued(frame: pd.DataFrame, last_close: np.ndarray, anchor: np.ndarray) -> pd.DataFrame:
    """``frame``'s generated OHLC (symbol-major, one block per symbol) multiplied by each
    symbol's ``last_close / anchor``: the generated path continues from the real last close."""
    scale = np.repeat(last_close / anchor, len(frame) // len(last_close))
    prices = {c: frame[c].to_numpy() * scale for c in PRICE_COLUMNS}
    prices["high"] = np.maximum(prices["high"], np.maximum(prices["open"], prices["close"]))
    prices["low"] = np.minimum(prices["low"], np.minimum(prices["open"], prices["close"]))
    return to_contract(frame.assign(**prices), "simulate")


def future_minutes(params: Params, count: int) -> pd.DataFrame:
    """The next ``count`` NYSE minutes of the synthetic minute market, in the bars contract.

    A daily market is generated from the last stored bar's session to the last new one, with
    a seed derived from ``(data.seed, last minute)``, and refined to minutes as ingest refines
    the embedded market (:func:`tasks.data.synthetic_intraday.minute_chunks`). Each symbol's
    generated OHLC is multiplied by ``last_close / generated close at the last stored
    minute``, so the path continues from the real last close; the minutes up to and
    including that one are then dropped. Volumes are kept as generated.
    """
    data = params.data
    stored, names, last = _stored_market(params)
    new = _next_minutes(last, count)
    seed = _future_seed(data.seed, last)
    market = daily_market(data.symbols, last.date(), new[-1].date(), data.signal, seed, data.martingale)
    generated = pd.concat(list(minute_chunks(market, seed)), ignore_index=True)
    per_symbol = len(generated) // data.symbols
    ts = pd.DatetimeIndex(generated["ts"].iloc[:per_symbol])
    if last not in ts:
        raise DataError(f"data/raw: last bar {_when(last)} is not an NYSE minute")
    at = ts.get_loc(last)
    if not ts[at + 1 : at + 1 + count].equals(new):
        raise DataError(f"data/raw: the minutes after {_when(last)} do not follow the NYSE calendar")
    rows = (np.arange(data.symbols)[:, None] * per_symbol + np.arange(at + 1, at + 1 + count)).ravel()
    anchor = generated["close"].to_numpy()[np.arange(data.symbols) * per_symbol + at]
    last_close = np.array([stored[s][0]["close"].iloc[-1] for s in names])
    return _continued(generated.iloc[rows].reset_index(drop=True), last_close, anchor)


def future_bars(params: Params, count: int) -> pd.DataFrame:
    """The next ``count`` bars of the synthetic market at ``data.freq``, in the bars contract.

    Daily: a fresh market is generated from the last stored session (the leading session)
    to the last new one, with a seed derived from ``(data.seed, last date)``. Each symbol's
    generated OHLC is multiplied by ``last_close / generated close of the leading session``,
    so the path continues from the real last close; the leading session is then dropped.
    Volumes are kept as generated. Minutes: :func:`future_minutes`.
    """
    if params.data.freq == "1min":
        return future_minutes(params, count)
    data = params.data
    stored, names, last_ts = _stored_market(params)
    last = last_ts.date()
    new = _next_sessions(last, count)
    market = daily_market(data.symbols, last, new[-1].date(), data.signal, _future_seed(data.seed, last),
                          data.martingale)
    if not market.sessions[1:].equals(new):  # the leading session is ``last`` itself
        raise DataError(f"data/raw: last bar {last} is not an NYSE session")
    frame = pd.DataFrame({
        "symbol": np.repeat(names, count),
        "ts": np.tile(new, data.symbols),
        **{c: getattr(market, c)[1:].T.ravel() for c in PRICE_COLUMNS},
        "volume": market.volume[1:].T.ravel(),
    })
    return _continued(frame, np.array([stored[s][0]["close"].iloc[-1] for s in names]), market.close[0])


def append_bars(params: Params, bars: pd.DataFrame) -> Arrival:
    """Merge an arrival into ``data/raw/`` and record it; return what arrived and the versions.

    Every stored symbol must receive the same new bars, all after its last stored bar
    (an overlap, an unknown symbol or a ragged arrival is a DataError and writes nothing).
    The new files are written under temporary names first, then renamed together, and the
    manifest (digests, rows, an ``appended`` entry) is written last, as ingest does.
    """
    raw = params.dirs.raw
    stored = _stored(raw)
    bars = to_contract(bars, "arrival")
    if bars.empty:
        raise DataError("arrival: no bars")
    if bars.duplicated(["symbol", "ts"]).any():
        row = bars[bars.duplicated(["symbol", "ts"])].iloc[0]
        raise DataError(f"arrival: {row['symbol']} has two bars at {_when(row['ts'])}")
    groups = {str(s): g.reset_index(drop=True) for s, g in bars.groupby("symbol", sort=True)}
    for symbol, group in groups.items():
        if symbol not in stored:
            raise DataError(f"arrival for {symbol}: no such symbol in {raw}")
        last = stored[symbol][0]["ts"].max()
        if (group["ts"] <= last).any():
            at = group["ts"].min()
            raise DataError(f"arrival for {symbol} at {_when(at)} overlaps the stored bars (last {_when(last)})")
    new_ts = pd.Series(sorted(bars["ts"].unique()), name="ts")  # every bar time any symbol gets
    for symbol in stored:
        if symbol not in groups or not groups[symbol]["ts"].equals(new_ts):
            raise DataError(f"arrival: {symbol} does not get the same new bars as the other symbols")

    previous = data_version(sorted(raw.glob("*.parquet")))
    temps = {symbol: raw / f".{symbol}.parquet.arrival" for symbol in groups}
    try:
        for symbol, temp in temps.items():
            frame, freq = stored[symbol]
            merged = pd.concat([frame[list(COLUMNS)], groups[symbol]], ignore_index=True)
            write_parquet(merged, temp, freq or params.data.freq)
        for symbol, temp in temps.items():
            os.replace(temp, raw / f"{symbol}.parquet")
    finally:
        for temp in temps.values():
            temp.unlink(missing_ok=True)

    files = sorted(raw.glob("*.parquet"))
    version = data_version(files)
    first, last_new = _when(new_ts.iloc[0]), _when(new_ts.iloc[-1])
    sessions = new_ts.dt.normalize().nunique()
    manifest = _load_manifest(raw)
    manifest["rows"] = int(manifest.get("rows", sum(len(f) for f, _ in stored.values()))) + len(bars)
    manifest["files"] = {f.name: file_digest(f) for f in files}
    manifest["appended"] = [*manifest.get("appended", []),
                            {"first": first, "last": last_new, "bars": len(bars), "data_version": version}]
    _write_manifest(raw, manifest)
    log.info("appended %d bars (%d times, %d sessions, %s..%s) to %s: data version %s -> %s",
             len(bars), len(new_ts), sessions, first, last_new, raw, previous, version)
    return Arrival(len(bars), sessions, first, last_new, version, previous)


def simulate(params: Params, bars: int, turn: bool = False) -> Arrival:
    """Extend the embedded market by ``bars`` new bars a symbol (NYSE sessions at ``1d``,
    NYSE minutes at ``1min``) as a real data arrival; ``turn`` plants a regime change in them
    (:func:`turned`)."""
    if bars < 1:
        raise ConfigError(f"simulate: --bars must be at least 1 (got {bars})")
    new = future_bars(params, bars)
    if turn:
        stored, names, _ = _stored_market(params)
        closes = np.stack([stored[s][0]["close"].to_numpy()[-TURN_LOOKBACK:] for s in names], axis=1)
        new = turned(new, closes)
    return append_bars(params, new)


TURN_HALFLIFE = 40
TURN_LOOKBACK = 3 * TURN_HALFLIFE + 1
"""Bars of each symbol's stored closes its trend is read from (``ewm_40``'s window)."""


def turned(frame: pd.DataFrame, closes: np.ndarray) -> pd.DataFrame:
    """The arrival ``frame`` (symbol-major, as :func:`future_bars` makes it) with each symbol's
    trend turned over: its OHLC on the j-th new bar multiplied by ``exp(−m (j + 1))``, where
    ``m`` is its trailing ``ewm_40`` trend (mean log return a bar) over ``closes`` ``[T, n]``.
    A stock that was rising falls at the rate it rose, and the other way round, so a momentum
    policy loses against buy-and-hold: the planted regime change the live watch must find
    (docs/operations.md, the watch). Each ``simulate --turn`` reads the trends again, so a run
    of them is a market whose trends revert."""
    from tasks.data.momentum import ewm_return

    trend = ewm_return(closes, TURN_HALFLIFE)[-1]
    if not np.all(np.isfinite(trend)):
        raise DataError(f"simulate --turn needs {TURN_LOOKBACK} stored bars a symbol to read its trend")
    per_symbol = len(frame) // len(trend)
    factor = np.exp(-np.repeat(trend, per_symbol) * np.tile(np.arange(1, per_symbol + 1), len(trend)))
    return frame.assign(**{c: frame[c].to_numpy() * factor for c in PRICE_COLUMNS})


def _dataset(params: Params) -> dict[str, str]:
    source = params.data.source
    return {"prefect.resource.id": f"podracer.dataset.{source}",
            "prefect.resource.name": f"{source} bars in {params.dirs.raw}"}


def arrival_event(params: Params, arrival: Arrival) -> dict[str, Any]:
    """Keyword arguments of ``prefect.events.emit_event`` announcing ``arrival``."""
    return {"event": ARRIVED, "resource": _dataset(params),
            "payload": {**asdict(arrival), "source": params.data.source}}


def unprocessed(current: str, processed: str | None) -> tuple[str, str] | None:
    """``(current, processed)`` while ``data/raw/`` holds bars no continuous-training cycle
    has finished on: ``current`` is its data version, ``processed`` the one the last cycle
    finished on (before any cycle, the champion's). None once they agree, and None when
    nothing was ever processed: the first champion comes from ``podracer run``, not from a poll."""
    if processed is None or current == processed:
        return None
    return current, processed


def polled_arrival(params: Params, data_version: str, processed: str | None) -> dict[str, Any]:
    """The :data:`ARRIVED` event the runner's poll emits again for bars no cycle has finished
    on (the cycle crashed or failed, or the first event was lost)."""
    return {"event": ARRIVED, "resource": _dataset(params),
            "payload": {"data_version": data_version, "previous_version": processed, "source": params.data.source,
                        "via": "poll"}}


def emit_arrival(params: Params, arrival: Arrival) -> bool:
    """Emit the arrival event when a Prefect server is configured (``PREFECT_API_URL``), and
    wait until it is sent (a process that exits with it still queued makes Prefect warn
    "Still processing items"). Without a server there is no trigger to reach, so nothing is
    sent; returns whether it emitted.
    """
    if not os.environ.get("PREFECT_API_URL"):
        return False
    from prefect.events import emit_event  # lazy: prefect's client is heavy to import
    from prefect.events.worker import EventsWorker

    if emit_event(**arrival_event(params, arrival)) is not None:  # queued for the events worker's thread
        EventsWorker.instance().wait_until_empty()
    return True
