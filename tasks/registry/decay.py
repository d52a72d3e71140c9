"""Watching a champion live: a sequential test of its paper record for decay (docs/operations.md, the watch).

A champion is judged once by the gate, on its test window. Afterwards its paper record grows
bar by bar, and every bar is another look: a fixed-α test run at each one would sooner or
later fire on a healthy champion (docs/results.md, the live watch). The watch is a one-sided **CUSUM**
(Page 1954) on the champion's active return over buy-and-hold, ``a_t = r_champion − r_hold``,
against two references:

- **decay**: what its gate promised, less that estimate's own uncertainty and a stated
  tolerance: ``μ_d = μ̂ − z·se(μ̂) − tolerance`` (per bar, from the gate window's active
  returns, :class:`Promise`). H0: the champion still earns at least ``μ_d``. An alarm asks for a
  retrain;
- **severe**: buy-and-hold itself, ``μ_s = 0``. H0: the champion earns at least what holding the
  market does. An alarm moves the alias back.

Each statistic is ``S_t = max(0, S_{t−1} + (μ − a_t)/σ − k)``: it grows while the record runs
below the reference and is reset by bars above it, so it answers "has the mean dropped since
some bar?" whatever bar the drop began at, which a running test of the whole record since the
promotion does slowly. ``σ`` is the active return's long-run standard deviation (its standard
error times √bars, prewhitened as the gate's is), so persistence does not make the
statistic drift up by itself; ``k`` is half the shift each test is to find fastest, in ``σ``
units: for decay, from the promise's floor to an edge gone (a record no better than
buy-and-hold, ``a = 0``); for severe decay, from buy-and-hold to the promised edge turned over
(``−μ̂``). A promise whose floor is at or below buy-and-hold leaves the decay test the
smallest shift (:data:`MIN_SHIFT`): it cannot tell decay from noise, and the severe test is
the one that binds. The threshold ``h`` is set so that a record whose mean sits exactly at the
reference raises a false alarm once in ``years`` on average: Siegmund's (1985) approximation of
the average run length, ``ARL ≈ (e^{2kb} − 2kb − 1)/(2k²)`` with ``b = h + 1.166``, solved for
``h``. How often it does on simulated and market series, and how late it finds a planted change,
is measured in ``benchmarks/evidence/decay.py``.

Like the gate, the watch fails closed: a NaN or infinite return, too few bars or a promise
that cannot be read give a :class:`Watch` with a ``fault`` that names it, which never raises
an alarm and says why in its line.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.stats import norm

from tasks.registry.evidence import FLAT, MIN_BARS, data_fault, persistent_se
from tasks.registry.tags import PROMISE_BARS, PROMISE_MEAN, PROMISE_SE

HOLD = "buy_and_hold"
"""The benchmark's column in a backtest's curve."""

OVERSHOOT = 1.166
"""Siegmund's correction for the CUSUM's overshoot of its boundary, in σ units."""
MIN_SHIFT = 0.01
"""The smallest shift (in σ units per bar) a statistic is tuned for, when the promise is about nil."""


@dataclass(frozen=True)
class Promise:
    """What a champion's gate window showed of its active return over buy-and-hold, per bar."""

    mean: float
    se: float
    """Standard error of ``mean`` (prewhitened, as the gate's)."""
    bars: int

    @classmethod
    def of(cls, model: np.ndarray, benchmark: np.ndarray) -> Promise:
        """From the gate window's per-bar simple returns of the champion and buy-and-hold."""
        active = np.asarray(model, dtype=np.float64) - np.asarray(benchmark, dtype=np.float64)
        return cls(float(active.mean()), float(persistent_se(active - active.mean())), int(active.size))

    @classmethod
    def of_curve(cls, curve: pd.DataFrame, arm: str) -> Promise:
        """From a backtest's curve (account values per bar, one column per arm): ``arm``
        against ``buy_and_hold``, as the gate compared them. A value that is not finite or
        not positive, or a curve without either column, gives a promise that cannot be read
        (its watch fails closed)."""
        if arm not in curve.columns or HOLD not in curve.columns:
            return cls(math.nan, math.nan, max(len(curve) - 1, 0))
        values = curve[[arm, HOLD]].astype(float)
        if data_fault({c: values[c].to_numpy() for c in values.columns}, "account value") is not None:
            return cls(math.nan, math.nan, len(values) - 1)
        returns = values.pct_change().iloc[1:]
        return cls.of(returns[arm].to_numpy(), returns[HOLD].to_numpy())

    @classmethod
    def from_tags(cls, tags: Mapping[str, str]) -> Promise:
        """From a version's tags (:meth:`tags`); a version registered without them has a
        promise that cannot be read, so its watch fails closed and says so."""
        try:
            return cls(float(tags[PROMISE_MEAN]), float(tags[PROMISE_SE]), int(tags[PROMISE_BARS]))
        except (KeyError, ValueError):
            return cls(math.nan, math.nan, 0)

    def tags(self) -> dict[str, str]:
        """The version tags the watch reads it back from (``repr``: exact floats)."""
        return {PROMISE_MEAN: repr(self.mean), PROMISE_SE: repr(self.se), PROMISE_BARS: str(self.bars)}

    @property
    def spread(self) -> float:
        """The active return's long-run standard deviation per bar."""
        return self.se * math.sqrt(self.bars)

    def fault(self) -> str | None:
        """Why this promise cannot be watched against, or None."""
        if not all(math.isfinite(x) for x in (self.mean, self.se)) or self.bars < MIN_BARS:
            return f"its promise cannot be read (mean {self.mean:g}, se {self.se:g} over {self.bars} bars)"
        if self.spread < FLAT:
            return "its promise has no spread: the champion and buy-and-hold returned the same on every bar"
        return None


def threshold(slack: float, bars: float) -> float:
    """The CUSUM threshold ``h`` whose average run length at the reference is ``bars``
    (Siegmund's approximation, solved by bisection; ``slack`` is ``k``)."""
    def arl(b: float) -> float:
        x = 2.0 * slack * b
        if x < 1e-9:
            return b * b
        if x > 700.0:  # e^x would overflow a float (a promise of hundreds of σ a bar): its logarithm instead
            return math.exp(min(x - math.log(2.0) - 2.0 * math.log(slack), 709.0))
        return (math.expm1(x) - x) / (2.0 * slack * slack)

    lo, hi = 0.0, 1.0
    while arl(hi) < bars:
        hi *= 2.0
    for _ in range(100):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if arl(mid) < bars else (lo, mid)
    return max(hi - OVERSHOOT, 0.0)


def cusum(active: np.ndarray, reference: float, spread: float, slack: float) -> np.ndarray:
    """``S_t`` after each bar of ``active``: ``max(0, S_{t−1} + (reference − a_t)/spread − slack)``,
    from ``S_{−1} = 0``. The recursion's solution is the walk of the increments less its lowest
    point so far (Lindley), which numpy computes without a loop over the bars."""
    walk = np.concatenate(([0.0], np.cumsum((reference - active) / spread - slack)))
    return (walk - np.minimum.accumulate(walk))[1:]


@dataclass(frozen=True)
class Test:
    """One reference's CUSUM over the record."""

    name: str
    reference: float
    statistic: float
    threshold: float
    alarm: int | None
    """The record bar (0-based) at which the statistic first crossed the threshold, or None."""


@dataclass(frozen=True)
class Watch:
    """One look at a champion's live record against its promise and against buy-and-hold."""

    bars: int
    decay: Test | None
    severe: Test | None
    fault: str | None = None

    @property
    def decayed(self) -> bool:
        return self.fault is None and self.decay is not None and self.decay.alarm is not None

    @property
    def collapsed(self) -> bool:
        """Severe decay: the record is significantly below buy-and-hold's."""
        return self.fault is None and self.severe is not None and self.severe.alarm is not None

    @property
    def line(self) -> str:
        """The watch in one line, as the gate's evidence line is."""
        if self.fault is not None:
            return f"watch over {self.bars} bars: no test, {self.fault}"
        said = "; ".join(f"vs {t.name}: CUSUM {t.statistic:.1f} / {t.threshold:.1f}"
                         + (f", alarm at bar {t.alarm}" if t.alarm is not None else "")
                         for t in (self.decay, self.severe) if t is not None)
        verdict = "severe decay" if self.collapsed else "decay" if self.decayed else "holds"
        return f"watch over {self.bars} bars: {verdict} ({said})"


def watch(model: np.ndarray, benchmark: np.ndarray, promise: Promise, *, tolerance: float, years: float,
          per_year: float, alpha: float = 0.05) -> Watch:
    """Test the live record (per-bar simple returns of the champion and buy-and-hold on the same
    bars since its promotion) for decay against ``promise``. ``tolerance`` is an annualised
    information ratio the champion may fall short of its promise by; ``years`` the mean time
    between false alarms at each reference; ``alpha`` the one-sided level of the promise's
    lower bound."""
    model, benchmark = (np.asarray(x, dtype=np.float64) for x in (model, benchmark))
    if model.shape != benchmark.shape or model.ndim != 1:
        raise ValueError(f"the watch needs both arms' returns on the same bars: {model.shape} "
                         f"against {benchmark.shape}")
    bars = model.size
    fault = (data_fault({"champion": model, "buy-and-hold": benchmark}, "return") or promise.fault()
             or (f"only {bars} bars since the promotion (the watch needs at least {MIN_BARS})"
                 if bars < MIN_BARS else None))
    if fault is not None:
        return Watch(bars, None, None, fault)
    active, spread = model - benchmark, promise.spread
    floor = promise.mean - norm.ppf(1.0 - alpha) * promise.se - tolerance * spread / math.sqrt(per_year)
    tests = []  # each reference and the record it is tuned to find fastest: the edge gone, the edge turned over
    for name, reference, target in (("its promise", floor, 0.0), ("buy-and-hold", 0.0, -abs(promise.mean))):
        slack = max((reference - target) / spread, MIN_SHIFT) / 2.0
        h = threshold(slack, years * per_year)
        path = cusum(active, reference, spread, slack)
        crossed = np.flatnonzero(path > h)
        tests.append(Test(name, reference, float(path[-1]), h, int(crossed[0]) if crossed.size else None))
    return Watch(bars, tests[0], tests[1])
