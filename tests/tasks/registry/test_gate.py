"""The gate task: a cycle's decision on the standing shadow from hand-made curves, and the
report it writes."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from standins.tiny import tiny_params
from tasks.model.backtest import BacktestResult
from tasks.registry.gate import gate_report
from tasks.registry.shadow import Shadow


def equity(returns: dict[str, np.ndarray], start: str = "2024-01-02") -> pd.DataFrame:
    """Account values from per-bar returns, one column per arm, starting at 100 the bar before."""
    bars = len(next(iter(returns.values())))
    return pd.DataFrame({arm: 100 * np.cumprod(np.concatenate(([1.0], 1 + r))) for arm, r in returns.items()},
                        index=pd.bdate_range(start, periods=bars + 1))


def backtested(curve: pd.DataFrame) -> BacktestResult:
    return BacktestResult({arm: {} for arm in curve}, str(curve.index[1].date()), str(curve.index[-1].date()),
                          Path("."), curve)


@pytest.fixture
def cycle(tmp_path):
    """A cycle's config (a quick bootstrap, H0 at no edge; the tiny config draws no tearsheet), and a
    strong challenger's window: it would take a free seat."""
    rng = np.random.default_rng(9)
    hold = rng.normal(0.0, 0.01, 63)
    champion = hold + rng.normal(0.0, 0.001, 63)
    window = backtested(equity({"challenger": hold + 0.005 + rng.normal(0.0, 0.001, 63), "champion": champion,
                                "buy_and_hold": hold}))
    return tiny_params(tmp_path, "registry.gate_resamples=199", "registry.gate_margin=0"), window


def test_a_shadow_record_faces_the_champion_too(cycle, tmp_path):
    """The record beats buy-and-hold significantly but trails the champion: not promoted
    (it is retired), whatever buy-and-hold says."""
    params, window = cycle
    rng = np.random.default_rng(0)
    hold = rng.normal(0.0, 0.01, 21)
    shadow = hold + 0.004 + rng.normal(0.0, 0.001, 21)
    record = backtested(equity({"shadow": shadow, "champion": shadow + 0.0003 + rng.normal(0.0, 0.001, 21),
                                "buy_and_hold": hold}, "2024-04-01"))
    decision = gate_report(params, window, Shadow("4", tmp_path, "2024-03-29", 0), record).decision
    beats = {e.benchmark: e.passed for e in decision.shadow.record}
    assert beats == {"champion": False, "buy_and_hold": True}
    assert decision.shadow.outcome == "retire" and decision.promoted is None
    assert decision.line.startswith("shadow version 4 retired: vs champion: ΔSharpe -")


def test_a_shadow_with_no_record_yet_holds_its_seat_in_the_report(cycle, tmp_path):
    params, window = cycle
    verdict = gate_report(params, window, Shadow("4", tmp_path, window.end, 21), None)
    assert verdict.decision.action == "refuse" and verdict.decision.shadow.outcome == "keep"
    assert verdict.reason.startswith("shadow version 4 stays in shadow: no bar of its record has come yet | new "
                                     "model refused: vs champion: ΔSharpe +")
    assert (params.dirs.ct / "report" / "gate.md").read_text() == verdict.report_markdown


def test_a_shadow_is_retired_when_its_record_reaches_ct_shadow_max_bars(cycle, tmp_path):
    """126 bars (params.yaml's ct.shadow_max_bars), ahead of both on the point estimate but
    never significantly: the seat is freed, and the challenger takes it."""
    params, window = cycle
    rng = np.random.default_rng(2)
    hold = rng.normal(0.0, 0.01, 126)
    champion = hold + rng.normal(0.0, 0.003, 126)
    record = backtested(equity({"shadow": hold + 0.0003 + rng.normal(0.0, 0.003, 126), "champion": champion,
                                "buy_and_hold": hold}, "2024-04-01"))
    decision = gate_report(params, window, Shadow("4", tmp_path, "2024-03-29", 105), record).decision
    assert all(e.diff > 0 and not e.passed for e in decision.shadow.record)  # kept, were it younger
    assert (decision.shadow.outcome, decision.shadow.tested, decision.action) == ("retire", 126, "shadow")
    assert decision.line.startswith("shadow version 4 retired (max age: 126 record bars reach ct.shadow_max_bars "
                                    "126): vs champion")
