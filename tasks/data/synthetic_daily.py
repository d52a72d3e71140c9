"""The embedded default market's daily bars (docs/data.md, sources), the base every frequency is built from.

Daily log returns follow a factor model (one market factor, three sector factors and an
idiosyncratic part), each with GARCH(1,1) volatility clustering and Student-t shocks,
plus Poisson jumps, on the NYSE session calendar (XNYS, half days included). Each day's
move splits into an overnight gap (prior close to open) and an intraday move.

The ``signal`` knob adds learnable structure: each stock has a persistent latent drift
(an AR(1) with φ = 0.97) whose expected daily log return is ``signal × 0.1 × σ_idio``
per unit of drift. It shows up in trailing returns, so momentum indicators carry
information. At ``signal = 0`` no stock has a learnable drift, which makes it the bench for
leakage tests; it is not a null for Sharpe comparisons (docs/data.md, the martingale market): betas and
idiosyncratic volatilities differ and GARCH volatility clusters, so static tilts and
volatility timing have true Sharpes of their own.

``martingale=True`` (``data.martingale``, at ``signal = 0``) is that null: every price is a
martingale, so every strategy that trades on the past has true expected P&L 0 (below,
:func:`daily_market`).

This is the lowest of the three synthetic modules: :mod:`tasks.data.synthetic_intraday`
refines this market into minute bars, and :mod:`tasks.data.synthetic` (the source) turns
either into frames in the bars contract. Neither is imported here.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

import numpy as np
import pandas as pd

from tasks.calendar import nyse_schedule
from tasks.errors import ConfigError

SECTORS = 3
DRIFT_PERSISTENCE = 0.97
DRIFT_SCALE = 0.1
"""A unit of latent drift moves the expected daily log return by ``signal × 0.1 × σ_idio``."""
MARKET_MU = 0.07 / 252
JUMP_P, JUMP_MEAN, JUMP_SD = 0.004, -0.01, 0.06
"""Daily jump probability per stock, and the jump's mean and sd (log return)."""
GAP_NOISE = 0.2
"""The overnight gap's own noise, in units of the stock's long-run idiosyncratic sd."""
MARTINGALE_CLIP = 10.0
"""``martingale``: the unit-variance t shocks are clipped at ±10 sd (5e-5 of the draws), because a
Student-t has no exponential moment: unclipped, E[exp(shock)] is infinite and no drift can
make the price a martingale. Clipped, it is finite and computed exactly (:func:`clipped_t_log_mgf`)."""


@dataclass(frozen=True)
class DailyMarket:
    """The daily market every frequency is built from: ``[steps, n]`` arrays unless noted.

    Besides the daily OHLCV it keeps what minute bars need to stay consistent with it:
    the factor loadings, each factor's conditional (GARCH) daily sd and the jumps.
    """

    names: list[str]
    schedule: pd.DataFrame  # one row per session (UTC midnight index): open, close (UTC)
    open: np.ndarray
    high: np.ndarray
    low: np.ndarray
    close: np.ndarray
    volume: np.ndarray
    jumps: np.ndarray
    beta: np.ndarray  # [n] market loading
    sector: np.ndarray  # [n] sector of each stock
    sector_load: np.ndarray  # [n]
    market_sd: np.ndarray  # [steps]
    sector_sd: np.ndarray  # [steps, SECTORS]
    idio_sd: np.ndarray  # [steps, n]
    drift: np.ndarray  # [steps, n] expected daily log return from the latent drift (evaluation only)
    factor_returns: np.ndarray  # [steps, 1 + SECTORS] the market's and the sectors' daily shocks
    idio_vol: np.ndarray  # [n] each stock's long-run idiosyncratic daily sd
    idio: np.ndarray  # [steps, n] the idiosyncratic daily shocks (GARCH sd × t draw)
    gap_noise: np.ndarray  # [steps, n] the overnight gap's own Gaussian noise
    log_mean: np.ndarray  # [steps, n] the close-to-close log return less its shocks and jumps (known at t-1)

    @property
    def sessions(self) -> pd.DatetimeIndex:
        return pd.DatetimeIndex(self.schedule.index)


def symbol_names(n: int) -> list[str]:
    """Tickers of the synthetic stocks: ``SYN000``, ``SYN001``, … (they sort in index order)."""
    return [f"SYN{i:03d}" for i in range(n)]


def minute_count(schedule: pd.DataFrame) -> int:
    """Number of 1-minute bars per stock in ``schedule`` (sum of session lengths)."""
    return int(((schedule["close"] - schedule["open"]) // pd.Timedelta(minutes=1)).sum())


def _garch_shocks(
    rng: np.random.Generator, steps: int, width: int, daily_vol: np.ndarray, dof: float = 5.0,
    clip: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``[steps, width]`` Student-t shocks with GARCH(1,1) variance around ``daily_vol²``, and their sd.

    ``clip``: the unit-variance draws are clipped at ±clip (``martingale``; :data:`MARTINGALE_CLIP`).
    """
    alpha, beta = 0.08, 0.90
    omega = daily_vol**2 * (1.0 - alpha - beta)
    z = rng.standard_t(dof, size=(steps, width)) / np.sqrt(dof / (dof - 2.0))
    if clip is not None:
        z = np.clip(z, -clip, clip)
    var = daily_vol**2
    out = np.empty((steps, width))
    sd = np.empty((steps, width))
    for t in range(steps):
        sd[t] = np.sqrt(var)
        out[t] = sd[t] * z[t]
        var = omega + alpha * out[t] ** 2 + beta * var
    return out, sd


def _latent_drift(rng: np.random.Generator, steps: int, n: int) -> np.ndarray:
    """``[steps, n]`` unit-variance AR(1) drift with persistence φ (the ``signal`` carrier)."""
    drift = np.empty((steps, n))
    level = rng.standard_normal(n)
    shock_sd = np.sqrt(1.0 - DRIFT_PERSISTENCE**2)
    for t in range(steps):
        drift[t] = level
        level = DRIFT_PERSISTENCE * level + shock_sd * rng.standard_normal(n)
    return drift


def kalman_filter(y: np.ndarray, a: np.ndarray, noise_var: np.ndarray, phi: float = DRIFT_PERSISTENCE) -> np.ndarray:
    """``[steps, n]`` posterior mean of each stock's unit-variance AR(1) latent ``x`` given
    ``y[:t+1]``, for ``y_t = a · x_t + e_t`` with ``var(e_t) = noise_var[t]`` (a Kalman
    filter, one scalar state per stock; a NaN row of ``y`` is a step with no observation).

    The best linear estimate of the drift from a stock's own past returns: the benchmark's
    ceiling on what any price-based ranking can know (``tasks.data.synthetic.filtered_drift``).
    """
    steps, n = y.shape
    mean, var = np.zeros(n), np.ones(n)  # the stationary prior
    out = np.empty((steps, n))
    for t in range(steps):
        if t:
            mean, var = phi * mean, phi**2 * var + (1.0 - phi**2)
        if np.isfinite(y[t]).all():
            gain = var * a / (a**2 * var + noise_var[t])
            mean, var = mean + gain * (y[t] - a * mean), (1.0 - gain * a) * var
        out[t] = mean
    return out


def clipped_t_log_mgf(a: np.ndarray, clip: float = MARTINGALE_CLIP, dof: float = 5.0) -> np.ndarray:
    """``log E[exp(a·Z)]`` for ``Z`` a unit-variance Student-t (``dof``) clipped at ``±clip``.

    Exact up to float rounding: Z is bounded, so ``E[exp(aZ)] = Σ_k m_2k a^2k / (2k)!`` with
    its even moments ``m_2k`` (odd ones vanish: Z is symmetric), summed until every term is
    below 1e-17 of the sum. Each moment is the t density's integral over ``[0, clip]``
    (Gauss–Legendre, 256 nodes: the density is analytic there, so the rule is exact to
    rounding) plus the clipped mass ``P(|Z| > clip)`` at ``±clip``.
    """
    from scipy.stats import t as student

    scale = np.sqrt(dof / (dof - 2.0))  # Z = T / scale
    nodes, weights = np.polynomial.legendre.leggauss(256)
    z, w = 0.5 * clip * (nodes + 1.0), 0.5 * clip * weights
    density = 2.0 * scale * student.pdf(z * scale, dof) * w  # |Z| on [0, clip], both sides
    tail = 2.0 * student.sf(clip * scale, dof)
    a2 = np.asarray(a, dtype=np.float64) ** 2
    total, power, k = np.zeros_like(a2), np.ones_like(a2), 0
    while True:
        k += 1
        power = power * a2 / ((2 * k - 1) * (2 * k))  # a^2k / (2k)!
        term = power * (density @ z ** (2 * k) + tail * clip ** (2 * k))
        total += term
        if not (term > 1e-17 * (1.0 + total)).any():
            return np.log1p(total)


def jump_log_mgf() -> float:
    """``log E[exp(J)]`` for a day's jump: 0 with probability 1 − p, else N(μ_J, σ_J²)."""
    return float(np.log1p(JUMP_P * np.expm1(JUMP_MEAN + 0.5 * JUMP_SD**2)))


def daily_market(
    symbols: int, start: date, end: date, signal: float, seed: int, martingale: bool = False
) -> DailyMarket:
    """Simulate the daily market (docs/data.md, sources): factors, GARCH, fat tails, jumps, drift, gaps.

    The random draws happen in one fixed order from one generator, so the daily bars are
    a pure function of the arguments; minute bars are derived from this, never re-drawn.

    ``martingale`` (``data.martingale``; ``signal`` must be 0): every price is a martingale
    in the order prices are seen, close, next open, next close::

        E[open_t / close_{t-1} | F_{t-1}] = 1,   E[close_t / open_t | F_{t-1}, open_t] = 1,

    where ``F_{t-1}`` is everything the generator knew at close t−1 (the GARCH variances of
    day t included). There is no MARKET_MU and no drift. The day's move splits into a gap,
    ``g_t = J_t + ε_t + c_gap`` (the jump and the gap noise ε ~ N(0, (0.2 σ_idio)²)), and an
    intraday move ``x_t = β M_t + s S_t + I_t + c_t`` (market, sector and idiosyncratic GARCH
    shocks, their t draws clipped at :data:`MARTINGALE_CLIP`). Each leg's mean is minus its
    shocks' log moment generating function, known at t−1 because the shocks are independent
    given it: ``c_gap = −log E[e^J] − ½(0.2 σ_idio)²`` and
    ``c_t = −K(β σ_M,t) − K(s σ_S,t) − K(σ_I,t)``, K the clipped t's :func:`clipped_t_log_mgf`.
    The gap is independent of the intraday shocks, so the open predicts nothing about the
    close. (Unlike the default market, whose gap is 0.3 of the day's move and so predicts
    the rest of it.)

    Then any strategy's position, chosen from what was seen before each fill, earns P&L that
    is a martingale: true mean 0 before costs and ≤ 0 after. A Sharpe difference against
    buy-and-hold then has true value 0 before costs and ≤ 0 after: a composite null, where a
    test's size is measured (docs/operations.md, the gate). ``martingale=False`` leaves the default
    market bit for bit as it was.
    """
    if martingale and signal != 0:
        raise ConfigError(f"synthetic: a martingale market has no drift, so signal must be 0 (got {signal})")
    rng = np.random.default_rng(seed)
    schedule = nyse_schedule(start, end)
    steps, n = len(schedule), symbols
    if steps == 0:
        raise ConfigError(f"synthetic: no NYSE sessions between {start} and {end}")

    clip = MARTINGALE_CLIP if martingale else None
    beta = rng.uniform(0.6, 1.4, n)
    sector = np.arange(n) % SECTORS
    sector_load = rng.uniform(0.3, 0.8, n)
    idio_vol = rng.uniform(0.010, 0.022, n)
    market, market_sd = _garch_shocks(rng, steps, 1, np.array([0.010]), clip=clip)
    sectors, sector_sd = _garch_shocks(rng, steps, SECTORS, np.full(SECTORS, 0.006), clip=clip)
    idio, idio_sd = _garch_shocks(rng, steps, n, idio_vol, clip=clip)
    jumps = (rng.random((steps, n)) < JUMP_P) * rng.normal(JUMP_MEAN, JUMP_SD, (steps, n))
    drift = _latent_drift(rng, steps, n)

    expected_drift = signal * DRIFT_SCALE * idio_vol * drift
    gap_noise = GAP_NOISE * idio_vol * rng.standard_normal((steps, n))
    if martingale:
        gap_mean = -jump_log_mgf() - 0.5 * (GAP_NOISE * idio_vol) ** 2
        intraday_mean = -(clipped_t_log_mgf(beta * market_sd) + clipped_t_log_mgf(sector_load * sector_sd[:, sector])
                          + clipped_t_log_mgf(idio_sd))
        overnight = gap_mean + jumps + gap_noise
        log_ret = overnight + intraday_mean + beta * market + sector_load * sectors[:, sector] + idio
        log_mean = gap_mean + intraday_mean
    else:
        log_ret = MARKET_MU + beta * market + sector_load * sectors[:, sector] + idio + jumps + expected_drift
        # Split each day's move into an overnight gap and an intraday move.
        overnight = 0.3 * log_ret + gap_noise
        log_mean = MARKET_MU + expected_drift
    close = rng.lognormal(np.log(60.0), 0.7, n) * np.exp(np.cumsum(log_ret, axis=0))
    prev_close = np.vstack([close[0] / np.exp(log_ret[0]), close[:-1]])
    open_ = prev_close * np.exp(overnight)  # the intraday move takes open to close
    wick = np.abs(rng.normal(0.0, 0.4, (2, steps, n))) * idio_vol
    high = np.maximum(open_, close) * np.exp(wick[0])
    low = np.minimum(open_, close) * np.exp(-wick[1])
    base_volume = rng.lognormal(np.log(2e6), 1.0, n)
    volume = np.round(base_volume * np.exp(8.0 * np.abs(log_ret) + 0.3 * rng.standard_normal((steps, n))))

    return DailyMarket(
        names=symbol_names(n), schedule=schedule, open=open_, high=high, low=low, close=close,
        volume=volume.astype(np.float64), jumps=jumps, beta=beta, sector=sector, sector_load=sector_load,
        market_sd=market_sd[:, 0], sector_sd=sector_sd, idio_sd=idio_sd, drift=expected_drift,
        factor_returns=np.hstack([market, sectors]), idio_vol=idio_vol, idio=idio, gap_noise=gap_noise,
        log_mean=log_mean,
    )
