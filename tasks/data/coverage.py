"""The coverage of the validated bars (docs/data.md, what is counted): the panel of every
timestamp any symbol has, and what the tradable mask (``tasks/data/tradable.py``) hides in it.

Validation sees one batch of symbols at a time, so it keeps only each symbol's bar times,
as bits over the calendar of expected bars (:class:`BarTimes`: 1 bit a bar, about 12 MB for
100 symbols x 10 years of minutes), and builds the ``[T, n]`` mask of real bars at the end.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from tasks.data.checks import nanos
from tasks.data.tradable import SymbolCoverage, coverage, tradable_mask


class BarTimes:
    """Each symbol's bar times (int64 ns), kept as bits over a sorted grid that holds them all."""

    def __init__(self) -> None:
        self._bits: dict[str, tuple[int, int, int, np.ndarray]] = {}
        """symbol -> (first time, last time, grid bars from first to last, packed presence bits)"""

    def add(self, symbol: str, times: np.ndarray, grid: np.ndarray) -> None:
        """Record ``times`` (sorted, unique, every one in ``grid``) as the symbol's bars."""
        if symbol in self._bits:
            raise ValueError(f"{symbol}: bar times added twice")
        if not len(times):
            return
        pos = np.searchsorted(grid, times)
        present = np.zeros(int(pos[-1] - pos[0]) + 1, dtype=bool)
        present[pos - pos[0]] = True
        self._bits[symbol] = (int(times[0]), int(times[-1]), len(present), np.packbits(present))

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._bits))

    def span(self) -> tuple[pd.Timestamp, pd.Timestamp] | None:
        """The first and last bar time of any symbol (None: no bars)."""
        if not self._bits:
            return None
        first = min(b[0] for b in self._bits.values())
        last = max(b[1] for b in self._bits.values())
        return pd.Timestamp(first, tz="UTC"), pd.Timestamp(last, tz="UTC")

    def column(self, symbol: str, grid: np.ndarray) -> np.ndarray:
        """Where on ``grid`` (any grid holding the symbol's times) the symbol has a bar."""
        first, _, size, packed = self._bits[symbol]
        start = int(np.searchsorted(grid, first))
        out = np.zeros(len(grid), dtype=bool)
        out[start : start + size] = np.unpackbits(packed, count=size).view(bool)
        return out

    def real(self, grid: np.ndarray) -> tuple[np.ndarray, pd.DatetimeIndex, list[str]]:
        """``[T, n]`` bool where a symbol has a bar, over every time any symbol has (the rows of
        ``grid`` with a bar), those times, and the symbols (sorted)."""
        symbols = list(self)
        union = np.zeros(len(grid), dtype=bool)
        for symbol in symbols:
            union |= self.column(symbol, grid)
        real = np.zeros((int(union.sum()), len(symbols)), dtype=bool)
        for j, symbol in enumerate(symbols):
            real[:, j] = self.column(symbol, grid)[union]
        return real, pd.DatetimeIndex(grid[union].astype("datetime64[ns]")).tz_localize("UTC"), symbols


def bar_times(bars: pd.DataFrame) -> tuple[BarTimes, np.ndarray]:
    """The bar times of ``bars`` (unique on (symbol, ts)) over the grid of its own times."""
    times = BarTimes()
    ts = nanos(bars["ts"])
    grid = np.unique(ts)
    for symbol, rows in bars.groupby("symbol", sort=True).indices.items():
        times.add(str(symbol), np.sort(ts[rows]), grid)
    return times, grid


def real_bars(bars: pd.DataFrame) -> tuple[np.ndarray, pd.DatetimeIndex, list[str]]:
    """``[T, n]`` bool where a symbol has a bar, over every timestamp any symbol has (sorted),
    and the symbols (sorted): ``panel(bars)["real"]`` without pivoting five price fields."""
    times, grid = bar_times(bars)
    return times.real(grid)


class Days(Sequence[str]):
    """The UTC date of each panel bar, as text, made only for the bars asked (a symbol's first
    and last): a million minutes need not become a million strings."""

    def __init__(self, stamps: pd.DatetimeIndex) -> None:
        self._ns = stamps.tz_convert("UTC").tz_localize(None).to_numpy("datetime64[ns]")

    def __len__(self) -> int:
        return len(self._ns)

    def __getitem__(self, i):  # type: ignore[no-untyped-def]  # an int or a slice, as a Sequence is indexed
        text = np.datetime_as_string(self._ns[i], unit="D")
        return str(text) if np.ndim(text) == 0 else [str(d) for d in text]


@dataclass(frozen=True)
class PanelCoverage:
    """The kept bars' panel and what the tradable mask hides in it (``tasks/data/tradable.py``)."""

    bars: int
    min_history: int
    """``features.min_history``: real bars of its own a symbol needs before it is tradable."""
    warmup: int
    """``features.warmup``: panel bars the features stage drops at the start."""
    per_symbol: list[SymbolCoverage]
    dropped: tuple[str, ...] = ()
    """Symbols with no tradable bar after the panel's warm-up: the features stage drops them."""

    @property
    def too_short(self) -> bool:
        """The features stage refuses a panel this short for its warm-up (and drops nothing)."""
        return self.bars <= self.warmup + 2

    @property
    def masked(self) -> int:
        """Symbol-bars of the whole panel that are not tradable, warm-up included."""
        return sum(self.bars - c.tradable for c in self.per_symbol)

    @property
    def warmup_cells(self) -> int:
        """Of ``masked``, the real bars in each symbol's own warm-up."""
        return sum(c.warmup for c in self.per_symbol)


def panel_coverage(real: np.ndarray, stamps: pd.DatetimeIndex, symbols: list[str], min_history: int,
                   warmup: int = 0) -> PanelCoverage:
    """The coverage of the panel ``real`` (``[T, n]``, see :meth:`BarTimes.real`) and the symbols
    the features stage will drop after cutting its first ``warmup`` bars. Symbol by symbol, so
    the tradable mask's running counts never take ``[T, n]`` integers."""
    if not len(stamps):
        return PanelCoverage(0, min_history, warmup, [])
    days = Days(stamps)
    per_symbol, kept = [], []
    for j, symbol in enumerate(symbols):
        column = real[:, j : j + 1]
        mask = tradable_mask(column, min_history)
        per_symbol += coverage(column, mask, [symbol], days)
        kept.append(bool(mask[warmup:].any()))
    cover = PanelCoverage(len(stamps), min_history, warmup, per_symbol)
    if cover.too_short:
        return cover
    return replace(cover, dropped=tuple(s for s, keep in zip(symbols, kept, strict=True) if not keep))


def bar_coverage(bars: pd.DataFrame, min_history: int, warmup: int = 0) -> PanelCoverage:
    """The coverage of the whole panel of ``bars`` (valid rows, unique on (symbol, ts))."""
    if bars.empty:
        return PanelCoverage(0, min_history, warmup, [])
    return panel_coverage(*real_bars(bars), min_history, warmup)


def coverage_lines(cover: PanelCoverage) -> list[str]:
    """The report's Coverage section."""
    n, k, per = len(cover.per_symbol), cover.min_history, cover.per_symbol
    lines = ["## Coverage", "",
             (f"The panel of the kept bars: {cover.bars} bars x {n} symbols. A symbol is tradable where it has "
              f"a real bar and at least {k} real bars of its own (features.min_history)."),
             (f"Counted over the whole panel: the features stage then drops its first {cover.warmup} bars "
              "(features.warmup), so its coverage.json counts fewer masked bars."), ""]
    if not n:
        return [*lines, "No bars kept: nothing to cover."]
    if cover.too_short:
        lines.append(f"- the features stage will refuse this panel: {cover.bars} bars is too few for its "
                     f"{cover.warmup}-bar warm-up (features.warmup)")
    else:
        lines.append(f"- symbols dropped by features (no tradable bar after the {cover.warmup}-bar warm-up: fewer "
                     f"than {k} real bars, or all of them before it): {len(cover.dropped)}"
                     + (f" ({', '.join(cover.dropped)})" if cover.dropped else ""))
    lines += [(f"- masked symbol-bars: {cover.masked} of {cover.bars * n} "
               f"(listed late {sum(c.before_listing for c in per)}, gaps {sum(c.gaps for c in per)}, "
               f"stopped early {sum(c.after_end for c in per)}, warm-up {cover.warmup_cells})"), ""]
    ragged = [c for c in per if c.before_listing or c.gaps or c.after_end or c.symbol in cover.dropped]
    if not ragged:
        return [*lines, (f"Every symbol has a real bar at every panel bar: nothing is masked beyond each "
                         f"symbol's own warm-up ({min(k - 1, cover.bars)} bars).")]
    lines += ["| symbol | first | last | real bars | listed late | gaps | stopped early | warm-up | tradable |",
              "|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {c.symbol} | {c.first} | {c.last} | {c.real_bars} | {c.before_listing} | {c.gaps} | "
              f"{c.after_end} | {c.warmup} | {c.tradable} |" for c in ragged]
    return lines
