"""The embedded default market: seeded synthetic daily OHLCV bars (DESIGN §5).

Log returns follow a factor model (one market factor, three sector factors and an
idiosyncratic part), each with GARCH(1,1) volatility clustering and Student-t shocks,
plus Poisson jumps, on the NYSE session calendar.

The ``signal`` knob adds learnable structure: each stock has a persistent latent drift
(an AR(1) with φ = 0.97) whose expected daily log return is ``signal × 0.1 × σ_idio``
per unit of drift. It shows up in trailing returns, so momentum indicators carry
information. At ``signal = 0`` the market is null: nothing beats buy-and-hold after costs
except luck, which makes it the bench for leakage tests.
"""

from __future__ import annotations

from datetime import date

import numpy as np
import pandas as pd

SECTORS = 3
DRIFT_PERSISTENCE = 0.97


def nyse_sessions(start: date, end: date) -> pd.DatetimeIndex:
    """NYSE trading days between ``start`` and ``end`` inclusive, as UTC midnights."""
    import exchange_calendars as xcals

    sessions = xcals.get_calendar("XNYS", start=pd.Timestamp(start), end=pd.Timestamp(end)).sessions
    days = sessions[(sessions >= pd.Timestamp(start)) & (sessions <= pd.Timestamp(end))]
    return pd.DatetimeIndex(days).tz_localize("UTC") if days.tz is None else days.tz_convert("UTC")


def _garch_shocks(
    rng: np.random.Generator, steps: int, width: int, daily_vol: np.ndarray, dof: float = 5.0
) -> np.ndarray:
    """``[steps, width]`` Student-t shocks with GARCH(1,1) variance around ``daily_vol²``."""
    alpha, beta = 0.08, 0.90
    omega = daily_vol**2 * (1.0 - alpha - beta)
    z = rng.standard_t(dof, size=(steps, width)) / np.sqrt(dof / (dof - 2.0))
    var = daily_vol**2
    out = np.empty((steps, width))
    for t in range(steps):
        out[t] = np.sqrt(var) * z[t]
        var = omega + alpha * out[t] ** 2 + beta * var
    return out


def synthetic_bars(symbols: int, start: date, end: date, signal: float, seed: int) -> pd.DataFrame:
    """Daily bars for ``symbols`` stocks in the bars contract (DESIGN §2), fully seeded."""
    rng = np.random.default_rng(seed)
    ts = nyse_sessions(start, end)
    steps, n = len(ts), symbols
    names = [f"SYN{i:03d}" for i in range(n)]

    beta = rng.uniform(0.6, 1.4, n)
    sector = np.arange(n) % SECTORS
    sector_load = rng.uniform(0.3, 0.8, n)
    idio_vol = rng.uniform(0.010, 0.022, n)
    market = _garch_shocks(rng, steps, 1, np.array([0.010]))[:, 0]
    sectors = _garch_shocks(rng, steps, SECTORS, np.full(SECTORS, 0.006))
    idio = _garch_shocks(rng, steps, n, idio_vol)
    jumps = (rng.random((steps, n)) < 0.004) * rng.normal(-0.01, 0.06, (steps, n))

    drift = np.empty((steps, n))
    level = rng.standard_normal(n)
    shock_sd = np.sqrt(1.0 - DRIFT_PERSISTENCE**2)
    for t in range(steps):
        drift[t] = level
        level = DRIFT_PERSISTENCE * level + shock_sd * rng.standard_normal(n)

    log_ret = (
        0.07 / 252
        + beta * market[:, None]
        + sector_load * sectors[:, sector]
        + idio
        + jumps
        + signal * 0.1 * idio_vol * drift
    )
    # Split each day's move into an overnight gap and an intraday move.
    overnight = 0.3 * log_ret + 0.2 * idio_vol * rng.standard_normal((steps, n))
    close = rng.lognormal(np.log(60.0), 0.7, n) * np.exp(np.cumsum(log_ret, axis=0))
    prev_close = np.vstack([close[0] / np.exp(log_ret[0]), close[:-1]])
    open_ = prev_close * np.exp(overnight)  # the intraday move takes open to close
    wick = np.abs(rng.normal(0.0, 0.4, (2, steps, n))) * idio_vol
    high = np.maximum(open_, close) * np.exp(wick[0])
    low = np.minimum(open_, close) * np.exp(-wick[1])
    base_volume = rng.lognormal(np.log(2e6), 1.0, n)
    volume = np.round(
        base_volume * np.exp(8.0 * np.abs(log_ret) + 0.3 * rng.standard_normal((steps, n)))
    )

    frame = pd.DataFrame(
        {
            "symbol": np.repeat(names, steps),
            "ts": np.tile(ts, n),
            "open": open_.T.ravel(),
            "high": high.T.ravel(),
            "low": low.T.ravel(),
            "close": close.T.ravel(),
            "volume": volume.T.ravel().astype(np.float64),
        }
    )
    return frame
