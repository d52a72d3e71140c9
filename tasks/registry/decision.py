"""The champion gate's decision rule: promote, shadow or refuse (docs/operations.md, the gate).

The gate decides on evidence, not on point estimates: a model is promoted only when its
paired Sharpe difference beats every benchmark with a one-sided p-value below
``registry.gate_alpha`` (:mod:`tasks.registry.evidence`). A model that is not worse than
its benchmarks on its window (the weak screen) but has not shown a significant edge trades
in **shadow**: it keeps the ``shadow`` alias, trades a paper account of its own, and its
record over the bars it trades live is tested again as it grows. Evidence with a fault (no
test was possible: a NaN return, a non-positive account, too few bars) fails the screen, so
the gate fails closed: a faulted new model is refused and a faulted record retired.

Repeated looks are what make a nightly gate promote on noise, so a cycle never promotes the
challenger it has just trained: it can only enter shadow, when the seat is free. A shadow's
record is tested once every ``ct.shadow_bars`` bars it has traded (promoted, kept, or
retired when it is behind or has reached ``ct.shadow_max_bars``), and only one shadow
trades at a time, so the tests are at least ``ct.shadow_bars`` bars apart whoever the
shadow is: a year of daily bars holds at most ``252 / ct.shadow_bars`` tests, and one
shadow at most ``ceil(shadow_max_bars / shadow_bars)``. At ``gate_alpha`` each, the expected
number of false promotions a year is at most ``gate_alpha × 252 / shadow_bars`` (a union
bound, whatever the tests' correlation); the maximum age changes who holds the seat, not
how often it is tested. The record leaves out the window that chose the shadow: bars that
selected a model would flatter it (the winner's curse).

The rule is pure: it reads :class:`~tasks.registry.evidence.Evidence` and returns a
:class:`Decision`, so it can be tested on hand-made numbers. The gate task
(:mod:`tasks.registry.gate`) computes the evidence and writes the report; the shadow's
seat and the aliases are moved by :func:`tasks.registry.shadow.settle` and
:mod:`tasks.registry.aliases`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from tasks.registry.evidence import Evidence, evidence_line

Action = Literal["promote", "shadow", "refuse"]
Outcome = Literal["promote", "retire", "keep"]


def screened(evidence: Sequence[Evidence]) -> bool:
    """The weak screen: on the point estimate, at least ``gate_margin`` above every benchmark
    (at margin 0: not worse than any), and no test faulted: evidence that could
    not be tested is no evidence, so a fault fails closed (docs/operations.md, the gate)."""
    return all(e.fault is None and e.diff >= e.margin for e in evidence)


@dataclass(frozen=True)
class ShadowFate:
    """What a cycle did with the standing shadow."""

    version: str
    outcome: Outcome
    record: tuple[Evidence, ...]
    """Its record (the bars it traded since entering shadow) against each benchmark."""
    tested: int
    """Record bars at its latest test (0: not tested yet)."""
    why: str = ""
    """Why it was retired when its evidence alone does not say (its maximum age)."""

    @property
    def line(self) -> str:
        said = {"promote": "promoted to champion", "retire": "retired", "keep": "stays in shadow"}[self.outcome]
        if self.why:
            said += f" ({self.why})"
        if not self.record:
            return f"shadow version {self.version} {said}: no bar of its record has come yet"
        return f"shadow version {self.version} {said}: {evidence_line(self.record)}"


@dataclass(frozen=True)
class Decision:
    """The gate's decision on a new model and, in a cycle, on the standing shadow."""

    action: Action
    """For the new model: the pipeline's agent, or a cycle's challenger (never ``promote``)."""
    evidence: tuple[Evidence, ...]
    """The new model on its window, against each benchmark."""
    shadow: ShadowFate | None = None
    held: str = ""
    """Why a new model that passed can only enter shadow (the pipeline's champion had seen
    test bars: no clean window to promote on)."""

    @property
    def line(self) -> str:
        """The verdict in one line: the version description's first line, the run summary's
        gate line and the ``gate_reason`` tag."""
        said = {"promote": "promoted", "shadow": "enters shadow", "refuse": "refused"}[self.action]
        if self.held and self.action == "shadow":
            said += f" ({self.held})"
        elif self.action == "shadow" and all(e.passed for e in self.evidence):
            said += " (promoted on the record it trades, not on the window that chose it)"
        head = f"{said}: {evidence_line(self.evidence)}"
        return head if self.shadow is None else f"{self.shadow.line} | new model {head}"

    @property
    def promoted(self) -> str | None:
        """``"new"`` when the new model is promoted, the shadow's version when it is, else None."""
        if self.action == "promote":
            return "new"
        return self.shadow.version if self.shadow and self.shadow.outcome == "promote" else None


def decide(evidence: Sequence[Evidence], held: str = "") -> Decision:
    """The pipeline's gate on its test window: promote when every benchmark is beaten
    significantly; shadow when it is not worse than any on the point estimate; else refuse.

    ``held`` says why the window is not clean enough to promote on (the champion had seen
    some of its bars): a model that passes then only enters shadow, and the line says why.
    """
    evidence = tuple(evidence)
    if all(e.passed for e in evidence) and not held:
        return Decision("promote", evidence)
    return Decision("shadow" if screened(evidence) else "refuse", evidence, held=held)


def decide_cycle(window: Sequence[Evidence], standing: tuple[str, int] | None,
                 record: Sequence[Evidence] | None, every: int, max_bars: int | None = None) -> Decision:
    """A cycle's gate. ``window`` is the challenger's evidence on the evaluation window;
    ``standing`` the shadow's version and the record length at its latest test (None
    without a shadow), ``record`` its record's evidence (None or empty: no bar of its record
    has come yet); ``every`` is ``ct.shadow_bars`` and ``max_bars`` ``ct.shadow_max_bars``.

    The shadow is tested (a look) when its record has grown by ``every`` bars since its
    latest test: promoted when it passes against every benchmark, retired when it fails the
    screen (behind one, or a faulted test) or its record has reached ``max_bars``, else kept.
    Tests stay at least ``every`` record bars apart, so the looks a year are bounded as the
    module says; the maximum age only frees the seat of a shadow that never shows an edge. A
    shadow without a record yet keeps its seat untested. The challenger enters shadow when
    it passes the screen and the seat is free: no shadow stands, or this cycle promoted or
    retired it. A standing shadow is not displaced by a newer challenger between its tests:
    on the development seeds, replacing it whenever a challenger's window looked stronger
    kept every shadow too young to be tested (docs/results.md, the gate).
    """
    window = tuple(window)
    fate = None
    if standing is not None:
        version, tested = standing
        record = tuple(record or ())
        outcome: Outcome = "keep"
        why = ""
        if record and record[0].bars - tested >= every:
            tested = record[0].bars
            if all(e.passed for e in record):
                outcome = "promote"
            elif not screened(record):
                outcome = "retire"
            elif max_bars is not None and tested >= max_bars:
                outcome, why = "retire", f"max age: {tested} record bars reach ct.shadow_max_bars {max_bars}"
        fate = ShadowFate(version, outcome, record, tested, why)
    if not screened(window) or (fate is not None and fate.outcome == "keep"):
        return Decision("refuse", window, fate)
    return Decision("shadow", window, fate)
