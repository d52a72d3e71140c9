"""Rule-based portfolios the benchmarks compare the agents with: a momentum rule and the
synthetic market's oracle (docs/results.md), and the schedule any rule trades on.

They trade under the env's rules (next-open fills, whole shares, costs) through
:func:`trainers.common.evaluate.market_fill`, like the agents and buy-and-hold.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np
import torch

from trainers.common.env import MarketData
from trainers.common.evaluate import market_fill
from trainers.common.orders import orders, ranked, rebalance_orders
from trainers.config import EnvConfig

Orders = Callable[[int, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
"""``(t, cash [1], shares [1, n]) -> (sold, bought)`` ``[1, n]`` orders decided at close t."""


def scheduled_portfolio(data: MarketData, cfg: EnvConfig, window: tuple[int, int], decide: Orders,
                        every: int = 1) -> tuple[np.ndarray, float]:
    """Account value at each close of ``window`` for a rule whose orders ``decide`` returns
    at every ``every``-th close (holding in between), filled at the next open by
    :func:`trainers.common.evaluate.market_fill` with the env's costs: the same rules as the agents and buy-and-hold.
    Also the notional traded over the window, as a sum of fractions of the account value."""
    t_lo, t_hi = window
    cash = torch.tensor([cfg.initial_cash], dtype=torch.float64)
    shares = torch.zeros((1, data.n_stocks), dtype=torch.float64)
    none = torch.zeros_like(shares)
    values, traded = [cfg.initial_cash], 0.0
    for t in range(t_lo, t_hi):
        sold, bought = decide(t, cash, shares) if (t - t_lo) % every == 0 else (none, none)
        fill = market_fill(data, t, sold, bought, cash, shares, cfg.cost_pct)
        traded += float(((fill.shares - shares).abs() * fill.price).sum()) / values[-1]
        cash, shares = fill.cash, fill.shares
        values.append(float(cash[0] + (shares[0] * data.close[t + 1].cpu()).sum()))
    return np.asarray(values, dtype=np.float64), traded


def ranked_portfolio(
    data: MarketData, cfg: EnvConfig, window: tuple[int, int], scores: torch.Tensor, every: int = 5,
    top: float = 1 / 3,
) -> np.ndarray:
    """Account value at each close of ``window`` for a rule that holds the top ``top`` share
    of stocks by ``scores[t]`` ``[T, n]`` (known at close t), long only and equal weight,
    rebalanced every ``every`` bars (:func:`scheduled_portfolio`). Only stocks tradable at t
    are ranked. The momentum baseline and the synthetic market's oracle are this rule with
    different scores (docs/results.md).
    """
    n = data.n_stocks

    def decide(t: int, cash: torch.Tensor, shares: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        score = scores[t].cpu()
        live = torch.ones(n, dtype=torch.bool) if data.tradable is None else data.tradable[t].cpu()
        held = min(max(1, round(n * top)), int(live.sum()))
        weights = torch.zeros((1, n), dtype=torch.float64)
        ranked = torch.argsort(torch.where(live, score, -torch.inf), descending=True, stable=True)[:held]
        weights[0, ranked] = 1.0 / max(held, 1)
        return rebalance_orders(weights * (1 - cfg.cost_pct), cash, shares, data.close[t].cpu().unsqueeze(0))

    return scheduled_portfolio(data, cfg, window, decide, every)[0]


def tilted_portfolio(data: MarketData, cfg: EnvConfig, window: tuple[int, int], scores: torch.Tensor,
                     tilt: float, every: int = 1, per_year: float = 252.0) -> tuple[np.ndarray, float]:
    """Account values over ``window`` and yearly turnover (traded notional / value) of the
    weights action ``tanh(tilt · z)``, sent through the env's :func:`trainers.common.orders.orders`
    at every ``every``-th close (:func:`scheduled_portfolio`)."""

    def decide(t: int, cash: torch.Tensor, shares: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        s, finite = scores[t].unsqueeze(0), torch.isfinite(scores[t]).unsqueeze(0)
        # a stock with no score yet (momentum's first bars) is neutral
        action = ranked(torch.where(finite, s, 0.0), tilt, finite).to(scores.dtype)
        live = None if data.tradable is None else data.tradable[t].unsqueeze(0)
        return orders(plain, action, cash, shares, data.close[t].unsqueeze(0), tradable=live)

    plain = replace(cfg, tilt=None)  # the action above is already the ranking's

    values, traded = scheduled_portfolio(data, cfg, window, decide, every)
    return values, traded * per_year / max(window[1] - window[0], 1)


def held_ranking(data: MarketData, cfg: EnvConfig, window: tuple[int, int], scores: torch.Tensor) -> np.ndarray:
    """Account values over ``window`` of a ranking ``scores`` ``[T, n]`` traded through the agents'
    own action: target weights ``tanh(z)`` of the scores' cross-sectional z-score, every
    ``cfg.decide_every`` bars, with a 1% no-trade band (docs/results.md: the ``ewm_40`` rule
    and the filter, which need no fitting)."""
    held = replace(cfg, action="weights", rebalance_band=0.01, tilt=None)
    return tilted_portfolio(data, held, window, scores, 1.0, cfg.decide_every)[0]


def momentum_scores(data: MarketData, lookback: int = 20) -> torch.Tensor:
    """``[T, n]`` trailing ``lookback``-bar return at each close (−inf before there is one)."""
    close = data.close.cpu()
    scores = torch.full_like(close, -torch.inf)
    scores[lookback:] = close[lookback:] / close[:-lookback] - 1.0
    return scores
