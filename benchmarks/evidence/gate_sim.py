"""A year of nightly continuous-training gates, simulated on rule portfolios (``benchmarks/evidence/gate.py ct``).

The real cycle trains a challenger every night (minutes each), so a year of nights cannot
be run over many seeds. This is the fast equivalent: each night's challenger is a rule drawn
from a pool (seeded by the seed and the night), and the gate is the real one,
:func:`tasks.registry.evidence.against` and :func:`tasks.registry.decision.decide_cycle` with
params.yaml's ``registry`` and ``ct``, on the same windows as the cycle's: the challenger on
the ``ct.eval_bars`` bars ending at the night, the standing shadow on its record from its
``since`` bar to the night, each against the champion (if any) and buy-and-hold. The decision
is carried out as :func:`tasks.registry.shadow.settle` does (docs/operations.md, the gate).

Each rule's account values are computed once over the whole period (the windows' history
and the year), so a window's arm is a slice of its curve rescaled to start at 1: it **ignores
the entry cost** a freshly started model would pay at each window's start. Buy-and-hold is
bought afresh at each window's start, as the cycle's is, without that entry cost either.
The same arms on the same bars give the same evidence (the bootstrap's seed is fixed), so
the tests are computed once per seed and shared by the gate variants.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pandas as pd

from tasks.config import RegistryParams
from tasks.registry.decision import decide_cycle
from tasks.registry.evidence import MIN_BARS, Evidence, against
from trainers.common.metrics import sharpe

NIGHTS = 252
"""Nights of a simulated year: one continuous-training cycle a trading day."""
Record = Literal["shipped", "included"]
RECORDS: tuple[Record, ...] = ("shipped", "included")
"""shipped: the shadow's record starts after the window that chose it (``since`` = the night);
included: it starts at that window's first bar (``since`` = the night − ``eval_bars``), the
winner's curse the shipped design avoids; settle's ``tested = 0`` stands in both."""


@dataclass(frozen=True)
class Arms:
    """The pool's rules and buy-and-hold over the simulated period (bars 0..``bars``)."""

    values: np.ndarray
    """``[rules, bars + 1]`` account value of each rule at every close of the period."""
    names: tuple[str, ...]
    hold: Callable[[int], np.ndarray]
    """Buy-and-hold bought at close ``lo``: its account values at closes ``lo..bars``."""
    per_year: float
    risk_free: float = 0.0

    @property
    def bars(self) -> int:
        return self.values.shape[1] - 1

    def rule(self, rule: int, lo: int, hi: int) -> np.ndarray:
        """Rule ``rule``'s values at closes ``lo..hi``, rescaled to start at 1."""
        values = self.values[rule, lo : hi + 1]
        return values / values[0]

    def market(self, lo: int, hi: int) -> np.ndarray:
        """Buy-and-hold bought at close ``lo``: its values at closes ``lo..hi``, from 1."""
        values = self.hold(lo)[: hi - lo + 1]
        return values / values[0]

    def sharpe(self, values: np.ndarray) -> float:
        return sharpe(values, self.per_year, self.risk_free)

    def edge(self, rule: int, lo: int) -> float | None:
        """Rule ``rule``'s Sharpe minus buy-and-hold's from close ``lo`` to the period's end
        (None with fewer than :data:`~tasks.registry.evidence.MIN_BARS` bars left)."""
        if self.bars - lo < MIN_BARS:
            return None
        return self.sharpe(self.rule(rule, lo, self.bars)) - self.sharpe(self.market(lo, self.bars))


class Judge:
    """:func:`~tasks.registry.evidence.against` on slices of the arms, each pair once."""

    def __init__(self, arms: Arms | Any, registry: RegistryParams) -> None:
        """``arms``: :class:`Arms`, or any object with its ``bars``, ``per_year``,
        ``risk_free``, ``rule`` and ``market`` (the near-twins of benchmarks/evidence/gate_twins_sim.py)."""
        self.arms, self.registry = arms, registry
        self.cache: dict[tuple[int, int | None, int, int], Evidence] = {}

    def pair(self, rule: int, bench: int | None, lo: int, hi: int) -> Evidence:
        """``rule`` against the rule ``bench`` as champion, or buy-and-hold (None), on bars (lo, hi]."""
        key = (rule, bench, lo, hi)
        if key not in self.cache:
            name = "buy_and_hold" if bench is None else "champion"
            other = self.arms.market(lo, hi) if bench is None else self.arms.rule(bench, lo, hi)
            curve = pd.DataFrame({"model": self.arms.rule(rule, lo, hi), name: other})
            self.cache[key] = against(curve, "model", self.registry, self.arms.per_year, self.arms.risk_free)[0]
        return self.cache[key]

    def evidence(self, rule: int, champion: int | None, lo: int, hi: int) -> tuple[Evidence, ...]:
        """As the cycle's curve orders its columns: the champion (if any), then buy-and-hold."""
        benches = ((champion,) if champion is not None else ()) + (None,)
        return tuple(self.pair(rule, bench, lo, hi) for bench in benches)


@dataclass(frozen=True)
class Variant:
    """A gate: the shipped shadow gate (``every`` = ``ct.shadow_bars``, the record as
    ``record`` says) or, with ``every`` None, today's point gate."""

    every: int | None
    record: Record = "shipped"

    @property
    def name(self) -> str:
        return "point" if self.every is None else f"{self.record} {self.every}"


@dataclass(frozen=True)
class Shadow:
    rule: int
    version: int
    """The night it entered shadow (each night registers one version)."""
    since: int
    tested: int = 0


@dataclass
class Year:
    """What one gate did over the simulated year."""

    promotions: list[tuple[int, int]] = field(default_factory=list)
    """(night, rule) of each promotion, nights counted from 0."""
    shadow_moves: int = 0
    """Nights on which the shadow alias changed hands (entered, replaced or removed)."""
    tests: int = 0
    """Tests of a shadow's record (the looks that can promote)."""
    entered: int = 0
    """Challengers that entered shadow."""


def draw_challengers(seed: int, nights: int, pool: int) -> list[int]:
    """The rule each night's challenger is, drawn from ``pool`` rules, seeded by seed and night."""
    return [int(np.random.default_rng([seed, night]).integers(pool)) for night in range(nights)]


def point_gate(arms: Arms, challengers: Sequence[int], eval_bars: int) -> Year:
    """Today's point gate every night: promote the challenger when its window Sharpe is above
    the champion's and buy-and-hold's (margin 0)."""
    year, champion, first = Year(), None, arms.bars - len(challengers) + 1
    for night, rule in enumerate(challengers):
        lo, t = first + night - eval_bars, first + night
        mine = arms.sharpe(arms.rule(rule, lo, t))
        beaten = [arms.sharpe(arms.market(lo, t))]
        if champion is not None:
            beaten.append(arms.sharpe(arms.rule(champion, lo, t)))
        if all(mine > other for other in beaten):
            champion = rule
            year.promotions.append((night, rule))
    return year


def shadow_gate(judge: Judge, challengers: Sequence[int], eval_bars: int, every: int,
                record: Record = "shipped", *, champion: int | None = None, step: int = 1,
                max_bars: int | None = None, lazy: bool = False) -> Year:
    """The cycle's gate every night, carried out as ``settle`` does; the year starts with the
    rule ``champion`` as champion (None: none) and no shadow. Nights are ``step`` bars apart
    (390 on minute bars), the last on the arms' last bar; ``max_bars`` is
    ``ct.shadow_max_bars``. ``lazy``: a shadow's record is tested only on the nights its test
    is due (``decide_cycle`` keeps it untested otherwise, whatever its evidence, so the
    decisions are the same), sparing the bootstrap of long records on minute bars."""
    arms = judge.arms
    year, shadow, first = Year(), None, arms.bars - (len(challengers) - 1) * step
    for night, rule in enumerate(challengers):
        t = first + night * step
        window = judge.evidence(rule, champion, t - eval_bars, t)
        standing = kept = None
        if shadow is not None:
            standing = (str(shadow.version), shadow.tested)
            due = not lazy or t - shadow.since - shadow.tested >= every
            kept = judge.evidence(shadow.rule, champion, shadow.since, t) if due else ()
        decision = decide_cycle(window, standing, kept, every, max_bars)
        holder = shadow.version if shadow is not None else None
        fate = decision.shadow
        if fate is not None and shadow is not None:
            year.tests += fate.tested != shadow.tested
            if fate.outcome == "promote":
                champion, shadow = shadow.rule, None
                year.promotions.append((night, champion))
            elif fate.outcome == "retire":
                shadow = None
            else:
                shadow = Shadow(shadow.rule, shadow.version, shadow.since, fate.tested)
        if decision.action == "promote":  # a cycle never promotes its own challenger: kept for the bookkeeping
            champion = rule
            year.promotions.append((night, rule))
        elif decision.action == "shadow":
            shadow = Shadow(rule, night, t if record == "shipped" else t - eval_bars)
            year.entered += 1
        year.shadow_moves += (shadow.version if shadow is not None else None) != holder
    return year


def run_gate(judge: Judge, challengers: Sequence[int], eval_bars: int, variant: Variant) -> Year:
    if variant.every is None:
        return point_gate(judge.arms, challengers, eval_bars)
    return shadow_gate(judge, challengers, eval_bars, variant.every, variant.record)


def summary(arms: Arms, year: Year, nights: int) -> dict[str, object]:
    """One year as the JSON keeps it: each promotion with the promoted rule's out-of-sample
    edge (its Sharpe minus buy-and-hold's from the promotion's night to the year's end)."""
    first = arms.bars - nights + 1
    return {"promotions": [{"night": n, "rule": arms.names[r], "edge": arms.edge(r, first + n)}
                           for n, r in year.promotions],
            "shadow_moves": year.shadow_moves, "tests": year.tests, "entered": year.entered}


def union_bound(alpha: float, every: int, nights: int = 252) -> float:
    """The gate module's bound on the expected false promotions a year: α × nights / ``every``
    (:mod:`tasks.registry.gate`; it holds for the shipped record only)."""
    return alpha * nights / every
