"""Train-only normalisation statistics, fitted on the tradable train cells (docs/data.md, features).

Per stock (``features.normalise: per_stock``), each symbol's indicators are z-scored with
that symbol's own train mean and sd; **pooled**, with one mean and sd per indicator over every
stock's train cells. Pooled suits scale-free indicators and a scorer shared across stocks: a
per-stock mean of a cross-sectional score is the stock's average standing over the whole
train window, so subtracting it moves a stock's inputs by what it would do later in that
window (a look-ahead inside it) and, out of sample, by a past that no longer holds
(docs/results.md).

:func:`train_stats` is the definition, over a train split in memory. :func:`streamed_stats`
gives the same numbers, bit for bit, from row blocks read one at a time, so a paper-scale
train split (2 GB of float64) is never in memory: numpy sums a C-ordered ``[N, L]`` array
over axis 0 row by row when ``L`` ≥ 2, which :class:`Fold` continues across blocks. With a
single lane (``L`` = 1) numpy sums pairwise instead, so those few values are read whole and
passed to :func:`train_stats`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tasks.errors import DataError

CELLS = 1 << 22
"""Train cells per block read (32 MB of float64)."""


def train_stats(train: np.ndarray, tradable: np.ndarray, pooled: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Per ``[n, k]`` mean and std over the tradable train cells (``train`` ``[N, n, k]``,
    ``tradable`` ``[N, n]``); a symbol with no tradable train bar (listed later) takes the
    pooled statistics of the symbols that have some, and with ``pooled`` every symbol does."""
    if tradable.all() and not pooled:
        return train.mean(axis=0), train.std(axis=0)
    cells = np.where(tradable[..., None], train, np.nan)
    seen = _seen(tradable)
    mean, std = np.zeros(train.shape[1:]), np.ones(train.shape[1:])
    mean[seen], std[seen] = np.nanmean(cells[:, seen], axis=0), np.nanstd(cells[:, seen], axis=0)
    everyone = cells[:, seen].reshape(-1, train.shape[2])
    own = ~seen if not pooled else np.ones_like(seen)
    mean[own], std[own] = np.nanmean(everyone, axis=0), np.nanstd(everyone, axis=0)
    return mean, std


def _seen(tradable: np.ndarray) -> np.ndarray:
    seen = tradable.any(axis=0)
    if not seen.any():
        raise DataError("features: no symbol is tradable in the train split; lower features.min_history "
                        "or move features.train_end later")
    return seen


class Fold:
    """``np.sum(rows, axis=0)`` of ``[N, L ≥ 2]`` rows given block by block, in numpy's order."""

    def __init__(self) -> None:
        self.total: np.ndarray | None = None

    def add(self, rows: np.ndarray) -> None:
        if len(rows):
            self.total = np.add.reduce(rows if self.total is None else np.concatenate([self.total[None], rows]),
                                       axis=0)


def streamed_stats(read: Callable[[int, int], np.ndarray], tradable: np.ndarray, k: int, pooled: bool = False
                   ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`train_stats` of the ``[N, n, k]`` train split that ``read(a, b)`` returns rows
    ``a..b−1`` of (two passes: the means, then the squared deviations)."""
    rows, n = tradable.shape
    plain = bool(tradable.all()) and not pooled
    seen = np.ones(n, bool) if plain else _seen(tradable)
    if (n * k if plain else min(int(seen.sum()) * k, k)) == 1:
        return train_stats(read(0, rows), tradable, pooled)
    step = max(1, CELLS // max(n * k, 1))
    spans = [(a, min(a + step, rows)) for a in range(0, rows, step)]
    if plain:
        total = Fold()
        for a, b in spans:
            total.add(read(a, b).reshape(b - a, -1))
        assert total.total is not None
        mean = total.total / rows
        squares = Fold()
        for a, b in spans:
            dev = read(a, b).reshape(b - a, -1) - mean
            squares.add(dev * dev)
        assert squares.total is not None
        return mean.reshape(n, k), np.sqrt(squares.total / rows).reshape(n, k)

    def cells(a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
        """Rows of the seen symbols' cells, NaN (untradable) replaced by 0, and that mask."""
        arr = np.where(tradable[a:b, seen, None], read(a, b)[:, seen], np.nan)
        mask = np.isnan(arr)
        arr[mask] = 0.0
        return arr, mask

    width = int(seen.sum()) * k
    sums = {"own": Fold(), "pooled": Fold()}
    counts = {"own": np.zeros(width, np.intp), "pooled": np.zeros(k, np.intp)}
    for a, b in spans:
        arr, mask = cells(a, b)
        for name, shape in (("own", (b - a, width)), ("pooled", (-1, k))):
            sums[name].add(arr.reshape(shape))
            counts[name] += (~mask).reshape(shape).sum(axis=0)
    means = {name: np.divide(fold.total, counts[name]) for name, fold in sums.items()}
    squares = {"own": Fold(), "pooled": Fold()}
    for a, b in spans:
        arr, mask = cells(a, b)
        for name, shape in (("own", (b - a, width)), ("pooled", (-1, k))):
            dev = arr.reshape(shape) - means[name]
            dev[mask.reshape(shape)] = 0.0
            squares[name].add(dev * dev)
    stds = {name: np.sqrt(np.divide(fold.total, counts[name])) for name, fold in squares.items()}
    mean, std = np.zeros((n, k)), np.ones((n, k))
    mean[seen], std[seen] = means["own"].reshape(-1, k), stds["own"].reshape(-1, k)
    own = ~seen if not pooled else np.ones_like(seen)
    mean[own], std[own] = means["pooled"], stds["pooled"]
    return mean, std
