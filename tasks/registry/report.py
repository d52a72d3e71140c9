"""The gate's verdict on a backtest, and the report that says why (:func:`gate_report`).

The pipeline's test split faces buy-and-hold and, when one sits, the champion: backtested
beside the agent on the same bars, and when it had trained or selected on any of them, the
window is not clean and the agent can enter shadow at most. A continuous-training cycle's
arms (challenger, champion and buy-and-hold) are backtested on the same evaluation
window, so their metrics (the six of :data:`trainers.common.metrics.METRICS`,
computed by :func:`trainers.common.metrics.performance`) can be read side by side in one markdown
table, the gate's verdict under it. The tearsheet is a ``quantstats`` HTML report of the
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
from prefect import task
from prefect.cache_policies import NO_CACHE

from tasks.config import Params
from tasks.data import features
from tasks.errors import MissingInput
from tasks.model.backtest import BacktestResult, compare
from tasks.model.walkforward import CHALLENGER, Champion, Windows, day, seen_bars
from tasks.registry.evidence import against, evidence_line, refused
from tasks.registry.gate import Decision, decide, decide_cycle
from tasks.registry.shadow import ARM, Shadow
from trainers.common.metrics import METRICS, performance, periods_per_year

PERCENT = frozenset({"cumulative_return", "annual_return", "annual_volatility", "max_drawdown"})
"""Metrics that are fractions (0.05 is 5%): shown as percents with one decimal."""
MIN_BARS = 3
"""Fewer daily values than this (two returns) get a plain page instead of a tearsheet."""
_FAVICON = re.compile(r'<link rel="shortcut icon"[^>]*>\s*')
_SVG_DATE = re.compile(r"<dc:date>[^<]*</dc:date>")  # the figures' timestamps: same input, same bytes
CT_FOLDER, GATE_FILE, TEARSHEET_FILE = "report", "gate.md", "tearsheet.html"
"""The cycle's report folder under ``data/ct/``, and its two files."""
CHAMPION_FOLDER = "champion"
"""Under ``data/backtest/``: the pipeline's test window with the champion beside the agent."""


@dataclass(frozen=True)
class GateVerdict:
    """What the gate decided, why, and the report that shows it."""

    decision: Decision
    report_markdown: str
    """The version's description in the MLflow UI, whose first line is the verdict line (and a cycle's
    Prefect artifact)."""
    report_file: Path | None = None
    """``gate.md`` (a cycle's)."""
    tearsheet: Path | None = None
    """The quantstats HTML tearsheet (a cycle's)."""
    compared: BacktestResult | None = None
    """The pipeline's test window with the champion beside the agent and buy-and-hold, when
    a champion sits (``data/backtest/champion/``)."""

    @property
    def passed(self) -> bool:
        """The new model itself is promoted (only the pipeline's gate can say so)."""
        return self.decision.action == "promote"

    @property
    def reason(self) -> str:
        """The verdict in one line (:attr:`tasks.registry.gate.Decision.line`)."""
        return self.decision.line

    @property
    def files(self) -> tuple[Path, ...]:
        found = tuple(path for path in (self.report_file, self.tearsheet) if path is not None)
        return found + (self.compared.files if self.compared is not None else ())


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


def _plain_page(arms: list[Arm], title: str, days: int) -> str:
    """A minimal HTML page: the metrics table and why there is no tearsheet."""
    head = "".join(f"<th>{html.escape(arm.name)}</th>" for arm in arms)
    rows = "".join(f"<tr><td>{html.escape(_label(metric))}</td>"
                   + "".join(f"<td>{_cell(metric, arm.metrics.get(metric))}</td>" for arm in arms) + "</tr>"
                   for metric in METRICS)
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title></head>"
            f"<body><h1>{html.escape(title)}</h1><p>window too short for a tearsheet ({days} bars)</p>"
            f"<table><tr><th>metric</th>{head}</tr>{rows}</table></body></html>\n")


def tearsheet(challenger: Arm, benchmark: Arm | None, out: Path, title: str) -> Path:
    """Write the quantstats HTML tearsheet of ``challenger`` against ``benchmark`` to ``out``.

    The benchmark is the champion, or buy-and-hold (or None) for a first model. Both are
    cut to their common dates. Fewer than :data:`MIN_BARS` daily values give a plain page
    with the metrics table instead. The file is written beside ``out`` and renamed onto
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
        if len(returns) + 1 < MIN_BARS:
            arms = [challenger] + ([benchmark] if benchmark is not None else [])
            page = _plain_page(arms, title, len(returns) + 1)
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


def _arms(params: Params, tested: BacktestResult) -> list[Arm]:
    per_year = periods_per_year(params.data.freq)
    return [Arm.of(name, tested.curve[name], per_year, params.backtest.risk_free) for name in tested.curve.columns]


def split_windows(fs: features.FeatureSet) -> Windows:
    """The pipeline's splits as :class:`tasks.model.walkforward.Windows`: it trains on the
    train split, selects on validation and is judged on test."""
    valid = fs.splits["validation"][1]
    return Windows(train=fs.window("train"), select=fs.window("validation"), eval=fs.window("test"),
                   cutoff=day(fs.timestamps[valid]), first=day(fs.timestamps[fs.splits["test"][0]]),
                   last=day(fs.timestamps[fs.splits["test"][1]]))


def pipeline_gate(params: Params, tested: BacktestResult, champion: Champion | None) -> GateVerdict:
    """The pipeline's gate on its test window: the agent against buy-and-hold and, when one
    sits, the ``champion``, backtested beside it on the same bars
    (:func:`tasks.model.backtest.compare`, into ``data/backtest/champion/``). A champion whose
    data cutoff reaches into the window has seen some of its bars: no clean window, so the
    agent can only enter shadow, and the line says why. A champion that cannot trade the
    window (other symbols or features) is a faulted test, so the agent is refused and can be
    promoted only by hand (docs/operations.md, the gate)."""
    registry, per_year, risk_free = params.registry, periods_per_year(params.data.freq), params.backtest.risk_free
    fs = features.load(params.dirs.features)
    w = split_windows(fs)
    said = f"Test window {tested.start} to {tested.end}; trained and selected on data to {w.cutoff}."
    if champion is None:
        decision = decide(against(tested.curve, "agent", registry, per_year, risk_free))
        return GateVerdict(decision, f"{decision.line}\n\n{said}")
    try:
        compared = compare(params, {"agent": params.dirs.models, "champion": champion.folder}, w.eval,
                           params.dirs.backtest / CHAMPION_FOLDER, f"Test window beside champion v{champion.version}")
    except MissingInput as err:  # it trades other symbols or features: no test against it, so no promotion
        unfit = refused("champion", tested.bars, f"champion version {champion.version} cannot trade this test "
                        f"window ({err})", registry.gate_margin, registry.gate_alpha)
        decision = decide((unfit, *against(tested.curve, "agent", registry, per_year, risk_free)))
        return GateVerdict(decision, f"{decision.line}\n\n{said}")
    seen = seen_bars(fs, w, champion.cutoff)
    held = "" if seen == 0 else (f"no clean window: champion version {champion.version} had trained or selected on "
                                 f"{seen} of the {compared.bars} test bars, so it can be promoted only on the record "
                                 "it trades")
    evidence = against(compared.curve, "agent", registry, per_year, risk_free)
    decision = decide(evidence, held)
    table = gate_table(_arms(params, compared), f"**{decision.action}**: {evidence_line(evidence)}",
                       (compared.start, compared.end), seen)
    return GateVerdict(decision, f"{decision.line}\n\n{table}\n{said}", compared=compared)


def gate_report(params: Params, tested: BacktestResult, shadow: Shadow | None = None,
                record: BacktestResult | None = None, champion: Champion | None = None) -> GateVerdict:
    """The gate's decision on ``tested`` and its report.

    The pipeline's test split (arms ``agent`` and ``buy_and_hold``) faces buy-and-hold and
    the sitting ``champion``, if any (:func:`pipeline_gate`). A cycle's evaluation window
    (``challenger``, ``champion`` unless this is the first model, ``buy_and_hold``) and the
    standing ``shadow``'s ``record`` face the champion and buy-and-hold
    (:func:`tasks.registry.gate.decide_cycle`; no record yet: the shadow keeps its seat
    untested): the side-by-side tables, written to ``data/ct/report/gate.md``, and the
    challenger's tearsheet beside it.
    """
    if CHALLENGER not in tested.metrics:
        return pipeline_gate(params, tested, champion)
    registry, per_year, risk_free = params.registry, periods_per_year(params.data.freq), params.backtest.risk_free
    window = against(tested.curve, CHALLENGER, registry, per_year, risk_free)
    standing = (shadow.version, shadow.tested) if shadow is not None else None
    kept = None
    if shadow is not None and record is not None:
        kept = against(record.curve, ARM, registry, per_year, risk_free)
    decision = decide_cycle(window, standing, kept, params.ct.shadow_bars, params.ct.shadow_max_bars)
    arms = _arms(params, tested)
    dates = (tested.start, tested.end)
    markdown = f"{decision.line}\n\n" + gate_table(arms, f"**{decision.action}**: {evidence_line(window)}", dates,
                                                   tested.seen)
    if decision.shadow is not None and record is not None:
        markdown += "\n" + gate_table(_arms(params, record), decision.shadow.line, (record.start, record.end), None)
    out = params.dirs.ct / CT_FOLDER
    out.mkdir(parents=True, exist_ok=True)
    (out / GATE_FILE).write_text(markdown)
    benchmark = arms[1] if len(arms) == 3 else arms[-1]
    sheet = tearsheet(arms[0], benchmark, out / TEARSHEET_FILE,
                      f"Challenger vs {benchmark.name}, {dates[0]} to {dates[1]}")
    return GateVerdict(decision, markdown, out / GATE_FILE, sheet)


gate_task = task(gate_report, name="gate", cache_policy=NO_CACHE)
