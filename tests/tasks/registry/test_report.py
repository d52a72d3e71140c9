"""The gate report: its table against numbers worked by hand, and the quantstats tearsheet.

The tearsheets run with the network cut off (quantstats must not fetch anything when it
is given a benchmark Series) and are written atomically.
"""

import math
import socket

import matplotlib
import numpy as np
import pandas as pd
import pytest

from tasks.registry import report
from tasks.registry.report import Arm, gate_table, tearsheet

WINDOW = ("2024-01-03", "2024-01-04")  # the equity starts at the close of 01-02, before the window


def arm(name: str, values: list[float], start: str = "2024-01-02") -> Arm:
    return Arm.of(name, pd.Series(values, index=pd.bdate_range(start, periods=len(values))))


def three_arms() -> list[Arm]:
    return [arm("challenger v3", [100.0, 110.0, 99.0]), arm("champion v2", [100.0, 99.0, 100.98]),
            arm("buy-and-hold", [100.0, 100.0, 102.0])]


def row(table: str, label: str) -> list[str]:
    """The cells of the table row whose first cell is ``label``."""
    for line in table.splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if cells[0] == label:
            return cells[1:]
    raise AssertionError(f"no row {label!r} in\n{table}")


def test_the_table_by_hand_on_three_bar_curves():
    # 252 bars a year, 3 values = 2 returns = 2/252 of a year, so annual = (last/first)^126 - 1.
    # challenger 100 -> 110 -> 99: returns +10%, -10% (mean 0, sd sqrt(0.02) = 0.14142)
    #   cumulative 99/100 - 1 = -1.0%; annual 0.99^126 - 1 = e^(126 ln 0.99) - 1 = e^-1.26634 - 1 = -71.8%
    #   volatility 0.14142 * sqrt(252) = 2.2450 = 224.5%; Sharpe 0/0.14142 = 0.000
    #   drawdown 99/110 - 1 = -10.0%; Calmar -0.71814 / 0.1 = -7.181
    # champion 100 -> 99 -> 100.98: returns -1%, +2% (mean 0.005, sd sqrt(2 * 0.015^2) = 0.021213)
    #   cumulative 0.98%, shown 1.0; annual 1.0098^126 - 1 = e^1.22879 - 1 = 241.7%
    #   volatility 0.021213 * 15.8745 = 33.7%; Sharpe 0.005 / 0.021213 * 15.8745 = 3.742
    #   drawdown 99/100 - 1 = -1.0%; Calmar 2.41709 / 0.01 = 241.709
    # buy-and-hold 100 -> 100 -> 102: returns 0, +2% (mean 0.01, sd sqrt(2 * 0.01^2) = 0.014142)
    #   cumulative 2.0%; annual 1.02^126 - 1 = e^2.49513 - 1 = 1112.3%; volatility 22.4%
    #   Sharpe 0.01 / 0.014142 * 15.8745 = 11.225; no drawdown: 0.0% and Calmar 0.000
    table = gate_table(three_arms(), "**refuse**: the verdict line", WINDOW, None)
    assert row(table, "metric") == ["challenger v3", "champion v2", "buy-and-hold"]
    assert row(table, "cumulative_return (%)") == ["-1.0", "1.0", "2.0"]
    assert row(table, "annual_return (%)") == ["-71.8", "241.7", "1112.3"]
    assert row(table, "annual_volatility (%)") == ["224.5", "33.7", "22.4"]
    assert row(table, "**sharpe** (gate)") == ["0.000", "3.742", "11.225"]
    assert row(table, "max_drawdown (%)") == ["-10.0", "-1.0", "0.0"]
    assert row(table, "calmar") == ["-7.181", "241.709", "0.000"]
    assert table.splitlines()[0].startswith("## Gate report: challenger v3 vs champion v2 vs buy-and-hold")
    assert "Window: 2024-01-03 → 2024-01-04 (2 bars)" in table
    assert "Gate: **refuse**: the verdict line" in table
    assert "No champion yet" not in table and "had seen" not in table
    assert Arm.of("x", three_arms()[0].equity).metrics == three_arms()[0].metrics  # the repo's performance()
    assert math.isclose(three_arms()[1].metrics["calmar"], (1.0098**126 - 1) / 0.01)


def test_the_seen_bars_sentence_only_when_the_champion_saw_some():
    seen = gate_table(three_arms(), "why", WINDOW, 1)
    assert ("The champion's training data reached into this window: it had seen 1 of its 2 bars, so the "
            "comparison favours the champion (conservative against the challenger).") in seen
    assert "Gate: why" in seen and row(seen, "calmar")[0] == "-7.181"
    for none in (None, 0):
        assert "had seen" not in gate_table(three_arms(), "why", WINDOW, none)
    with pytest.raises(ValueError, match="3 of 2"):
        gate_table(three_arms(), "why", WINDOW, 3)


def test_a_first_model_is_gated_against_buy_and_hold_only():
    challenger, _, hold = three_arms()
    table = gate_table([challenger, hold], "why", WINDOW, 2)
    assert "No champion yet: gated against buy-and-hold only." in table
    assert "had seen" not in table and row(table, "metric") == ["challenger v3", "buy-and-hold"]


def test_arms_of_other_windows_or_counts_are_refused():
    challenger, _, hold = three_arms()
    with pytest.raises(ValueError, match="same window"):
        gate_table([challenger, arm("short", [100.0, 101.0]), hold], "why", WINDOW, None)
    with pytest.raises(ValueError, match="2 or 3 arms"):
        gate_table([challenger], "why", WINDOW, None)


def curve(bars: int, drift: float, seed: int) -> pd.Series:
    steps = np.random.default_rng(seed).normal(drift, 0.01, bars - 1)
    return pd.Series(100 * np.cumprod(np.concatenate(([1.0], 1 + steps))),
                     index=pd.bdate_range("2024-01-02", periods=bars))


@pytest.fixture
def offline(monkeypatch):
    """No connection can be opened: a tearsheet that reached for the network would fail."""
    def refuse(*args, **kwargs):
        raise AssertionError(f"network access: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


@pytest.mark.parametrize("bars", [60, 20])
def test_a_tearsheet_of_challenger_against_champion(tmp_path, bars, offline, capsys):
    font = list(matplotlib.rcParams["font.family"])
    out = tearsheet(Arm.of("challenger v3", curve(bars, 0.001, 1)), Arm.of("champion v2", curve(bars, 0.0, 2)),
                    tmp_path / "gate" / "tearsheet.html", "Gate of v3")
    page = out.read_text(encoding="utf-8")
    assert out == tmp_path / "gate" / "tearsheet.html" and len(page) > 10_000
    assert "challenger v3" in page and "champion v2" in page and "Gate of v3" in page
    assert "qtpylib.io" not in page  # the template's remote favicon is gone: the page opens offline
    assert capsys.readouterr() == ("", "")  # quantstats said nothing
    assert list(matplotlib.rcParams["font.family"]) == font  # nor restyled the process
    assert [p.name for p in out.parent.iterdir()] == ["tearsheet.html"]


def test_a_window_too_short_gets_a_plain_page(tmp_path):
    out = tearsheet(arm("challenger v3", [100.0, 110.0]), arm("buy-and-hold", [100.0, 101.0]),
                    tmp_path / "t.html", "Gate")
    page = out.read_text(encoding="utf-8")
    assert "window too short for a tearsheet (2 bars)" in page
    assert "challenger v3" in page and "buy-and-hold" in page and "<td>10.0</td>" in page


def test_a_tearsheet_not_drawn_is_a_plain_page_that_says_why(tmp_path, monkeypatch):
    quantstats, _ = report._quantstats()
    monkeypatch.setattr(quantstats.reports, "html", lambda *args, **kwargs: pytest.fail("quantstats drew"))
    out = tearsheet(Arm.of("challenger v3", curve(60, 0.001, 1)), Arm.of("champion v2", curve(60, 0.0, 2)),
                    tmp_path / "t.html", "Gate", draw=False)
    page = out.read_text(encoding="utf-8")
    assert "no tearsheet drawn (registry.tearsheet: false)" in page
    assert "challenger v3" in page and "champion v2" in page


def test_nothing_is_left_half_written_when_quantstats_raises(tmp_path, monkeypatch):
    quantstats, _ = report._quantstats()

    def half_then_fail(returns, benchmark, output, **kwargs):
        with open(output, "w") as fh:
            fh.write("<html><body>half")
        raise ValueError("quantstats broke")

    monkeypatch.setattr(quantstats.reports, "html", half_then_fail)
    out = tmp_path / "tearsheet.html"
    with pytest.raises(ValueError, match="quantstats broke"):
        tearsheet(arm("challenger", [100.0, 101.0, 102.0, 101.5]), None, out, "Gate")
    assert not out.exists() and list(tmp_path.iterdir()) == []
