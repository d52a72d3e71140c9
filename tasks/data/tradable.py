"""The tradable mask of a ragged universe (docs/data.md, ragged universes): where a symbol has a real bar and
enough history of its own to trade.

Real data is ragged: symbols list late (IPOs), stop early (delistings), halt, and miss days.
The panel keeps every bar of every symbol's own history; nothing is cut to a common start
and no bar is invented. A cell ``[t, i]`` is *tradable* when symbol i has a real bar at t
and at least ``features.min_history`` real bars up to and including t (its own warm-up).
The env and serving never buy an untradable symbol, close a position out at the symbol's
last real close when it stops trading, and show the policy nothing about it (docs/data.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

ROWS = 1 << 16
"""Rows counted at a time (a whole minute panel's int64 counts would be 8 times its mask)."""


def tradable_mask(real: np.ndarray, min_history: int) -> np.ndarray:
    """``[T, n]`` bool: a real bar at t, and at least ``min_history`` real bars of the symbol's
    own up to and including t."""
    real = np.asarray(real, dtype=bool)
    out = np.empty_like(real)
    before = np.zeros(real.shape[1:], np.int64)
    for a in range(0, len(real), ROWS):
        counts = np.cumsum(real[a : a + ROWS], axis=0) + before
        out[a : a + ROWS] = real[a : a + ROWS] & (counts >= min_history)
        before = counts[-1]
    return out


@dataclass(frozen=True)
class SymbolCoverage:
    """How much of the panel one symbol really fills, and why the rest is masked."""

    symbol: str
    first: str
    """Date of its first real bar."""
    last: str
    """Date of its last real bar."""
    real_bars: int
    before_listing: int
    """Panel bars before its first real bar."""
    gaps: int
    """Panel bars between its first and last real bar with no bar of its own (halts, missing days)."""
    after_end: int
    """Panel bars after its last real bar (it stopped trading)."""
    warmup: int
    """Real bars masked because fewer than ``min_history`` came before."""
    tradable: int
    """Tradable bars."""


def coverage(real: np.ndarray, mask: np.ndarray, symbols: list[str], dates: Sequence[str]) -> list[SymbolCoverage]:
    """Per-symbol counts behind the tradable ``mask`` of ``real`` (both ``[T, n]``, one date per row)."""
    real, mask = np.asarray(real, dtype=bool), np.asarray(mask, dtype=bool)
    out = []
    for i, symbol in enumerate(symbols):
        rows = np.flatnonzero(real[:, i])
        if rows.size == 0:
            out.append(SymbolCoverage(symbol, "", "", 0, len(real), 0, 0, 0, 0))
            continue
        lo, hi = int(rows[0]), int(rows[-1])
        out.append(SymbolCoverage(
            symbol, dates[lo], dates[hi], int(rows.size), lo, int(hi - lo + 1 - rows.size), int(len(real) - 1 - hi),
            int(rows.size - mask[:, i].sum()), int(mask[:, i].sum()),
        ))
    return out
