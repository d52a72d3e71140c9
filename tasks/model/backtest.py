"""Stage 5, backtest: the selected policy on the test window, beside buy-and-hold.

The test split is touched here and nowhere else (DESIGN §2). Both curves run through the
training MDP (next-open fills, integer shares, 0.2% costs). Writes ``metrics.json`` (the
DVC metrics file), ``equity.csv`` and ``equity.png`` under ``data/backtest/``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from prefect import task
from prefect.cache_policies import NO_CACHE

from tasks.config import Params
from tasks.data import features
from tasks.errors import MissingInput
from tasks.model import bundle
from tasks.storage import atomic_dir
from trainers.evaluate import Policy, buy_and_hold, run_policy
from trainers.metrics import performance, periods_per_year

log = logging.getLogger("podracer.backtest")
METRICS_FILE, CURVE_FILE, PLOT_FILE = "metrics.json", "equity.csv", "equity.png"


@dataclass(frozen=True)
class BacktestResult:
    metrics: dict[str, float]
    buy_and_hold: dict[str, float]
    start: str
    end: str
    folder: Path

    @property
    def plot(self) -> Path:
        return self.folder / PLOT_FILE

    @property
    def metrics_file(self) -> Path:
        return self.folder / METRICS_FILE


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


def check_fits(meta: bundle.PolicyMeta, fs: features.FeatureSet, origin: object) -> None:
    """A policy trades exactly the feature set's symbols and indicators, or nothing."""
    if meta.symbols != fs.symbols or meta.feature_names != fs.feature_names:
        raise MissingInput(f"{origin}: the model was trained on other symbols or features "
                           "(run `podracer train` again)")


def side_by_side(fs: features.FeatureSet, policies: dict[str, tuple[Policy, bundle.PolicyMeta]],
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


def backtest(params: Params) -> BacktestResult:
    """Run the trained policy and equal-weight buy-and-hold over the test split."""
    fs = features.load(params.dirs.features)
    actor, meta = bundle.load(params.dirs.models)
    check_fits(meta, fs, params.dirs.models)
    curve, result = side_by_side(fs, {"agent": (actor, meta)}, fs.window("test"),
                                 periods_per_year(params.data.freq), params.backtest.risk_free)
    dates = curve.index
    start, end = str(dates[1].date()), str(dates[-1].date())
    with atomic_dir(params.dirs.backtest) as staging:
        (staging / METRICS_FILE).write_text(json.dumps({**result, "start": start, "end": end}, indent=1))
        curve.to_csv(staging / CURVE_FILE)
        plot_equity(curve, staging / PLOT_FILE, f"Test window {start} to {end} (costs {meta.env.cost_pct:.1%})")
    sharpes = result["agent"]["sharpe"], result["buy_and_hold"]["sharpe"]
    log.info("test Sharpe %.2f vs buy-and-hold %.2f", *sharpes)  # pragma: no mutate
    return BacktestResult(result["agent"], result["buy_and_hold"], start, end, params.dirs.backtest)


backtest_task = task(backtest, name="backtest", cache_policy=NO_CACHE)
