"""How strong the evidence is that one arm's Sharpe beats another's on the same bars.

The gate decides on the **paired** per-bar returns of a model and a benchmark over one
window: they share the window's market moves, so the noise of their Sharpe difference is
set by their tracking error, far below either Sharpe's own (docs/operations.md, the gate).
The test resamples the pair with Politis & Romano's stationary bootstrap (``arch``), whose
random blocks keep the returns' autocorrelation, volatility clustering and fat tails; the
block length is Politis & White's automatic choice for the return difference. Like Ledoit &
Wolf (2008, the robust Sharpe-ratio difference test) the statistic is the difference of the
two annualised Sharpe ratios, here with the basic (centred) bootstrap interval rather than
their studentised one. H0: the edge is at most ``margin``; the p-value is one-sided.

When the evidence falls short, :meth:`Evidence.more_bars` says roughly how many more bars
of the same edge would pass: Bailey & López de Prado's (2012) minimum track record length,
with the standard error of the difference taken from the bootstrap.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.stats import norm

from tasks.config import RegistryParams

MIN_BARS = 10
"""Fewer paired returns than this are no evidence at all: p = 1."""


@dataclass(frozen=True)
class Evidence:
    """One paired test: a model against one benchmark over the same ``bars`` returns."""

    benchmark: str
    bars: int
    diff: float
    """Annualised Sharpe of the model minus the benchmark's."""
    low: float
    high: float
    """The two-sided (1 − 2α) bootstrap interval of ``diff``: ``low > margin`` about when p < α (both read the same bootstrap quantile)."""
    p_value: float
    """One-sided, H0: the Sharpe difference is at most ``margin``."""
    se: float
    """Bootstrap standard error of ``diff``."""
    margin: float = 0.0
    alpha: float = 0.05

    @property
    def passed(self) -> bool:
        return self.p_value < self.alpha

    def more_bars(self) -> int | None:
        """Bars of the same edge still needed to pass (0 when it passes; up to :data:`MIN_BARS`
        when there are fewer); None when there is no edge above the margin to accumulate. The z statistic grows as sqrt(bars), so the
        minimum track record is ``bars × (z_{1−α} / z)²`` (Bailey & López de Prado 2012)."""
        if self.passed:
            return 0
        if self.bars < MIN_BARS:
            return MIN_BARS - self.bars
        z = (self.diff - self.margin) / self.se if self.se > 0 else 0.0
        if z <= 0 or not math.isfinite(z):
            return None
        needed = self.bars * (norm.ppf(1.0 - self.alpha) / z) ** 2
        return max(1, math.ceil(needed) - self.bars)

    def summary(self) -> str:
        """``vs buy-and-hold: ΔSharpe +0.88 [90% CI +0.21, +1.55], p 0.012``."""
        if self.bars < MIN_BARS:
            return (f"vs {self.benchmark.replace('_', '-')}: ΔSharpe {self.diff:+.2f}, too few bars to test "
                    f"(fewer than {MIN_BARS}), p 1")
        level = round(100 * (1 - 2 * self.alpha))
        return (f"vs {self.benchmark.replace('_', '-')}: ΔSharpe {self.diff:+.2f} "
                f"[{level}% CI {self.low:+.2f}, {self.high:+.2f}], p {self.p_value:.3f}")


def _sharpes(returns: np.ndarray, per_year: float) -> np.ndarray:
    """Annualised Sharpe of each row (0 for a flat row, as :func:`trainers.metrics.sharpe`)."""
    std = returns.std(axis=-1, ddof=1)
    flat = std < 1e-12
    return np.where(flat, 0.0, returns.mean(axis=-1) / np.where(flat, 1.0, std) * math.sqrt(per_year))


def block_length(diff: np.ndarray) -> float:
    """Politis & White's stationary-bootstrap block length for ``diff`` (1 for a constant
    or too-short series), within [1, bars / 4]."""
    from arch.bootstrap import optimal_block_length

    if diff.size < 8 or float(diff.std()) < 1e-15:
        return 1.0
    chosen = float(optimal_block_length(diff)["stationary"].iloc[0])
    return float(min(max(chosen, 1.0), diff.size / 4)) if math.isfinite(chosen) else 1.0


def paired_test(model: np.ndarray, benchmark: np.ndarray, name: str, *, per_year: float, risk_free: float = 0.0,
                margin: float = 0.0, alpha: float = 0.05, resamples: int = 2000, seed: int = 0) -> Evidence:
    """Test whether ``model``'s Sharpe beats ``benchmark``'s by more than ``margin``.

    Both are per-bar simple returns of the same bars, in order. The same ``seed`` and
    returns give the same verdict, bit for bit.
    """
    from arch.bootstrap import StationaryBootstrap

    model, benchmark = (np.asarray(x, dtype=np.float64) for x in (model, benchmark))
    if model.shape != benchmark.shape or model.ndim != 1:
        raise ValueError(f"paired returns need the same bars: {model.shape} against {benchmark.shape}")
    excess = np.stack([model, benchmark]) - risk_free / per_year
    bars = model.size
    if bars < MIN_BARS:
        diff = float(np.subtract(*_sharpes(excess, per_year))) if bars > 1 else 0.0
        return Evidence(name, bars, diff, -math.inf, math.inf, 1.0, math.inf, margin, alpha)
    observed = float(np.subtract(*_sharpes(excess, per_year)))
    bootstrap = StationaryBootstrap(block_length(model - benchmark), model, seed=seed)
    index = np.stack([bootstrap.update_indices() for _ in range(resamples)])
    resampled = _sharpes(excess[:, index], per_year)  # (2, resamples)
    centred = resampled[0] - resampled[1] - observed  # the estimate's error, as the bootstrap sees it
    p_value = (1 + int(np.count_nonzero(centred >= observed - margin - 1e-12))) / (resamples + 1)
    upper_err, lower_err = np.quantile(centred, [1.0 - alpha, alpha])
    return Evidence(name, bars, observed, observed - float(upper_err), observed - float(lower_err), p_value,
                    float(centred.std(ddof=1)), margin, alpha)


def binding(evidence: Sequence[Evidence]) -> Evidence:
    """The test that decides: the largest p-value (every benchmark must be beaten)."""
    return max(evidence, key=lambda e: e.p_value)


def evidence_line(evidence: Sequence[Evidence]) -> str:
    """One line: each benchmark's difference, interval and p, the verdict's arithmetic and,
    when it fails, the bars still needed (``vs buy-and-hold: ΔSharpe +0.88 [90% CI +0.19,
    +1.62], p 0.025 < α 0.05 over 250 bars``)."""
    worst = binding(evidence)
    relation = "<" if worst.passed else "≥"
    said = "; ".join(e.summary() for e in evidence)
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
    column per arm, the same bars), each a paired test on their per-bar returns."""
    returns = curve.astype(float).pct_change().iloc[1:]
    return tuple(paired_test(returns[model].to_numpy(), returns[name].to_numpy(), name, per_year=per_year,
                             risk_free=risk_free, margin=registry.gate_margin, alpha=registry.gate_alpha,
                             resamples=registry.gate_resamples, seed=registry.gate_seed)
                 for name in curve.columns if name != model)
