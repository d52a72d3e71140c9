"""Market-wide risk features: the turbulence index and a volatility-index proxy.

Both are computed from bars strictly before or at t (no look-ahead) and broadcast to every
stock as extra indicator columns, so the env's turbulence gate and the policy see them.
"""

from __future__ import annotations

import math

import numpy as np


def log_returns(close: np.ndarray) -> np.ndarray:
    """``[T, n]`` log returns; the first row is NaN."""
    out = np.full(close.shape, np.nan)
    out[1:] = np.diff(np.log(close), axis=0)
    return out


def turbulence(close: np.ndarray, window: int, refresh: int = 1) -> np.ndarray:
    """Turbulence index ``d_t = (y_t − μ) Σ⁻¹ (y_t − μ)ᵀ`` of each bar's return vector ``y_t``
    (Kritzman & Li 2010, as used by FinRL), ``[T]``.

    μ and Σ are estimated from the ``window`` returns before the bar; with ``refresh`` > 1
    they are re-estimated every ``refresh`` bars from the returns before the block, which
    keeps minute data cheap without looking ahead. The pseudo-inverse handles rank-deficient
    Σ (more stocks than observations). NaN until ``window`` returns exist.
    """
    r = log_returns(close)
    steps = r.shape[0]
    out = np.full(steps, np.nan)
    for block in range(window + 1, steps, refresh):
        hist = r[block - window : block]
        mu = hist.mean(axis=0)
        inv = np.linalg.pinv(np.atleast_2d(np.cov(hist, rowvar=False)))
        dev = r[block : block + refresh] - mu
        out[block : block + refresh] = ((dev @ inv) * dev).sum(axis=1)
    return out


def volatility_proxy(close: np.ndarray, window: int, per_year: float) -> np.ndarray:
    """A VIX-like index: annualised volatility (in percent) of the equal-weight market's log
    returns over the last ``window`` bars, ``[T]``; NaN until ``window`` returns exist."""
    market = np.diff(np.log(close), axis=0).mean(axis=1)
    out = np.full(close.shape[0], np.nan)
    if market.size >= window:
        windows = np.lib.stride_tricks.sliding_window_view(market, window)
        out[window:] = windows.std(axis=1, ddof=1) * math.sqrt(per_year) * 100.0
    return out
