"""The ceiling diagnosis (benchmarks/archive/ceiling.py): the least-squares scorer reads only the
training window, recovers a planted relation, and its portfolio trades by the env's rules."""

import numpy as np
import pytest
import torch

from benchmarks.archive.ceiling import HELD, history_row, linear_fit, tilted_portfolio
from trainers.common.env import MarketData
from trainers.config import EnvConfig


def planted(t: int = 40, n: int = 5, seed: int = 0) -> MarketData:
    """Opens whose next-bar log return is 0.01 × feature 0 (cross-sectionally zero-mean)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((t, n, 2))
    x -= x.mean(axis=1, keepdims=True)
    log_open = np.zeros((t, n))
    for i in range(t - 2):
        log_open[i + 2] = log_open[i + 1] + 0.01 * x[i, :, 0]
    price = torch.tensor(np.exp(log_open) * 10.0)
    return MarketData(open=price, close=price.clone(), features=torch.tensor(x, dtype=torch.float32))


def test_the_fit_recovers_a_planted_relation():
    beta = linear_fit(planted(), (0, 30), horizon=1)
    assert beta == pytest.approx([0.01, 0.0], abs=1e-6)


def test_the_fit_reads_no_open_after_the_window():
    data = planted()
    before = linear_fit(data, (0, 30), horizon=1)
    data.open[31:] *= torch.linspace(0.5, 2.0, 5, dtype=torch.float64)
    assert np.array_equal(linear_fit(data, (0, 30), horizon=1), before)
    data.open[30] *= torch.linspace(0.5, 2.0, 5, dtype=torch.float64)  # the window's last open is read
    assert not np.allclose(linear_fit(data, (0, 30), horizon=1), before)
    with pytest.raises(ValueError, match="shorter than the horizon"):
        linear_fit(data, (0, 3), horizon=3)


def test_the_neutral_portfolio_by_hand():
    price = torch.full((6, 2), 10.0, dtype=torch.float64)
    data = MarketData(open=price, close=price.clone(), features=torch.zeros(6, 2, 1))
    cfg = EnvConfig(initial_cash=1000.0, action="weights")
    # a third each: floor(333.3 / 10) = 33 shares of both at 10, costs 0.2% of 660 = 1.32
    values, turnover = tilted_portfolio(data, cfg, (0, 5), torch.zeros(6, 2, dtype=torch.float64), tilt=0.0)
    assert values.tolist() == pytest.approx([1000.0] + [998.68] * 5)
    assert turnover == pytest.approx(0.66 * 252 / 5)


def test_deciding_every_few_bars_holds_in_between_by_hand():
    # stock 0 doubles at bar 2's open and close; a scorer that always prefers stock 1
    price = torch.tensor([[10.0, 10.0], [10.0, 10.0], [20.0, 10.0], [20.0, 10.0], [20.0, 10.0]], dtype=torch.float64)
    data = MarketData(open=price, close=price.clone(), features=torch.zeros(5, 2, 1))
    cfg = EnvConfig(initial_cash=1000.0, cost_pct=0.0, action="weights")
    scores = torch.tensor([[0.0, 1.0]] * 5, dtype=torch.float64)
    held, _ = tilted_portfolio(data, cfg, (0, 4), scores, tilt=0.0, every=4)
    # a third each at bar 1: 33 + 33 shares, 340 cash; held through the jump: 340 + 660 + 330
    assert held.tolist() == pytest.approx([1000.0, 1000.0, 1330.0, 1330.0, 1330.0])
    _, daily_turnover = tilted_portfolio(data, cfg, (0, 4), scores, tilt=0.0, every=1)
    _, held_turnover = tilted_portfolio(data, cfg, (0, 4), scores, tilt=0.0, every=4)
    assert daily_turnover > held_turnover == pytest.approx(0.66 * 252 / 4)



def test_a_stock_with_no_score_yet_is_held_neutral_and_the_others_still_tilt():
    # momentum's first bars are -inf: that stock's z is 0, the others' z is over themselves
    price = torch.tensor([[10.0, 10.0, 10.0], [10.0, 10.0, 10.0], [10.0, 10.0, 20.0]], dtype=torch.float64)
    data = MarketData(open=price, close=price.clone(), features=torch.zeros(3, 3, 1))
    cfg = EnvConfig(initial_cash=1000.0, cost_pct=0.0, action="weights")
    scores = torch.tensor([[-torch.inf, 1.0, 3.0]] * 3, dtype=torch.float64)
    values, _ = tilted_portfolio(data, cfg, (0, 2), scores, tilt=100.0)
    # z = (0, -0.71, +0.71), logits 5 tanh(100 z) = (0, -5, +5), cash 0: stock 2 weighs
    # e^5 / (2 + e^-5 + e^5) = 0.98666, floor(986.66 / 10) = 98 shares; stocks 0 and 1 none.
    # (z over all four with -inf as 0 would give logits (-5, -5, +5) and 99 shares: 1990)
    assert values.tolist() == pytest.approx([1000.0, 1000.0, 20.0 + 98 * 20.0])


def test_the_history_row_tracks_the_held_fit_and_the_best_row_but_the_oracle():
    # per seed: (row, train Sharpe, test Sharpe, turnover); test − buy-and-hold by hand
    def seed(hold: float, held: float) -> list[tuple[str, float, float, float]]:
        return [("buy-and-hold", 0.5, hold, float("nan")), (HELD, 0.5, held, 1.0),
                ("filter, momentum rule", 0.5, 1.0, 1.0), ("oracle, momentum rule", 0.5, 3.0, 1.0)]

    seeds = [seed(0.25, 0.5), seed(0.5, 1.25)]
    # the held fit: +0.25, +0.75 (mean +0.50, sd 0.35); the filter: +0.75, +0.50 (+0.62, sd 0.18)
    assert history_row(seeds) == ("+0.50 ± 0.35", "filter, momentum rule: +0.62 ± 0.18")
    assert history_row([[r for r in seed if r[0] != HELD] for seed in seeds])[0] == "-"
