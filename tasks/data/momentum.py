"""Scale-free per-stock features: multi-horizon log returns, an exponentially weighted mean
return, that trend over its volatility, their cross-sectional z-scores and realised
volatility (docs/data.md, features).

FinRL's indicators (macd, the SMAs, the Bollinger bands) are in price units, so even after
z-scoring they tell a policy the price level, which identifies the stock; these do not.
Each value at bar t uses closes up to t only (no look-ahead) and is the same for a stock
at 6 dollars or at 600. In a ragged universe each symbol's returns run over its own real
bars, and the cross-sectional z-scores over the symbols that have a value at the bar.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

NAMES = ("ret_5", "ret_20", "ret_60", "ret_20_xs", "ret_60_xs", "vol_20", "ewm_20", "ewm_40", "ewm_20_xs",
         "ewm_40_xs", "sr_20", "sr_40", "sr_20_xs", "sr_40_xs")
"""The names ``features.indicators`` accepts from this module."""
_PATTERN = re.compile(r"^(ret|vol|ewm|sr)_(\d+)(_xs)?$")
EWM_SPAN = 3
"""``ewm_H`` (and ``sr_H``) average the last ``EWM_SPAN × H`` one-bar returns (``ewm_40``: 120, within the warm-up)."""
_CELLS = 1 << 21
"""Window cells per chunk of :func:`realised_vol` (bounds its temporaries to about 16 MB)."""


def log_returns(close: np.ndarray, horizon: int) -> np.ndarray:
    """``[T, n]`` log(close_t / close_{t−h}); NaN for the first ``horizon`` bars."""
    out = np.full(close.shape, np.nan)
    out[horizon:] = np.log(close[horizon:] / close[:-horizon])
    return out


def cross_sectional_z(values: np.ndarray) -> np.ndarray:
    """Each bar's values as z-scores across stocks (0 where the stocks do not differ)."""
    mean = values.mean(axis=1, keepdims=True)
    std = values.std(axis=1, keepdims=True)
    return np.where(std > 1e-12, (values - mean) / np.where(std > 1e-12, std, 1.0), 0.0)


def realised_vol(close: np.ndarray, window: int) -> np.ndarray:
    """``[T, n]`` standard deviation of the last ``window`` one-bar log returns.

    Each bar's value is ``ret[t − window + 1 : t + 1].std(axis=0)``; the bars are taken in
    chunks of sliding windows, which numpy reduces in the same order as that slice (the
    tests compare both bit for bit), so a ``[T, 1]`` column and a ``[T, n]`` panel give
    the numbers they always gave.
    """
    ret = log_returns(close, 1)
    out = np.full(close.shape, np.nan)
    step = max(1, _CELLS // (window * max(close.shape[1], 1)))
    for t in range(window, len(close), step):
        end = min(t + step, len(close))
        out[t:end] = sliding_window_view(ret[t - window + 1 : end], window, axis=0).std(axis=-1)
    return out


def ewm_return(close: np.ndarray, halflife: int) -> np.ndarray:
    """``[T, n]`` mean one-bar log return over the last ``3 × halflife`` bars, weighted
    ``2^(−k/halflife)`` at lag k; NaN until there are that many returns.

    A trend estimate with less noise than one horizon's return: the recent bars count most
    and none drops out at once, as a 20-bar return's oldest bar does. A fixed window, so a
    value never depends on where the history starts. The weighted returns are added lag by
    lag from 0 (``0 + w_0 r_t + w_1 r_{t−1} + …``), in place and a chunk of bars at a time.
    """
    ret, span = log_returns(close, 1), EWM_SPAN * halflife
    weights = 2.0 ** (-np.arange(span) / halflife)
    weights /= weights.sum()
    out = np.full(close.shape, np.nan)
    step = max(1, _CELLS // 32 // max(close.shape[1], 1))  # rows whose sums stay in cache
    for t in range(span, len(close), step):
        end = min(t + step, len(close))
        total, term = np.zeros((end - t, *close.shape[1:])), np.empty((end - t, *close.shape[1:]))
        for k, w in enumerate(weights):
            np.add(total, np.multiply(w, ret[t - k : end - k], out=term), out=total)
        out[t:end] = total
    return out


def trend_sharpe(close: np.ndarray, horizon: int) -> np.ndarray:
    """``[T, n]`` :func:`ewm_return` over :func:`realised_vol`, both at ``horizon``: the trend in
    units of the stock's recent one-bar volatility, a per-bar Sharpe ratio of the trend (risk-adjusted
    momentum). 0 where the last ``horizon`` returns are all equal (no volatility, so no trend to
    scale); NaN until both parts have their history.

    Why: a drift that is a fixed share of a stock's volatility shows up in the ratio, not in the
    raw trend, which a volatile stock's noise inflates. Ranked by it, the development seeds earn
    about what the generator-aware filter earns (docs/results.md, the learner's inputs)."""
    trend, vol = ewm_return(close, horizon), realised_vol(close, horizon)
    out = np.where(np.isnan(trend) | np.isnan(vol), np.nan, 0.0)
    np.divide(trend, vol, out=out, where=vol > 0)
    return out


def ragged_z(values: np.ndarray) -> np.ndarray:
    """:func:`cross_sectional_z` over the finite values of each bar (NaN stays NaN); a bar
    with every value finite gives exactly :func:`cross_sectional_z`'s numbers. Bars with the
    same finite stocks are scored together (each bar's reduction is its own, so the numbers
    equal a bar-by-bar loop's)."""
    out = np.full(values.shape, np.nan)
    have = np.isfinite(values)
    full = have.all(axis=1)
    if full.any():
        out[full] = cross_sectional_z(values[full])
    partial = np.flatnonzero(have.any(axis=1) & ~full)
    if partial.size:
        patterns, group = np.unique(have[partial], axis=0, return_inverse=True)
        for g, pattern in enumerate(patterns):
            cells = np.ix_(partial[group.ravel() == g], np.flatnonzero(pattern))
            out[cells] = cross_sectional_z(values[cells])
    return out


def parse(name: str) -> tuple[Callable[[np.ndarray, int], np.ndarray], int, bool]:
    """``(base, horizon, xs)`` of the feature ``name``: its per-stock function, the horizon, and
    whether it is z-scored across stocks."""
    match = _PATTERN.match(name)
    if match is None or name not in NAMES:
        raise ValueError(f"unknown scale-free feature {name!r}")
    kind, horizon = match.group(1), int(match.group(2))
    bases = {"ret": log_returns, "vol": realised_vol, "ewm": ewm_return, "sr": trend_sharpe}
    return bases[kind], horizon, bool(match.group(3))


def base_name(name: str) -> str:
    """The per-stock feature under ``name`` (``ewm_20`` for ``ewm_20_xs``)."""
    return name.removesuffix("_xs")


def lookback(name: str) -> int:
    """Bars of closes before t that the value at t reads: ``h`` for ``ret_h`` and ``vol_h``,
    ``EWM_SPAN × h`` for ``ewm_h`` and ``sr_h`` (the windows are bounded, so a tail of history is enough)."""
    _, horizon, _ = parse(name)
    return EWM_SPAN * horizon if name.startswith(("ewm", "sr")) else horizon


def feature(close: np.ndarray, name: str, real: np.ndarray | None = None) -> np.ndarray:
    """The ``[T, n]`` feature ``name`` (one of :data:`NAMES`) from closes ``[T, n]``; with
    ``real`` (``[T, n]`` bool, the bars a symbol really has), each symbol's over its own real
    bars only, NaN elsewhere."""
    base, horizon, xs = parse(name)
    if real is None or real.all():
        out = base(close, horizon)
        return cross_sectional_z(out) if xs else out
    out = np.full(close.shape, np.nan)
    for j in range(close.shape[1]):
        rows = np.flatnonzero(real[:, j])
        out[rows, j] = base(close[rows, j : j + 1], horizon)[:, 0]
    return ragged_z(out) if xs else out
