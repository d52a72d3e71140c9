"""The embedded default market as a source: seeded synthetic OHLCV bars, daily or 1-minute (docs/data.md, sources).

The daily market (factors, GARCH, fat tails, jumps, the ``signal`` drift, NYSE sessions)
is simulated by :mod:`tasks.data.synthetic_daily`. Minute bars (``freq="1min"``,
:mod:`tasks.data.synthetic_intraday`) refine the same daily market: each session's first
minute opens at the daily open and its last minute closes at the daily close, so minute
bars aggregate to the daily bars' open and close exactly and carry the same factors,
drift and signal. 100 stocks × 10 years of minutes (~98M rows) does not fit one frame;
:func:`iter_synthetic_bars` yields it in bounded-memory chunks.

Determinism: the same ``(symbols, start, end, signal, seed, freq)`` gives bit-identical
frames, and the chunks concatenated equal :func:`synthetic_bars`'s one frame.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date
from typing import Literal

import numpy as np
import pandas as pd

from tasks.calendar import nyse_schedule
from tasks.data.synthetic_daily import (
    DRIFT_SCALE,
    JUMP_MEAN,
    JUMP_P,
    JUMP_SD,
    MARKET_MU,
    DailyMarket,
    daily_market,
    kalman_filter,
    minute_count,
)
from tasks.data.synthetic_intraday import minute_chunks
from tasks.errors import ConfigError

Freq = Literal["1d", "1min"]
MAX_FRAME_ROWS = 20_000_000
"""Default cap on one-frame 1min requests (~1.1 GB); bigger ones use :func:`iter_synthetic_bars`."""


def _daily_frame(market: DailyMarket) -> pd.DataFrame:
    """All stocks' daily bars as one frame in the bars contract (ts = session date 00:00 UTC)."""
    steps, n = market.close.shape
    return pd.DataFrame(
        {
            "symbol": np.repeat(market.names, steps),
            "ts": np.tile(market.sessions, n),
            "open": market.open.T.ravel(),
            "high": market.high.T.ravel(),
            "low": market.low.T.ravel(),
            "close": market.close.T.ravel(),
            "volume": market.volume.T.ravel(),
        }
    )


def latent_drift(symbols: int, start: date, end: date, signal: float, seed: int) -> pd.DataFrame:
    """The daily market's true expected log return from its latent drift, ``[sessions, symbols]``
    (session dates as UTC midnights). The benchmark's oracle ranks stocks by it; it is for
    evaluation only and never reaches ingest, features or training."""
    market = daily_market(symbols, start, end, signal, seed)
    return pd.DataFrame(market.drift, index=market.sessions, columns=market.names)


def filtered_drift(symbols: int, start: date, end: date, signal: float, seed: int) -> pd.DataFrame:
    """:func:`latent_drift` as well as each stock's own past returns can tell it: a Kalman
    filter that knows every parameter of the generator and every day's market and sector
    move, but not the drift (:func:`tasks.data.synthetic_daily.kalman_filter`).

    The benchmark ranks stocks by it as a ceiling between momentum and the oracle: no
    agent that sees only prices can rank better, in expectation, with a linear estimate.
    Evaluation only, like the oracle."""
    m = daily_market(symbols, start, end, signal, seed)
    factors = m.beta * m.factor_returns[:, :1] + m.sector_load * m.factor_returns[:, 1 + m.sector]
    log_ret = np.vstack([np.full((1, symbols), np.nan), np.diff(np.log(m.close), axis=0)])
    y = log_ret - MARKET_MU - factors - JUMP_P * JUMP_MEAN
    jump_var = JUMP_P * (JUMP_SD**2 + JUMP_MEAN**2) - (JUMP_P * JUMP_MEAN) ** 2
    a = signal * DRIFT_SCALE * m.idio_vol
    estimate = a * kalman_filter(y, a, m.idio_sd**2 + jump_var)
    return pd.DataFrame(estimate, index=m.sessions, columns=m.names)


def _check_freq(freq: str) -> None:
    if freq not in ("1d", "1min"):
        raise ConfigError(f"synthetic: unknown freq {freq!r} (expected 1d or 1min)")


def iter_synthetic_bars(
    symbols: int, start: date, end: date, signal: float, seed: int, freq: Freq = "1min", martingale: bool = False
) -> Iterator[pd.DataFrame]:
    """Yield the market in chunks, in (symbol, ts) order: the scale path (docs/data.md, sources).

    ``1min``: one frame per (symbol, calendar year), ~98k rows, so 100 stocks × 10 years
    streams with memory bounded by one chunk plus the small daily market. ``1d``: one
    frame per symbol. Each chunk follows the bars contract (docs/data.md, contracts); concatenated they
    equal :func:`synthetic_bars` with the same arguments, bit for bit. ``martingale``: the
    daily null market of :func:`tasks.data.synthetic_daily.daily_market` (``1d`` only).
    """
    _check_freq(freq)
    if martingale and freq != "1d":
        raise ConfigError("synthetic: the martingale market is daily only (freq 1d)")
    market = daily_market(symbols, start, end, signal, seed, martingale)
    if freq == "1min":
        yield from minute_chunks(market, seed)
        return
    frame = _daily_frame(market)
    steps = len(market.schedule)
    for i in range(symbols):
        yield frame.iloc[i * steps : (i + 1) * steps].reset_index(drop=True)


def synthetic_bars(
    symbols: int,
    start: date,
    end: date,
    signal: float,
    seed: int,
    freq: Freq = "1d",
    max_rows: int = MAX_FRAME_ROWS,
    martingale: bool = False,
) -> pd.DataFrame:
    """Bars for ``symbols`` stocks as one frame in the bars contract (docs/data.md, contracts), fully seeded.

    ``1d``: ts is the session date at 00:00 UTC. ``1min``: ts is each minute bar's start
    in UTC, 390 bars a normal session and 210 a half day; requests over ``max_rows`` rows
    raise :class:`ConfigError` — stream those with :func:`iter_synthetic_bars` instead.
    """
    _check_freq(freq)
    if freq == "1d":
        return _daily_frame(daily_market(symbols, start, end, signal, seed, martingale))
    rows = symbols * minute_count(nyse_schedule(start, end))
    if rows > max_rows:
        raise ConfigError(
            f"synthetic: {rows:,} minute bars exceed one frame's limit of {max_rows:,}; "
            "stream them with iter_synthetic_bars"
        )
    return _stack(iter_synthetic_bars(symbols, start, end, signal, seed, freq, martingale), rows)


def _stack(chunks: Iterator[pd.DataFrame], rows: int) -> pd.DataFrame:
    """Concatenate ``rows`` rows of chunks into one frame, equal to ``pd.concat`` but about a
    third of its peak memory: values go straight into the frame's final float block."""
    numeric = ["open", "high", "low", "close", "volume"]
    block = np.empty((len(numeric), rows))  # the frame keeps this [columns, rows] block as is
    symbol = np.empty(rows, dtype=object)
    ts = np.empty(rows, dtype=np.int64)  # ns since the epoch, UTC
    at = 0
    for chunk in chunks:  # plain column access only: no accessor objects that keep chunks alive
        end = at + len(chunk)
        block[:, at:end] = chunk[numeric].to_numpy().T
        symbol[at:end] = chunk["symbol"].to_numpy()
        ts[at:end] = chunk["ts"].array.asi8
        at = end
    if at != rows:
        raise AssertionError(f"synthetic: expected {rows} minute bars, generated {at}")
    frame = pd.DataFrame(block.T, columns=numeric, copy=False)
    frame.insert(0, "ts", pd.DatetimeIndex(ts.view("datetime64[ns]")).tz_localize("UTC"))
    frame.insert(0, "symbol", symbol)
    return frame
