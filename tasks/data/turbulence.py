"""Market-wide risk features: the turbulence index and a volatility-index proxy.

Both are computed from bars strictly before or at t (no look-ahead) and broadcast to every
stock as extra indicator columns, so the env's turbulence gate and the policy see them.
Both read ``close`` in chunks of rows, so ``close`` may be an array or anything that slices
rows into one (the features stage's on-disk panel, ``tasks/data/panel_store.py``), and both
can start at bar ``first``: appending bars computes only theirs, from a tail of history.
"""

from __future__ import annotations

import math
from typing import Protocol

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

CHUNK = 1 << 16
"""Rows read at a time."""


class Rows(Protocol):
    """A ``[T, n]`` panel that slices rows into an array (``close[a:b]``)."""

    def __len__(self) -> int: ...

    def __getitem__(self, rows: slice) -> np.ndarray: ...


def log_returns(close: np.ndarray) -> np.ndarray:
    """``[T, n]`` log returns; the first row is NaN."""
    out = np.full(close.shape, np.nan)
    out[1:] = np.diff(np.log(close), axis=0)
    return out


def turbulence(close: np.ndarray | Rows, window: int, refresh: int = 1, first: int = 0) -> np.ndarray:
    """Turbulence index ``d_t = (y_t − μ) Σ⁻¹ (y_t − μ)ᵀ`` of each bar's return vector ``y_t``
    (Kritzman & Li 2010, as used by FinRL), for bars ``first..T−1`` (``[T − first]``).

    μ and Σ are estimated from the ``window`` returns before the bar; with ``refresh`` > 1
    they are re-estimated every ``refresh`` bars from the returns before the block (blocks
    start at bar ``window + 1``), which keeps minute data cheap without looking ahead. The
    pseudo-inverse handles rank-deficient Σ (more stocks than observations). NaN until
    ``window`` returns exist. A block cut short by the end of the history is padded to
    ``refresh`` rows for the product with Σ⁻¹: BLAS rounds a row differently with the
    matrix's height, and padding keeps a bar's value the same when later bars arrive.
    """
    steps = len(close)
    out = np.full(steps - first, np.nan)
    start = window + 1
    if first > start:
        start += (first - start) // refresh * refresh  # the block that holds bar ``first``
    per = max(1, CHUNK // refresh) * refresh
    for c0 in range(start, steps, per):
        c1, off = min(c0 + per, steps), c0 - window - 1
        r = log_returns(np.asarray(close[off:c1]))  # r[i]: the return of bar off + i
        for block in range(c0, c1, refresh):
            hist = r[block - window - off : block - off]
            mu = hist.mean(axis=0)
            inv = np.linalg.pinv(np.atleast_2d(np.cov(hist, rowvar=False)))
            dev = r[block - off : block - off + refresh] - mu
            if len(dev) < refresh:
                dev = np.concatenate([dev, np.zeros((refresh - len(dev), dev.shape[1]))])
            lo, hi = max(block, first), min(block + refresh, steps)
            out[lo - first : hi - first] = ((dev @ inv) * dev).sum(axis=1)[lo - block : hi - block]
    return out


def volatility_proxy(close: np.ndarray | Rows, window: int, per_year: float, first: int = 0) -> np.ndarray:
    """A VIX-like index: annualised volatility (in percent) of the equal-weight market's log
    returns over the last ``window`` bars, for bars ``first..T−1``; NaN until ``window``
    returns exist."""
    steps = len(close)
    out = np.full(steps - first, np.nan)
    lo = max(first, window)  # the first bar with a value
    if lo >= steps:
        return out
    # market[i]: the mean log return of bar lo - window + i + 1 across stocks
    market = np.concatenate([np.diff(np.log(np.asarray(close[a : min(a + CHUNK, steps - 1) + 1])), axis=0).mean(axis=1)
                             for a in range(lo - window, steps - 1, CHUNK)])
    windows = sliding_window_view(market, window)
    for a in range(0, len(windows), CHUNK):
        out[lo - first + a : lo - first + a + CHUNK] = (windows[a : a + CHUNK].std(axis=1, ddof=1)
                                                        * math.sqrt(per_year) * 100.0)
    return out
