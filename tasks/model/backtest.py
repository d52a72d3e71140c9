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

import pandas as pd
from prefect import task
from prefect.cache_policies import NO_CACHE

from tasks.config import Params
from tasks.data import features
from tasks.errors import MissingInput
from tasks.model import bundle
from tasks.storage import atomic_dir
from trainers.evaluate import buy_and_hold, run_policy
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
    """Equity curves (growth of $1) and drawdowns of the agent and buy-and-hold."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6), sharex=True, height_ratios=(3, 1))
    for column, color in (("agent", "tab:blue"), ("buy_and_hold", "tab:gray")):
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


def backtest(params: Params) -> BacktestResult:
    """Run the trained policy and equal-weight buy-and-hold over the test split."""
    fs = features.load(params.dirs.features)
    actor, meta = bundle.load(params.dirs.models)
    if meta.symbols != fs.symbols or meta.feature_names != fs.feature_names:
        raise MissingInput(f"{params.dirs.models}: the model was trained on other symbols or features "
                           "(run `podracer train` again)")
    data = fs.market()
    window = fs.window("test")
    per_year = periods_per_year(params.data.freq)
    agent = run_policy(actor, data, meta.scales, meta.env, window)
    hold = buy_and_hold(data, meta.env, window)
    dates = pd.DatetimeIndex(fs.timestamps[window[0] : window[1] + 1], name="ts")
    curve = pd.DataFrame({"agent": agent, "buy_and_hold": hold}, index=dates)
    result = {
        "agent": performance(agent, per_year, params.backtest.risk_free),
        "buy_and_hold": performance(hold, per_year, params.backtest.risk_free),
    }
    start, end = str(dates[1].date()), str(dates[-1].date())
    with atomic_dir(params.dirs.backtest) as staging:
        (staging / METRICS_FILE).write_text(json.dumps({**result, "start": start, "end": end}, indent=1))
        curve.to_csv(staging / CURVE_FILE)
        plot_equity(curve, staging / PLOT_FILE, f"Test window {start} to {end} (costs {meta.env.cost_pct:.1%})")
    sharpes = result["agent"]["sharpe"], result["buy_and_hold"]["sharpe"]
    log.info("test Sharpe %.2f vs buy-and-hold %.2f", *sharpes)  # pragma: no mutate
    return BacktestResult(result["agent"], result["buy_and_hold"], start, end, params.dirs.backtest)


backtest_task = task(backtest, name="backtest", cache_policy=NO_CACHE)
