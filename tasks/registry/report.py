"""The gate report: the arms' metrics side by side in markdown, and a quantstats tearsheet.

A continuous-training cycle's arms (challenger, champion and buy-and-hold) are backtested
on the same evaluation window, so their metrics (the six of :data:`trainers.common.metrics.METRICS`,
computed by :func:`trainers.common.metrics.performance`) can be read side by side in one markdown
table, the gate's verdict under it (:func:`gate_table`; the gate task in
:mod:`tasks.registry.gate` writes it). The tearsheet is a ``quantstats`` HTML report of the
challenger's daily returns against a benchmark arm (the champion, or buy-and-hold for a
first model); it never names a ticker, so quantstats never downloads anything, and the one
remote link of its template (a favicon) is removed (docs/operations.md, the CT cycle).
"""

from __future__ import annotations

import contextlib
import functools
import html
import io
import logging
import os
import re
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pandas as pd

from trainers.common.metrics import METRICS, performance

PERCENT = frozenset({"cumulative_return", "annual_return", "annual_volatility", "max_drawdown"})
"""Metrics that are fractions (0.05 is 5%): shown as percents with one decimal."""
MIN_BARS = 3
"""Fewer daily values than this (two returns) get a plain page instead of a tearsheet."""
_FAVICON = re.compile(r'<link rel="shortcut icon"[^>]*>\s*')
_SVG_DATE = re.compile(r"<dc:date>[^<]*</dc:date>")  # the figures' timestamps: same input, same bytes



@dataclass(frozen=True)
class Arm:
    """One curve of the comparison: its account value per bar and its metrics.

    ``equity`` has a tz-naive DatetimeIndex; ``metrics`` has the keys of ``METRICS``.
    """

    name: str
    equity: pd.Series
    metrics: dict[str, float]

    @classmethod
    def of(cls, name: str, equity: pd.Series, per_year: float = 252.0, risk_free: float = 0.0) -> Arm:
        """An arm whose metrics are :func:`trainers.common.metrics.performance` of ``equity``."""
        return cls(name, equity, performance(equity.to_numpy(dtype=float), per_year, risk_free))

    def daily_returns(self) -> pd.Series:
        """Simple returns between the last account values of consecutive dates."""
        index = self.equity.index
        if not isinstance(index, pd.DatetimeIndex) or index.tz is not None:
            raise ValueError(f"{self.name}: the equity needs a tz-naive DatetimeIndex")
        daily = self.equity.groupby(index.normalize()).last().astype(float)
        return daily.pct_change().dropna().rename(self.name)


def _cell(metric: str, value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value * 100:.1f}" if metric in PERCENT else f"{value:.3f}"


def _label(metric: str) -> str:
    label = f"{metric} (%)" if metric in PERCENT else metric
    return f"**{label}** (gate)" if metric == "sharpe" else label


def metrics_table(arms: list[Arm]) -> str:
    """The markdown table: one row per metric of ``METRICS``, one column per arm."""
    lines = ["| metric | " + " | ".join(arm.name for arm in arms) + " |",
             "|---|" + "---:|" * len(arms)]
    for metric in METRICS:
        cells = (_cell(metric, arm.metrics.get(metric)) for arm in arms)
        lines.append(f"| {_label(metric)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def gate_table(arms: list[Arm], line: str, window: tuple[str, str], champion_seen_bars: int | None) -> str:
    """The gate report in markdown: the arms' metrics side by side and the verdict ``line``.

    ``arms`` is ``[challenger, champion, buy-and-hold]``, or ``[challenger, buy-and-hold]``
    when there is no champion yet (the first model), or a shadow's record
    (``[shadow, ...]``). ``window`` is the first and last date of the window; its bar
    count is the arms' number of returns (each equity curve starts with the account's value
    at the close before the window). ``champion_seen_bars`` is how many of those bars the
    champion was trained on: a positive count is said aloud, since it tilts the comparison
    towards the champion (it is ignored when there is no champion).
    """
    if len(arms) not in (2, 3):
        raise ValueError(f"gate_table needs 2 or 3 arms (challenger, [champion,] buy-and-hold), got {len(arms)}")
    bars = len(arms[0].equity) - 1
    if any(len(arm.equity) != bars + 1 for arm in arms):
        raise ValueError("the arms were not evaluated on the same window: their equity lengths differ")
    lines = [f"## Gate report: {' vs '.join(arm.name for arm in arms)}", "",
             f"Window: {window[0]} → {window[1]} ({bars} bars)", "",
             metrics_table(arms), "", f"Gate: {line}"]
    if len(arms) == 2:
        lines += ["", "No champion yet: gated against buy-and-hold only."]
    elif champion_seen_bars is not None and champion_seen_bars > 0:
        if champion_seen_bars > bars:
            raise ValueError(f"the champion cannot have seen {champion_seen_bars} of {bars} bars")
        lines += ["", (f"The champion's training data reached into this window: it had seen {champion_seen_bars} "
                       f"of its {bars} bars, so the comparison favours the champion (conservative against the "
                       "challenger).")]
    return "\n".join(lines) + "\n"


@functools.cache
def _quantstats() -> tuple[ModuleType, dict[str, Any]]:
    """quantstats, imported without letting its import-time styling leak into the process.

    Importing it sets matplotlib's font to Arial and a seaborn theme, globally; this keeps
    that style aside (returned) and applies it only while a tearsheet is drawn.
    """
    import matplotlib

    matplotlib.use("Agg")  # no display: figures are only saved
    with matplotlib.rc_context():
        import quantstats

        style = {key: value for key, value in matplotlib.rcParams.items() if key != "backend"}
    style["svg.hashsalt"] = "podracer"  # stable ids inside the SVG figures
    return quantstats, style


@contextlib.contextmanager
def _quiet(style: dict[str, Any]) -> Iterator[None]:
    """quantstats' style, and none of its prints, warnings or 'font not found' log lines."""
    import matplotlib
    import matplotlib.pyplot as plt

    fonts = logging.getLogger("matplotlib.font_manager")
    level, figures = fonts.level, set(plt.get_fignums())
    fonts.setLevel(logging.ERROR)
    try:
        with (matplotlib.rc_context(style), warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO())):
            warnings.simplefilter("ignore")
            yield
    finally:
        fonts.setLevel(level)
        for number in set(plt.get_fignums()) - figures:
            plt.close(number)


def _plain_page(arms: list[Arm], title: str, why: str) -> str:
    """A minimal HTML page: the metrics table and why there is no tearsheet."""
    head = "".join(f"<th>{html.escape(arm.name)}</th>" for arm in arms)
    rows = "".join(f"<tr><td>{html.escape(_label(metric))}</td>"
                   + "".join(f"<td>{_cell(metric, arm.metrics.get(metric))}</td>" for arm in arms) + "</tr>"
                   for metric in METRICS)
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title></head>"
            f"<body><h1>{html.escape(title)}</h1><p>{html.escape(why)}</p>"
            f"<table><tr><th>metric</th>{head}</tr>{rows}</table></body></html>\n")


def tearsheet(challenger: Arm, benchmark: Arm | None, out: Path, title: str, draw: bool = True) -> Path:
    """Write the quantstats HTML tearsheet of ``challenger`` against ``benchmark`` to ``out``.

    The benchmark is the champion, or buy-and-hold (or None) for a first model. Both are
    cut to their common dates. Fewer than :data:`MIN_BARS` daily values, or ``draw`` false
    (``registry.tearsheet``: quantstats takes a few seconds a page), give a plain page with
    the metrics table instead. The file is written beside ``out`` and renamed onto
    it, so ``out`` is whole or untouched, even when quantstats raises.
    """
    returns = challenger.daily_returns()
    bench = benchmark.daily_returns() if benchmark is not None else None
    if bench is not None:
        common = returns.index.intersection(bench.index)
        returns, bench = returns.loc[common], bench.loc[common]
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    os.close(fd)
    try:
        if len(returns) + 1 < MIN_BARS or not draw:
            arms = [challenger] + ([benchmark] if benchmark is not None else [])
            why = (f"window too short for a tearsheet ({len(returns) + 1} bars)" if draw
                   else "no tearsheet drawn (registry.tearsheet: false)")
            page = _plain_page(arms, title, why)
        else:
            qs, style = _quantstats()
            with _quiet(style):
                qs.reports.html(returns, bench, title=title, output=temp, match_dates=False, periods_per_year=252,
                                strategy_title=challenger.name,
                                benchmark_title=benchmark.name if benchmark is not None else None)
            page = _SVG_DATE.sub("", _FAVICON.sub("", Path(temp).read_text(encoding="utf-8")))
        Path(temp).write_text(page, encoding="utf-8")
        os.chmod(temp, 0o644)  # mkstemp's 0600 would hide the report from other readers
        os.replace(temp, out)
    finally:
        if os.path.exists(temp):
            os.unlink(temp)
    return out
