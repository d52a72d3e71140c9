"""Input drift: how far the live features have moved from those a model trained on (docs/operations.md, the watch).

One statistic, the **population stability index** per feature: the reference window's values
(every stock's, pooled) are cut into ten bins at their deciles, and the live window's share
``q_i`` of each bin is set against the reference's ``p_i`` (a tenth each):
``PSI = Σ (q_i − p_i) · ln(q_i / p_i)``, with empty bins floored at 1e-4 so the logarithm
stays finite. It is 0 for the same distribution and grows with the shift; by the credit
industry's convention (Siddiqi 2006), under 0.1 is stable, 0.1-0.25 a moderate shift and over
0.25 a large one. It is only a warning: it is not calibrated as the decay test is (its
false-alarm rate on this market is not measured), so it never acts on its own.
"""

from __future__ import annotations

import numpy as np

BINS = 10
FLOOR = 1e-4
"""An empty bin's share, so that ``ln(q / p)`` stays finite."""
LARGE = 0.25
"""A PSI above this is a large shift (the convention above): the warning's threshold."""


def psi(reference: np.ndarray, live: np.ndarray, bins: int = BINS) -> float:
    """The population stability index of ``live`` against ``reference`` (finite values of each,
    any shape); NaN when either has fewer finite values than bins, so no shift is claimed
    from nothing."""
    ref, now = (np.asarray(x, dtype=np.float64).ravel() for x in (reference, live))
    ref, now = ref[np.isfinite(ref)], now[np.isfinite(now)]
    if ref.size < bins or now.size < bins:
        return float("nan")
    edges = np.unique(np.quantile(ref, np.linspace(0.0, 1.0, bins + 1)[1:-1]))
    p = np.bincount(np.searchsorted(edges, ref, side="right"), minlength=edges.size + 1) / ref.size
    q = np.bincount(np.searchsorted(edges, now, side="right"), minlength=edges.size + 1) / now.size
    p, q = np.maximum(p, FLOOR), np.maximum(q, FLOOR)
    return float(np.sum((q - p) * np.log(q / p)))


def feature_drift(features: np.ndarray, names: list[str], reference: slice, live: slice) -> dict[str, float]:
    """PSI per feature of ``features`` ``[T, n, k]`` between two windows of bars."""
    return {name: psi(features[reference, :, j], features[live, :, j]) for j, name in enumerate(names)}


def drift_line(drift: dict[str, float], bars: int) -> str:
    """One line: each feature's PSI, and a warning naming those above :data:`LARGE`."""
    shown = ", ".join(f"{name} {value:.2f}" for name, value in drift.items())
    large = [name for name, value in drift.items() if value > LARGE]
    verdict = f"large shift in {', '.join(large)} (PSI > {LARGE})" if large else f"no feature above PSI {LARGE}"
    return f"input drift over {bars} live bars against the training window: {verdict}; PSI {shown}"
