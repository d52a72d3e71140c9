"""The end-of-run tables say what a trading cycle did, and how long a backtest window is."""

from pathlib import Path

import numpy as np
import pandas as pd
from rich.console import Console

from flows.summary import metrics_table, orders_table
from tasks.delivery.client.loop import CycleResult
from tasks.model.backtest import EXTRAPOLATED_UNDER, BacktestResult, window_line
from trainers.common.metrics import performance


def rendered(result: CycleResult) -> str:
    console = Console(width=120, record=True)
    console.print(orders_table(result))
    return " ".join(console.export_text().split())  # the caption wraps at the table's width


def test_a_held_bar_says_so_and_lists_no_orders():
    held = CycleResult("2023-12-29", "1", "models:/podracer-ppo/1", cash=10.0, equity=20.0, decided=False)
    text = rendered(held)
    assert "held: no decision on this bar (env.decide_every)" in text and "no orders" in text
    assert "held" not in rendered(CycleResult("2023-12-29", "1", "models:/podracer-ppo/1"))


def _backtest(stamps: pd.DatetimeIndex, agent_end: float, hold_end: float) -> BacktestResult:
    """A backtest whose curves go in a straight line from 100 to ``*_end``; the metrics are
    computed from them as the backtest computes them."""
    curve = pd.DataFrame({"agent": np.linspace(100.0, agent_end, len(stamps)),
                          "buy_and_hold": np.linspace(100.0, hold_end, len(stamps))}, index=stamps)
    metrics = {arm: performance(curve[arm].to_numpy(), 252.0 * 390.0) for arm in curve}
    return BacktestResult(metrics, str(stamps[1].date()), str(stamps[-1].date()), Path("."), curve)


def table_text(result: BacktestResult) -> str:
    console = Console(width=120, record=True)
    console.print(metrics_table(result))
    return " ".join(console.export_text().split())


def test_a_short_minute_window_says_its_length_total_return_and_that_annual_figures_extrapolate():
    minutes = pd.date_range("2023-10-30 13:30", periods=390, freq="min", tz="UTC")
    stamps = pd.DatetimeIndex([pd.Timestamp("2023-10-27 19:59", tz="UTC"), *minutes, *(minutes + pd.Timedelta(days=1))])
    result = _backtest(stamps, 103.0, 98.0)  # the bar before the window, then 2 sessions of 390 minutes
    assert (result.sessions, result.bars) == (2, 780)
    text = table_text(result)
    assert "Backtest 2023-10-30 to 2023-10-31, 2 sessions (780 bars) (test window, after costs)" in text
    assert "│ total return (window) │ 3.00% │ -2.00% │" in text
    assert all(f"{row} *" in text for row in ("annual return", "annual volatility", "sharpe", "calmar"))
    assert "max drawdown *" not in text and "extrapolated from 2 sessions to a year of 252" in text
    assert window_line(result) == ("2 sessions (780 bars), total return agent +3.00%, buy-and-hold -2.00%; annual "
                                   "return, volatility, Sharpe and Calmar extrapolate 2 sessions to a year of 252")


def test_a_year_of_daily_bars_is_not_called_an_extrapolation():
    stamps = pd.date_range("2022-12-30", periods=EXTRAPOLATED_UNDER + 1, freq="B", tz="UTC")
    result = _backtest(stamps, 110.0, 105.0)
    text = table_text(result)
    assert f", {EXTRAPOLATED_UNDER} sessions (test window" in text and "bars)" not in text
    assert "*" not in text and "extrapolat" not in text
    assert window_line(result) == f"{EXTRAPOLATED_UNDER} sessions, total return agent +10.00%, buy-and-hold +5.00%"
    assert "extrapolate" in window_line(_backtest(stamps[:-1], 110.0, 105.0))  # one session fewer
