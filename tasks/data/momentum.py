"""Scale-free per-stock features: multi-horizon log returns, an exponentially weighted mean
return, their cross-sectional z-scores and realised volatility (docs/data.md, features).

FinRL's indicators (macd, the SMAs, the Bollinger bands) are in price units, so even after
z-scoring they tell a policy the price level, which identifies the stock; these do not.
Each value at bar t uses closes up to t only (no look-ahead) and is the same for a stock
at 6 dollars or at 600. In a ragged universe each symbol's returns run over its own real
bars, and the cross-sectional z-scores over the symbols that have a value at the bar.
"""

from __future__ import annotations

import re

import numpy as np

NAMES = ("ret_5", "ret_20", "ret_60", "ret_20_xs", "ret_60_xs", "vol_20", "ewm_20", "ewm_40", "ewm_20_xs",
         "ewm_40_xs")
"""The names ``features.indicators`` accepts from this module."""
_PATTERN = re.compile(r"^(ret|vol|ewm)_(\d+)(_xs)?$")
EWM_SPAN = 3
"""``ewm_H`` averages the last ``EWM_SPAN × H`` one-bar returns (``ewm_40``: 120, within the warm-up)."""


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
    """``[T, n]`` standard deviation of the last ``window`` one-bar log returns."""
    ret = log_returns(close, 1)
    out = np.full(close.shape, np.nan)
    for t in range(window, len(close)):
        out[t] = ret[t - window + 1 : t + 1].std(axis=0)
    return out


def ewm_return(close: np.ndarray, halflife: int) -> np.ndarray:
    """``[T, n]`` mean one-bar log return over the last ``3 × halflife`` bars, weighted
    ``2^(−k/halflife)`` at lag k; NaN until there are that many returns.

    A trend estimate with less noise than one horizon's return: the recent bars count most
    and none drops out at once, as a 20-bar return's oldest bar does. A fixed window, so a
    value never depends on where the history starts.
    """
    ret, span = log_returns(close, 1), EWM_SPAN * halflife
    weights = 2.0 ** (-np.arange(span) / halflife)
    weights /= weights.sum()
    out = np.full(close.shape, np.nan)
    if len(close) > span:
        out[span:] = sum(w * ret[span - k:len(ret) - k] for k, w in enumerate(weights))
    return out


def ragged_z(values: np.ndarray) -> np.ndarray:
    """:func:`cross_sectional_z` over the finite values of each bar (NaN stays NaN); a bar
    with every value finite gives exactly :func:`cross_sectional_z`'s numbers."""
    out = np.full(values.shape, np.nan)
    for t, row in enumerate(values):
        have = np.isfinite(row)
        if have.all():
            out[t] = cross_sectional_z(row[None])[0]
        elif have.any():
            out[t, have] = cross_sectional_z(row[have][None])[0]
    return out


def feature(close: np.ndarray, name: str, real: np.ndarray | None = None) -> np.ndarray:
    """The ``[T, n]`` feature ``name`` (one of :data:`NAMES`) from closes ``[T, n]``; with
    ``real`` (``[T, n]`` bool, the bars a symbol really has), each symbol's over its own real
    bars only, NaN elsewhere."""
    match = _PATTERN.match(name)
    if match is None or name not in NAMES:
        raise ValueError(f"unknown scale-free feature {name!r}")
    kind, horizon, xs = match.group(1), int(match.group(2)), match.group(3)
    base = {"ret": log_returns, "vol": realised_vol, "ewm": ewm_return}[kind]
    if real is None or real.all():
        out = base(close, horizon)
        return cross_sectional_z(out) if xs else out
    out = np.full(close.shape, np.nan)
    for j in range(close.shape[1]):
        rows = np.flatnonzero(real[:, j])
        out[rows, j] = base(close[rows, j : j + 1], horizon)[:, 0]
    return ragged_z(out) if xs else out
