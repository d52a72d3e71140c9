"""How strong the evidence is that one arm's Sharpe beats another's on the same bars.

The gate decides on the **paired** per-bar returns of a model and a benchmark over one
window: they share the window's market moves, so the noise of their Sharpe difference is
set by their tracking error, far below either Sharpe's own (docs/operations.md,
the gate). H0: the annualised Sharpe edge is at most ``margin``; the p-value
is one-sided.

**The test** (chosen on simulated development series, measured on fresh ones by
``benchmarks/gate.py calibrate``, docs/results.md). One circular block bootstrap of the
pair (Politis & Romano's blocks, drawn as ``arch``'s ``CircularBlockBootstrap`` draws them;
the block length is Politis & White's choice, ``arch``'s ``optimal_block_length``, for the
Sharpe difference's influence function, the series the estimate's error is made of) gives
two statistics, and the model must pass both:

- the **basic** bootstrap of the difference of the two annualised Sharpes: robust to fat
  tails and jumps, but oversized when the excess returns are persistent;
- the **studentised** one (the bootstrap-t of Ledoit & Wolf 2008): the difference over its
  standard error, prewhitened by an AR(1) of the influence function whose coefficient is
  bias-corrected (Kendall) and read at its one-standard-error upper bound, because a short
  window underestimates persistence and an underestimated persistence is what makes a test
  of a mean oversized. It holds the size under persistence.

The reported p-value is the larger of the two (an intersection-union test: its size is at
most either's), and the interval is the union of the two intervals, so ``low > margin``
about when p < α.

**Fails closed.** A non-finite or non-positive account value, a non-finite return, an arm
whose returns never vary or barely do (:data:`STEADY`), a pair that returns the same on
every bar and fewer than :data:`MIN_BARS` bars give an :class:`Evidence` with a ``fault``
that names the arm, the bar and the reason: it never passes, and no statistic is read from
it. A resample in which an arm has no Sharpe counts against the model, in the p-value and in
the interval alike.

When the evidence falls short, :meth:`Evidence.more_bars` says roughly how many more bars
of the same edge would pass: Bailey & López de Prado's (2012) minimum track record length.
"""

from __future__ import annotations

import math
import os
import warnings
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.lib.stride_tricks import sliding_window_view
from scipy.stats import norm

from tasks.config import RegistryParams

MIN_BARS = 10
"""Fewer paired returns than this are no evidence at all: the test fails closed."""
FLAT = 1e-12
"""A return series whose standard deviation is below this never varies: it has no Sharpe."""
STEADY = 1e4
"""A return series whose mean is more than this many of its standard deviations from zero a
bar (an annualised Sharpe above 150,000) has no Sharpe to test either: no strategy earns
that, so it is a data or look-ahead error, and its variance, which the bootstrap reads from
the first two moments, loses half its digits or more to rounding."""
CHUNK_CELLS = 1 << 17
"""Resampled bars per chunk of the bootstrap (:func:`circular_starts`): each of a chunk's
arrays is 1 MiB, within a core's cache, so the test's memory does not grow with its resamples."""
THREADS = min(4, os.cpu_count() or 1)
"""Threads the bootstrap's chunks are computed on (numpy releases the GIL in its loops)."""


@dataclass(frozen=True)
class Evidence:
    """One paired test: a model against one benchmark over the same ``bars`` returns."""

    benchmark: str
    bars: int
    diff: float
    """Annualised Sharpe of the model minus the benchmark's (NaN when ``fault`` says why not)."""
    low: float
    high: float
    """The two-sided (1 − 2α) interval of ``diff``: ``low > margin`` about when p < α."""
    p_value: float
    """One-sided, H0: the Sharpe difference is at most ``margin`` (1 under a fault)."""
    se: float
    """Standard error of ``diff`` (prewhitened, annualised)."""
    margin: float = 0.0
    alpha: float = 0.05
    fault: str | None = None
    """Why no test was possible (the arm, the bar, the reason); such evidence never passes."""

    @property
    def passed(self) -> bool:
        return self.fault is None and self.p_value < self.alpha

    def more_bars(self) -> int | None:
        """Bars of the same edge still needed to pass (0 when it passes; up to :data:`MIN_BARS`
        when there are fewer); None when there is no edge above the margin to accumulate, or
        a fault. The z statistic grows as sqrt(bars), so the minimum track record is
        ``bars × (z_{1−α} / z)²`` (Bailey & López de Prado 2012)."""
        if self.passed:
            return 0
        if self.bars < MIN_BARS:
            return MIN_BARS - self.bars
        if self.fault is not None:
            return None
        z = (self.diff - self.margin) / self.se if self.se > 0 else 0.0
        if z <= 0 or not math.isfinite(z):
            return None
        needed = self.bars * (norm.ppf(1.0 - self.alpha) / z) ** 2
        return max(1, math.ceil(needed) - self.bars)

    def summary(self) -> str:
        """``vs buy-and-hold: ΔSharpe +0.88 [90% CI +0.21, +1.55], p 0.012``."""
        name = self.benchmark.replace("_", "-")
        if self.fault is not None:
            return f"vs {name}: no test, {self.fault}"
        level = round(100 * (1 - 2 * self.alpha))
        return (f"vs {name}: ΔSharpe {self.diff:+.2f} [{level}% CI {self.low:+.2f}, {self.high:+.2f}], "
                f"p {self.p_value:.3f}")


def refused(benchmark: str, bars: int, fault: str, margin: float = 0.0, alpha: float = 0.05) -> Evidence:
    """Evidence that fails closed: no statistic, p = 1, the ``fault`` said in its line."""
    return Evidence(benchmark, bars, math.nan, -math.inf, math.inf, 1.0, math.nan, margin, alpha, fault)


def _at(position: int, dates: Sequence[object] | None) -> str:
    """``bar 17 (2024-03-05)``: a bar by its position among the returns and, when known, its date."""
    if dates is None:
        return f"bar {position}"
    return f"bar {position} ({str(dates[position])[:19].removesuffix(' 00:00:00')})"


def data_fault(arms: dict[str, np.ndarray], what: str, dates: Sequence[object] | None = None) -> str | None:
    """The first bar of any arm whose ``what`` (``"account value"`` or ``"return"``) is not
    finite, or, for an account value, not positive; None when every value is usable."""
    for arm, values in arms.items():
        bad = ~np.isfinite(values) if what == "return" else ~(np.isfinite(values) & (values > 0))
        if bad.any():
            first = int(np.argmax(bad))
            return f"{arm}: {what} {values[first]:g} at {_at(first, dates)}"
    return None


def shape_fault(model: np.ndarray, benchmark: np.ndarray, arm: str, name: str) -> str | None:
    """Too few bars, an arm that never varies or barely does (:data:`STEADY`), or a pair that
    is the same on every bar."""
    if model.size < MIN_BARS:
        return f"only {model.size} bars (the test needs at least {MIN_BARS})"
    for label, values in ((arm, model), (name, benchmark)):
        spread, mean = float(values.std()), float(values.mean())
        if spread < FLAT:
            return f"{label}: its returns never vary over the {values.size} bars, so it has no Sharpe"
        if abs(mean) > STEADY * spread:
            return (f"{label}: its returns barely vary (a mean excess of {mean:.3g} a bar, sd {spread:.3g}), "
                    "a Sharpe no strategy earns: a data or look-ahead error")
    if float((model - benchmark).std()) < FLAT:
        return f"{arm} and {name} differ by a constant on every one of the {model.size} bars: nothing to test"
    return None


def _sharpe_difference(model: np.ndarray, benchmark: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-bar Sharpe of ``model`` minus ``benchmark``'s (each ``[..., bars]``, sd with ddof 0)
    and the influence function ``ψ`` of that difference (``[..., bars]``): the estimate's
    error is about the mean of ψ (the delta method on each arm's first two moments, Ledoit &
    Wolf 2008 §3)."""
    ratios, psis = [], []
    for x in (model, benchmark):
        mean = x.mean(-1, keepdims=True)
        square = x * x
        second = square.mean(-1, keepdims=True)
        var = second - mean * mean
        with np.errstate(divide="ignore", invalid="ignore"):
            cube = var * np.sqrt(var)
            # (second / cube) * (x - mean) - (mean / (2 cube)) * (square - second), in place
            psi = np.multiply(second / cube, np.subtract(x, mean))
            np.multiply(mean / (2.0 * cube), np.subtract(square, second, out=square), out=square)
            psis.append(np.subtract(psi, square, out=psi))
            ratios.append((mean / np.sqrt(var))[..., 0])
    return ratios[0] - ratios[1], np.subtract(psis[0], psis[1], out=psis[0])


def persistent_se(psi: np.ndarray) -> np.ndarray:
    """Standard error of the mean of ``psi`` (``[..., bars]``), prewhitened by an AR(1) whose
    coefficient is bias-corrected (Kendall: ρ + (1 + 3ρ)/n) and read at its one-standard-error
    upper bound, within [−0.9, 0.97] (module docstring)."""
    bars = psi.shape[-1]
    with np.errstate(divide="ignore", invalid="ignore"):
        rho = (psi[..., 1:] * psi[..., :-1]).sum(-1) / (psi * psi).sum(-1)
        rho = rho + (1.0 + 3.0 * rho) / bars
        rho = np.clip(rho + np.sqrt(np.maximum(1.0 - rho * rho, 0.0) / bars), -0.9, 0.97)
        innovation = psi[..., 1:] - rho[..., None] * psi[..., :-1]
        return np.sqrt((innovation * innovation).mean(-1) / (1.0 - rho) ** 2 / bars)


def block_length(psi: np.ndarray) -> int:
    """Politis & White's circular-bootstrap block length for ``psi``, within [1, bars / 3]."""
    from arch.bootstrap import optimal_block_length

    chosen = 1.0
    if psi.size >= 8:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore", RuntimeWarning)  # a lag with no variance: arch's NaN, read as 1 below
            chosen = float(optimal_block_length(psi)["circular"].iloc[0])
    return int(round(min(max(chosen if math.isfinite(chosen) else 1.0, 1.0), psi.size / 3)))


def circular_starts(bars: int, block: int, resamples: int, seed: int,
                    rows: int | None = None) -> Iterator[np.ndarray]:
    """Each resample's block starts, ``[rows, blocks]``, in consecutive chunks of at most
    ``rows`` resamples (default: about :data:`CHUNK_CELLS` resampled bars a chunk). One
    generator draws them chunk after chunk, which gives the very numbers of one draw of them
    all (numpy's generator keeps its stream, and its spare 32-bit half, between calls), so
    memory is bounded by a chunk while the resamples, and the verdict, stay those of one array."""
    blocks = -(-bars // block)
    rows = max(1, CHUNK_CELLS // max(bars, 1)) if rows is None else rows
    rng = np.random.default_rng(seed)
    for done in range(0, resamples, rows):
        yield rng.integers(0, bars, size=(min(rows, resamples - done), blocks), dtype=np.int64)


def circular_chunks(bars: int, block: int, resamples: int, seed: int,
                    rows: int | None = None) -> Iterator[np.ndarray]:
    """:func:`circular_indices` a chunk of :func:`circular_starts` at a time: ``[rows, bars]``."""
    offsets = np.arange(block, dtype=np.int64)
    for starts in circular_starts(bars, block, resamples, seed, rows):
        yield ((starts[:, :, None] + offsets) % bars).reshape(len(starts), -1)[:, :bars]


def circular_indices(bars: int, block: int, resamples: int, seed: int) -> np.ndarray:
    """``[resamples, bars]`` circular-block resamples, drawn as ``arch``'s
    ``CircularBlockBootstrap(block, ..., seed=seed).update_indices()`` draws them one by one
    (the same numbers), as one array."""
    return np.concatenate(list(circular_chunks(bars, block, resamples, seed)))


def _p(replicates: np.ndarray, observed: float) -> float:
    """Share of replicates at least ``observed`` (a NaN replicate counts against the model)."""
    extreme = np.count_nonzero(~(replicates < observed - 1e-12))
    return (1 + int(extreme)) / (replicates.size + 1)


def _against_the_model(values: np.ndarray) -> np.ndarray:
    """``values`` with each NaN as +inf: a resample in which an arm has no Sharpe (flat within
    it) counts against the model in the interval as in :func:`_p`, and so does a quantile that
    falls between two such resamples (inf − inf)."""
    return np.where(np.isnan(values), np.inf, values)


def paired_test(model: np.ndarray, benchmark: np.ndarray, name: str, *, per_year: float, risk_free: float = 0.0,
                margin: float = 0.0, alpha: float = 0.05, resamples: int = 2000, seed: int = 0, arm: str = "model",
                dates: Sequence[object] | None = None) -> Evidence:
    """Test whether ``model``'s Sharpe beats ``benchmark``'s by more than ``margin``.

    Both are per-bar simple returns of the same bars, in order (``dates`` names them in a
    fault; ``arm`` names the model). The same ``seed`` and returns give the same verdict,
    bit for bit.
    """
    model, benchmark = (np.asarray(x, dtype=np.float64) for x in (model, benchmark))
    if model.shape != benchmark.shape or model.ndim != 1:
        raise ValueError(f"paired returns need the same bars: {model.shape} against {benchmark.shape}")
    bars = model.size
    excess = np.stack([model, benchmark]) - risk_free / per_year
    fault = data_fault({arm: model, name: benchmark}, "return", dates) or shape_fault(*excess, arm, name)
    if fault is not None:
        return refused(name, bars, fault, margin, alpha)
    # annualised, and each Sharpe's sd with ddof 1 as trainers.common.metrics
    scale = math.sqrt(per_year * (bars - 1) / bars)
    point, psi = _sharpe_difference(*excess)
    observed, se = float(point) * scale, float(persistent_se(psi)) * scale
    error, studentised = _replicates(excess, point, scale, block_length(psi), resamples, seed)
    edge = observed - margin
    p_value = max(_p(error, edge), _p(studentised, edge / se))
    with np.errstate(invalid="ignore"):  # inf − inf between two resamples without a Sharpe: NaN, then +inf
        basic = _against_the_model(np.quantile(_against_the_model(error), [1.0 - alpha, alpha]))
        student = _against_the_model(np.quantile(np.nan_to_num(studentised, nan=np.inf), [1.0 - alpha, alpha])) * se
    low, high = observed - max(float(basic[0]), float(student[0])), observed - min(float(basic[1]), float(student[1]))
    return Evidence(name, bars, observed, low, high, p_value, se, margin, alpha)


def _replicates(excess: np.ndarray, point: float, scale: float, block: int, resamples: int,
                seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Each resample's error of the Sharpe difference, as the bootstrap sees it (annualised),
    and that error over the resample's own standard error (the studentised statistic),
    ``[resamples]`` each.

    The resamples are drawn a chunk at a time (:func:`circular_starts`) and each chunk's blocks
    are copied straight from a circular view of the pair (no index array), on up to
    :data:`THREADS` threads, with at most two chunks a thread in flight. Every number is
    computed row by row, so neither the chunks nor the threads change a bit, and a year of
    minute bars needs a few chunks' memory, not ``resamples × bars`` of it (docs/operations.md,
    the gate)."""
    bars = excess.shape[1]
    circle = sliding_window_view(np.concatenate((excess, excess[:, : block - 1]), axis=1), block, axis=1)
    error, studentised = np.empty(resamples), np.empty(resamples)

    def chunk(done: int, starts: np.ndarray) -> None:
        replicated, replicated_psi = _sharpe_difference(*circle[:, starts].reshape(2, len(starts), -1)[..., :bars])
        rows = slice(done, done + len(starts))
        error[rows] = (replicated - point) * scale
        with np.errstate(divide="ignore", invalid="ignore"):
            studentised[rows] = error[rows] / (persistent_se(replicated_psi) * scale)

    with ThreadPoolExecutor(THREADS) as pool:
        pending: deque[Future[None]] = deque()
        done = 0
        for starts in circular_starts(bars, block, resamples, seed):
            if len(pending) >= 2 * THREADS:
                pending.popleft().result()
            pending.append(pool.submit(chunk, done, starts))
            done += len(starts)
        for future in pending:
            future.result()
    return error, studentised


def binding(evidence: Sequence[Evidence]) -> Evidence:
    """The test that decides: a fault first, else the largest p-value (every benchmark must be beaten)."""
    return max(evidence, key=lambda e: (e.fault is not None, e.p_value))


def evidence_line(evidence: Sequence[Evidence]) -> str:
    """One line: each benchmark's difference, interval and p, the verdict's arithmetic and,
    when it fails, the bars still needed (``vs buy-and-hold: ΔSharpe +0.88 [90% CI +0.19,
    +1.62], p 0.025 < α 0.05 over 250 bars``); a fault says the test failed closed."""
    worst = binding(evidence)
    said = "; ".join(e.summary() for e in evidence)
    if worst.fault is not None:
        more = worst.more_bars()
        tail = f"; about {more:,} more bars would allow a test" if more else ""
        return f"{said}: fails closed over {worst.bars} bars{tail}"
    relation = "<" if worst.passed else "≥"
    if len(evidence) > 1:
        said += f"; largest p {worst.p_value:.3f}"
    line = f"{said} {relation} α {worst.alpha:g} over {worst.bars} bars"
    if worst.passed:
        return line
    more = worst.more_bars()
    if more is None:
        edge = "no edge" if worst.margin == 0 else f"no edge above the margin {worst.margin:g}"
        return f"{line}; {edge} over {worst.benchmark.replace('_', '-')} to accumulate"
    return f"{line}; about {more:,} more bars of this edge would pass"


def against(curve: pd.DataFrame, model: str, registry: RegistryParams, per_year: float,
            risk_free: float = 0.0) -> tuple[Evidence, ...]:
    """``model`` against every other column of ``curve`` (account values per bar, one
    column per arm, the same bars), each a paired test on their per-bar returns. An account
    value that is not finite or not positive fails every test closed, naming the arm and bar."""
    values = curve.astype(float)
    others = [name for name in values.columns if name != model]
    dates = list(values.index)
    fault = data_fault({name: values[name].to_numpy() for name in values.columns}, "account value", dates)
    if fault is not None:
        return tuple(refused(name, len(values) - 1, fault, registry.gate_margin, registry.gate_alpha)
                     for name in others)
    returns = values.pct_change().iloc[1:]
    return tuple(paired_test(returns[model].to_numpy(), returns[name].to_numpy(), name, per_year=per_year,
                             risk_free=risk_free, margin=registry.gate_margin, alpha=registry.gate_alpha,
                             resamples=registry.gate_resamples, seed=registry.gate_seed, arm=model, dates=dates[1:])
                 for name in others)
