"""1-minute bars for the embedded market, refined from its daily bars (docs/data.md, sources).

Each session becomes a ``[days, minutes]`` grid built from the real NYSE open and close
(390 minutes, 210 on a half day). Within a day, a stock's log price is a Brownian bridge
from the daily open to the daily close:

* increments load on an intraday market factor and sector factor (shared by all stocks,
  so minute returns are correlated) plus an idiosyncratic part, each Student-t, scaled by
  that day's GARCH sd and by a U-shaped intraday volatility profile;
* the intraday share of the day's jump lands in one random minute;
* the bridge then pins the last close to the daily close, so minute bars aggregate to the
  daily open and close exactly, and the overnight gap is the daily open's gap.

Volume splits the daily volume over the minutes with a U-shaped profile, more volume in
bigger moves and lognormal noise. Random numbers come from generators seeded by
``(seed, stream, year)`` for the factors and ``(seed, stream, stock, year)`` per chunk, so
any chunk can be generated alone and the result never depends on how it is consumed.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tasks.data.synthetic_daily import DailyMarket

INTRADAY_SHARE = 0.7
"""Share of the daily sd that is realised between open and close (the rest is the gap)."""
WICK = 0.5
"""Scale of a minute's high/low beyond its open/close, in minute sds."""
DOF = 5.0
FACTOR_STREAM, STOCK_STREAM = 1, 2
MINUTE_NS = 60 * 10**9


def volatility_profile(u: np.ndarray) -> np.ndarray:
    """Relative minute volatility at session fraction ``u`` ∈ (0, 1): high at the open, up at the close."""
    u = np.clip(u, 0.0, 1.0)
    return 0.8 + 0.8 * (2.0 * u - 1.0) ** 2 + 2.0 * np.exp(-u / 0.03)


def volume_profile(u: np.ndarray) -> np.ndarray:
    """Relative minute volume at session fraction ``u``: the U with its peaks at open and close."""
    u = np.clip(u, 0.0, 1.0)
    return 0.6 + 1.2 * (2.0 * u - 1.0) ** 2 + 1.5 * np.exp(-u / 0.03) + 2.0 * np.exp(-(1.0 - u) / 0.02)


@dataclass(frozen=True)
class SessionGrid:
    """One calendar year's sessions as a ``[days, minutes]`` grid, padded past each close.

    ``vol_weight`` is each minute's share of the day's sd (Σ² = 1 per day, 0 on padding),
    ``clock`` its running Σ² (the bridge's time, 1 from the last minute on).
    """

    year: int
    rows: np.ndarray  # positions of these sessions in the daily market
    lengths: np.ndarray  # minutes per session
    mask: np.ndarray  # True on real minutes
    vol_weight: np.ndarray
    clock: np.ndarray
    volume_weight: np.ndarray
    ts: pd.DatetimeIndex  # minute starts (UTC) of the real minutes, row-major

    @property
    def shape(self) -> tuple[int, ...]:
        return self.mask.shape


def session_grid(schedule: pd.DataFrame, rows: np.ndarray, year: int) -> SessionGrid:
    """Grid for the sessions at ``rows`` of ``schedule`` (columns ``open``, ``close`` in UTC)."""
    part = schedule.iloc[rows]
    opens = part["open"].to_numpy(dtype="datetime64[ns]").view(np.int64)
    lengths = ((part["close"] - part["open"]) // pd.Timedelta(minutes=1)).to_numpy(dtype=np.int64)
    minute = np.arange(int(lengths.max()))
    mask = minute[None, :] < lengths[:, None]
    u = (minute[None, :] + 0.5) / lengths[:, None]
    vol = np.where(mask, volatility_profile(u), 0.0)
    vol_weight = vol / np.sqrt((vol**2).sum(axis=1, keepdims=True))
    starts = (opens[:, None] + minute[None, :] * MINUTE_NS)[mask]
    return SessionGrid(
        year=year, rows=rows, lengths=lengths, mask=mask, vol_weight=vol_weight,
        clock=np.cumsum(vol_weight**2, axis=1), volume_weight=np.where(mask, volume_profile(u), 0.0),
        ts=pd.DatetimeIndex(starts.view("datetime64[ns]")).tz_localize("UTC"),
    )


def _unit_t(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Student-t draws scaled to unit variance (fat-tailed minute shocks)."""
    return rng.standard_t(DOF, size=shape) / np.sqrt(DOF / (DOF - 2.0))


def _factor_shocks(seed: int, grid: SessionGrid, sectors: int) -> np.ndarray:
    """``[1 + sectors, days, minutes]`` unit shocks of the intraday market and sector factors."""
    rng = np.random.default_rng([seed, FACTOR_STREAM, grid.year])
    return _unit_t(rng, (1 + sectors, *grid.shape))


def _stock_shocks(
    market: DailyMarket, i: int, grid: SessionGrid, factors: np.ndarray, z: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Stock ``i``'s unit-variance shock mixing factors and ``z`` (``[days, minutes]``), and its daily sd."""
    d = grid.rows
    market_sd = market.beta[i] * market.market_sd[d, None]
    sector_sd = market.sector_load[i] * market.sector_sd[d, market.sector[i], None]
    idio_sd = market.idio_sd[d, i, None]
    total = np.sqrt(market_sd**2 + sector_sd**2 + idio_sd**2)
    shock = (market_sd * factors[0] + sector_sd * factors[1 + market.sector[i]] + idio_sd * z) / total
    return shock, total


def _log_path(
    market: DailyMarket, i: int, grid: SessionGrid, shock: np.ndarray, total: np.ndarray, jump_at: np.ndarray
) -> np.ndarray:
    """Log price relative to the daily open after each minute: a bridge ending at log(close/open)."""
    d, days = grid.rows, np.arange(len(grid.rows))
    steps = INTRADAY_SHARE * total * grid.vol_weight * shock
    steps[days, jump_at] += INTRADAY_SHARE * market.jumps[d, i]
    path = np.cumsum(steps, axis=1)
    target = np.log(market.close[d, i] / market.open[d, i])
    path += grid.clock * (target - path[:, -1])[:, None]
    return path


def _symbol_year(market: DailyMarket, i: int, grid: SessionGrid, factors: np.ndarray, seed: int) -> pd.DataFrame:
    """Minute bars of stock ``i`` over ``grid``'s sessions, in the bars contract."""
    rng = np.random.default_rng([seed, STOCK_STREAM, i, grid.year])
    d, days = grid.rows, np.arange(len(grid.rows))
    shock, total = _stock_shocks(market, i, grid, factors, _unit_t(rng, grid.shape))
    jump_at = (rng.random(len(d)) * grid.lengths).astype(np.int64)
    day_open = market.open[d, i, None]
    close = day_open * np.exp(_log_path(market, i, grid, shock, total, jump_at))
    close[days, grid.lengths - 1] = market.close[d, i]  # exact daily close despite rounding
    open_ = np.concatenate([day_open, close[:, :-1]], axis=1)
    wick = np.abs(rng.standard_normal((2, *grid.shape))) * (WICK * INTRADAY_SHARE * total * grid.vol_weight)
    high = np.maximum(open_, close) * np.exp(wick[0])
    low = np.minimum(open_, close) * np.exp(-wick[1])
    weight = grid.volume_weight * np.exp(0.3 * rng.standard_normal(grid.shape) + 0.25 * np.abs(shock))
    volume = np.round(market.volume[d, i, None] * weight / weight.sum(axis=1, keepdims=True))

    mask = grid.mask
    symbol = np.empty(len(grid.ts), dtype=object)
    symbol.fill(market.names[i])  # one shared str, not one per row (np.full would copy it)
    return pd.DataFrame(
        {
            "symbol": symbol,
            "ts": grid.ts,
            "open": open_[mask],
            "high": high[mask],
            "low": low[mask],
            "close": close[mask],
            "volume": volume[mask],
        }
    )


def year_grids(schedule: pd.DataFrame) -> list[SessionGrid]:
    """One :class:`SessionGrid` per calendar year of ``schedule``, in order."""
    years = pd.DatetimeIndex(schedule.index).year.to_numpy()
    return [session_grid(schedule, np.flatnonzero(years == y), int(y)) for y in np.unique(years)]


def minute_chunks(market: DailyMarket, seed: int) -> Iterator[pd.DataFrame]:
    """Yield ``market``'s minute bars, one frame per (stock, year), sorted by symbol then ts.

    The per-year grids and factor shocks (a few MB a year) are built once and shared by
    all stocks; everything else lives only as long as its chunk.
    """
    grids = year_grids(market.schedule)
    sectors = market.sector_sd.shape[1]
    factors = [_factor_shocks(seed, grid, sectors) for grid in grids]
    for i in range(len(market.names)):
        for grid, shocks in zip(grids, factors):
            yield _symbol_year(market, i, grid, shocks, seed)
