"""Stage 5, backtest: the selected policy on the test window, beside buy-and-hold.

The test split is touched here and nowhere else (docs/design.md, the features contract).
Every curve runs through the training MDP (next-open fills, integer shares, 0.2% costs).
Writes ``metrics.json`` (the DVC metrics file), ``equity.csv`` and ``equity.png`` under
``data/backtest/``. A continuous-training cycle backtests its challenger, the champion and
buy-and-hold side by side on its walk's evaluation window instead, into ``data/ct/backtest/``
(:mod:`tasks.model.walkforward`; docs/operations.md, the CT cycle).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from tasks.config import Params
from tasks.data import feature_set
from tasks.errors import MissingInput
from tasks.model import bundle
from tasks.model.walkforward import CHALLENGER, Walk
from tasks.storage import atomic_dir
from trainers.common.evaluate import Policy, buy_and_hold, run_policy
from trainers.common.metrics import performance, periods_per_year

log = logging.getLogger("podracer.backtest")
METRICS_FILE, CURVE_FILE, PLOT_FILE = "metrics.json", "equity.csv", "equity.png"
YEAR_SESSIONS = 252
"""Sessions in the year every annualised figure scales to (:func:`trainers.common.metrics.periods_per_year`)."""
EXTRAPOLATED_UNDER = 189
"""A window of fewer sessions (three quarters of a year) has its annual return, volatility,
Sharpe and Calmar called extrapolations: scaling a few weeks of minute bars by 252 × 390
gives Sharpes of ±14 that describe no year anyone will see."""
CT_FOLDER = "backtest"
"""The cycle's backtest folder, under ``data/ct/``."""


@dataclass(frozen=True)
class BacktestResult:
    """Every arm's metrics on one window, its equity curves and where they were written."""

    metrics: dict[str, dict[str, float]]
    """Arm -> its metrics: the policies (``agent``; a cycle's ``challenger`` and ``champion``),
    then ``buy_and_hold``."""
    start: str
    end: str
    """Dates of the window's first and last bars."""
    folder: Path
    curve: pd.DataFrame = field(compare=False, repr=False)
    """Account value per bar, one column per arm (``equity.csv``)."""
    seen: int | None = None
    """Window bars the champion had trained or selected on (None: no champion)."""

    @property
    def buy_and_hold(self) -> dict[str, float]:
        return self.metrics["buy_and_hold"]

    @property
    def bars(self) -> int:
        """Bars in the window (the curve's first row is the bar before its first decision)."""
        return len(self.curve) - 1

    @property
    def sessions(self) -> int:
        """Sessions the window's bars fall on: its bars for daily bars, fewer for minute bars
        (a bar's UTC date is its NYSE session's)."""
        return int(pd.Index(pd.DatetimeIndex(self.curve.index[1:]).date).nunique())

    @property
    def plot(self) -> Path:
        return self.folder / PLOT_FILE

    @property
    def metrics_file(self) -> Path:
        return self.folder / METRICS_FILE

    @property
    def files(self) -> tuple[Path, ...]:
        return tuple(self.folder / name for name in (METRICS_FILE, CURVE_FILE, PLOT_FILE))


def plot_equity(curve: pd.DataFrame, path: Path, title: str) -> None:  # pragma: no mutate block (a picture)
    """Equity curves (growth of $1) and drawdowns of every column (policies and buy-and-hold)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6), sharex=True, height_ratios=(3, 1))
    colors = dict(zip(curve.columns, ("tab:blue", "tab:orange", "tab:green")), buy_and_hold="tab:gray")
    for column, color in colors.items():
        growth = curve[column] / curve[column].iloc[0]
        top.plot(curve.index, growth, color=color, label=column.replace("_", "-"))
        bottom.fill_between(curve.index, growth / growth.cummax() - 1.0, 0.0, color=color, alpha=0.4)
    top.set_ylabel("growth of $1")
    top.set_title(title)
    top.legend(loc="upper left")
    top.grid(alpha=0.3)
    bottom.set_ylabel("drawdown")
    bottom.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def check_fits(meta: bundle.PolicyMeta, fs: feature_set.FeatureSet, origin: object) -> None:
    """A policy trades exactly the feature set's symbols and indicators, or nothing."""
    if meta.symbols != fs.symbols or meta.feature_names != fs.feature_names:
        raise MissingInput(f"{origin}: the model was trained on other symbols or features "
                           "(run `podracer train` again)")


def side_by_side(fs: feature_set.FeatureSet, policies: dict[str, tuple[Policy, bundle.PolicyMeta]],
                 window: tuple[int, int], per_year: float, risk_free: float,
                 ) -> tuple[pd.DataFrame, dict[str, dict[str, float]]]:
    """Equity curves and metrics of each policy and of buy-and-hold over one env ``window``,
    all under the same MDP: next-open fills, integer shares, the bundle's costs. Each policy
    sees the indicators normalised with its own bundle's train-only stats."""
    curves: dict[str, np.ndarray] = {}
    for name, (actor, meta) in policies.items():
        check_fits(meta, fs, name)
        data = fs.market(norm=(np.asarray(meta.mean), np.asarray(meta.std)))  # each bundle's own stats
        curves[name] = run_policy(actor, data, meta.scales, meta.env, window)
    curves["buy_and_hold"] = buy_and_hold(data, meta.env, window)  # prices only: any policy's market will do
    dates = pd.DatetimeIndex(fs.timestamps[window[0] : window[1] + 1], name="ts")
    curve = pd.DataFrame(curves, index=dates)
    return curve, {name: performance(values, per_year, risk_free) for name, values in curves.items()}


def load_result(folder: Path) -> BacktestResult:
    """A backtest as :func:`backtest` wrote it into ``folder`` (``podracer register`` starts here)."""
    path = folder / METRICS_FILE
    if not path.exists():
        raise MissingInput(f"{path}: not found (run `podracer backtest` first)")
    saved = json.loads(path.read_text())
    start, end = saved.pop("start"), saved.pop("end")
    curve = pd.read_csv(folder / CURVE_FILE, index_col=0, parse_dates=True)
    return BacktestResult(saved, start, end, folder, curve)


def compare(params: Params, folders: dict[str, Path], window: tuple[int, int], out: Path, label: str,
            ) -> BacktestResult:
    """The policy bundles in ``folders`` (arm name → folder) beside buy-and-hold on one env
    ``window`` of the feature set, written into ``out`` (``metrics.json``, ``equity.csv``,
    ``equity.png``)."""
    fs = feature_set.load(params.dirs.features)
    policies = {name: bundle.load(folder) for name, folder in folders.items()}
    for name, (_, meta) in policies.items():
        check_fits(meta, fs, folders[name])
    curve, metrics = side_by_side(fs, policies, window, periods_per_year(params.data.freq), params.backtest.risk_free)
    start, end = str(curve.index[1].date()), str(curve.index[-1].date())
    cost = next(iter(policies.values()))[1].env.cost_pct
    with atomic_dir(out) as staging:
        (staging / METRICS_FILE).write_text(json.dumps({**metrics, "start": start, "end": end}, indent=1))
        curve.to_csv(staging / CURVE_FILE)
        plot_equity(curve, staging / PLOT_FILE, f"{label} {start} to {end} (costs {cost:.1%})")
    result = BacktestResult(metrics, start, end, out, curve)
    log.info("%s Sharpe: %s; %s", label, ", ".join(  # pragma: no mutate
        f"{name.replace('_', '-')} {m['sharpe']:.2f}" for name, m in metrics.items()), window_line(result))
    return result


def span(result: BacktestResult) -> str:
    """The window's length: its sessions, and its bars when they differ (minute bars)."""
    sessions, bars = result.sessions, result.bars
    return f"{sessions} sessions" + (f" ({bars:,} bars)" if bars != sessions else "")


def extrapolated(result: BacktestResult) -> bool:
    """Whether the window is too short (:data:`EXTRAPOLATED_UNDER`) for annual figures to describe a year."""
    return result.sessions < EXTRAPOLATED_UNDER


def window_line(result: BacktestResult) -> str:
    """What the annualised figures stand on: the window's :func:`span` and each arm's total
    return over it, and, for a short window, that its annual figures are extrapolations."""
    totals = ", ".join(f"{arm.replace('_', '-')} {m['cumulative_return']:+.2%}" for arm, m in result.metrics.items())
    line = f"{span(result)}, total return {totals}"
    if extrapolated(result):
        line += (f"; annual return, volatility, Sharpe and Calmar extrapolate {result.sessions} sessions to a "
                 f"year of {YEAR_SESSIONS}")
    return line


def backtest(params: Params, walk: Walk | None = None) -> BacktestResult:
    """Backtest policies beside equal-weight buy-and-hold on one window.

    By default (the pipeline, ``podracer backtest``): the trained policy of ``data/models/``,
    as ``agent``, on the test split, into ``data/backtest/``. A continuous-training cycle
    passes its ``walk``: its challenger (``data/ct/challenger/``) and the champion, if there
    is one, on the evaluation window, into ``data/ct/backtest/``, with the count of window
    bars the champion had seen.
    """
    if walk is None:
        fs = feature_set.load(params.dirs.features)
        return compare(params, {"agent": params.dirs.models}, fs.window("test"), params.dirs.backtest, "Test window")
    champion = walk.champion
    folders = {CHALLENGER: params.dirs.ct / CHALLENGER, **({"champion": champion.folder} if champion else {})}
    tested = compare(params, folders, walk.windows.eval, params.dirs.ct / CT_FOLDER, "Evaluation window")
    return replace(tested, seen=walk.seen)


def since_window(fs: feature_set.FeatureSet, since: str) -> tuple[int, int] | None:
    """The env window of the bars after the date ``since`` up to the last bar (starting one
    bar before the first, as every window does); None when no bar follows ``since``."""
    dates = np.array([str(t)[:10] for t in fs.timestamps])
    first = int(np.searchsorted(dates, since, side="right"))
    last = len(dates) - 1
    if first > last:
        return None
    return max(first - 1, 0), last
