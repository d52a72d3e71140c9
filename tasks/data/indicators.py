"""The indicators of stage 3 over the on-disk panel (docs/data.md, features).

Each indicator is computed where its definition lives, so the numbers are the ones a whole
in-memory panel gives, bit for bit:

- **per symbol, on its own real bars** (:func:`symbol_columns`, one symbol in memory at a
  time): FinRL's stockstats indicators, and in a ragged universe the scale-free returns
  (``tasks/data/momentum.py``);
- **per row block of the panel** (:func:`block`): the cross-sectional z-scores, and in a
  gap-free universe the scale-free returns themselves (a ``[T, n]`` panel's rolling
  standard deviation sums its windows in another order than one symbol's column does, so
  they are computed over blocks of the panel's rows plus the bars they look back on);
- **market-wide** (:func:`market_series`): turbulence and the volatility proxy
  (``tasks/data/turbulence.py``), ``[T]`` series read from the panel in chunks.

Every indicator but stockstats' reads a bounded window of bars before t (:attr:`Plan.bounded`),
so appended bars need only a tail of history.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tasks.config import FeatureParams
from tasks.data import momentum
from tasks.data.panel_store import FIELDS, ColumnStore, FieldRows, SymbolRows
from tasks.data.turbulence import turbulence, volatility_proxy
from trainers.common.metrics import periods_per_year

MARKET_WIDE = ("turbulence", "vix_proxy")
"""Indicators of the whole market, the same in every stock's column and never masked."""


@dataclass(frozen=True)
class Plan:
    """Where each configured indicator is computed, for one panel."""

    names: list[str]
    cfg: FeatureParams
    freq: str
    ragged: bool
    """Some symbol misses a bar: scale-free returns run per symbol on its own bars."""

    @property
    def stockstats(self) -> list[str]:
        return [n for n in self.names if n not in MARKET_WIDE and n not in momentum.NAMES]

    @property
    def per_stock(self) -> list[int]:
        """Indices of the indicators masked where a stock is not tradable."""
        return [i for i, n in enumerate(self.names) if n not in MARKET_WIDE]

    @property
    def bases(self) -> list[str]:
        """Per-symbol scale-free returns kept in the store (ragged panels only)."""
        if not self.ragged:
            return []
        return list(dict.fromkeys(momentum.base_name(n) for n in self.names if n in momentum.NAMES))

    @property
    def fields(self) -> list[str]:
        """The store's per-symbol columns."""
        return ["open", "close", *self.stockstats, *self.bases]

    @property
    def bounded(self) -> bool:
        """Whether every value at t reads a bounded window before t (stockstats' EMAs do not)."""
        return not self.stockstats

    @property
    def lookback(self) -> int:
        """Rows before a block that the gap-free scale-free returns read."""
        return max([momentum.lookback(n) for n in self.names if n in momentum.NAMES], default=0)


def symbol_columns(plan: Plan, rows: SymbolRows, first: int) -> dict[str, np.ndarray]:
    """One symbol's store columns ``[T]``: open and close as the panel fills them, and its
    stockstats indicators and (ragged) scale-free returns on its own real bars, NaN where it
    has none; the per-symbol indicators only from row ``first`` on (the rows being computed),
    read from its own bars back as far as their windows reach."""
    steps = len(rows.close)
    out = {"open": rows.open, "close": rows.close}
    at = rows.positions
    if plan.stockstats:
        from stockstats import wrap

        stats = wrap(pd.DataFrame({f: rows.own[f] for f in FIELDS})) if at.size else None
        for name in plan.stockstats:
            column = np.full(steps, np.nan)
            if stats is not None:
                column[at] = stats[name].to_numpy(dtype=np.float64)
            out[name] = column
    for name in plan.bases:
        base, horizon, _ = momentum.parse(name)
        k0 = int(np.searchsorted(at, first))
        start = max(0, k0 - momentum.lookback(name))
        column = np.full(steps, np.nan)
        if at.size > k0:
            column[at[k0:]] = base(rows.own["close"][start:, None], horizon)[k0 - start :, 0]
        out[name] = column
    return out


def market_series(plan: Plan, close: FieldRows, first: int) -> dict[str, np.ndarray]:
    """The market-wide indicators for rows ``first..T−1`` (``[T − first]`` each)."""
    cfg, out = plan.cfg, {}
    if "turbulence" in plan.names:
        out["turbulence"] = turbulence(close, cfg.turbulence_window, cfg.turbulence_refresh, first)
    if "vix_proxy" in plan.names:
        out["vix_proxy"] = volatility_proxy(close, cfg.vix_window, periods_per_year(plan.freq), first)
    return out


def block(plan: Plan, store: ColumnStore, series: dict[str, np.ndarray], tradable: np.ndarray,
          a: int, b: int, first: int) -> np.ndarray:
    """``[b − a, n, k]`` float64 indicators of panel rows ``a..b−1``, per-stock ones NaN where
    ``tradable`` (``[b − a, n]``) is false; ``series`` start at row ``first``."""
    n = store.shape[0]
    out = np.empty((b - a, n, len(plan.names)))
    close: np.ndarray | None = None
    lo = max(0, a - plan.lookback)
    for i, name in enumerate(plan.names):
        if name in MARKET_WIDE:
            out[:, :, i] = series[name][a - first : b - first, None]
        elif name in momentum.NAMES and plan.ragged:
            values = store.rows(momentum.base_name(name), a, b)
            out[:, :, i] = momentum.ragged_z(values) if momentum.parse(name)[2] else values
        elif name in momentum.NAMES:
            close = store.rows("close", lo, b) if close is None else close
            out[:, :, i] = momentum.feature(close, name)[a - lo :]
        else:
            out[:, :, i] = store.rows(name, a, b)
    untradable = ~tradable
    for i in plan.per_stock:
        np.copyto(out[:, :, i], np.nan, where=untradable)
    return out
