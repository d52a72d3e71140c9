"""The benchmarks' rule-based portfolios (``benchmarks/rules.py``), worked by hand."""

import numpy as np
import torch

from benchmarks.rules import momentum_scores, ranked_portfolio
from trainers.common.env import MarketData
from trainers.config import EnvConfig


def test_ranked_portfolio_holds_the_top_scorer_rebalances_on_schedule_and_fills_at_opens():
    """3 stocks, top third = 1 held, rebalanced every 2 bars, no costs (worked by hand):
    bar 0 picks stock 2: 1000 / close 10 = 100 shares, filled at open 8 (cash 200);
    bar 2 picks stock 0: value 200 + 100·12 = 1400 → target 140 shares at close 10;
    at open 11 the sale brings 1100 (cash 1300) and buys scale to floor(1300 / 1540 · 140) = 118."""
    close = torch.tensor([[10.0, 10, 10], [10, 10, 9], [10, 10, 12], [12, 10, 10]], dtype=torch.float64)
    open_ = torch.tensor([[10.0, 10, 10], [10, 10, 8], [10, 10, 12], [11, 10, 11]], dtype=torch.float64)
    data = MarketData(open=open_, close=close, features=torch.zeros(4, 3, 1))
    scores = torch.tensor([[0.0, 1, 2], [9, 9, 0], [2, 1, 0], [0, 0, 9]])
    cfg = EnvConfig(initial_cash=1_000.0, cost_pct=0.0, episode_len=2, min_episode_len=1)
    values = ranked_portfolio(data, cfg, (0, 3), scores, every=2, top=1 / 3)
    np.testing.assert_allclose(values, [1000.0, 1100.0, 1400.0, 2 + 118 * 12], rtol=0, atol=1e-9)


def test_momentum_scores_are_trailing_returns_known_at_the_close():
    data = MarketData(open=torch.ones(3, 1, dtype=torch.float64),
                      close=torch.tensor([[1.0], [2.0], [4.0]], dtype=torch.float64), features=torch.zeros(3, 1, 1))
    assert momentum_scores(data, lookback=1)[:, 0].tolist() == [-float("inf"), 1.0, 1.0]
