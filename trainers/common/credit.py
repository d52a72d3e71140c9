"""Per-stock credit: a difference reward for each stock's action (docs/training.md, per-stock credit).

For each stock, what the filled action earned over the holding period its action decides (its
fill price at t+1 to the next decision's fill, the open after ``stop``), less its trading
cost, minus the same for ``base``, the baseline action filled from the same account (Wolpert &
Tumer 2002; COMA's counterfactual, Foerster et al. 2018). Holdings from before the step earn
the same in both and cancel, so only the difference in shares traded counts; one stock's
credit barely moves when another stock's action does, which is the point: each score gets its
own signal instead of one portfolio reward shared by all n.

Where that open is past the data, or the stock has no tradable bar there, the holding is
marked at the close of ``stop`` (where the env would close it out). With ``env.overnight:
flatten`` and a session's last bar s in (t, ``stop``], the holding is sold at close s instead,
and that sale's cost counts too.

With ``env.reward: excess`` the credit is relative to the market, as that reward is: each
share's gain is counted over what the same money would have made in the equal-weight market
over the same holding period (the mean of the stocks' exit over fill prices), so buying more of
every stock earns nothing by itself and only the allocation across stocks is credited. With the
absolute credit, every stock's score is pushed up in a rising market until ``tanh`` saturates
and the ranking between stocks is flattened away.
"""

from __future__ import annotations

import torch

from trainers.common.market import MarketData
from trainers.common.orders import Fill
from trainers.config import EnvConfig


def per_stock_credit(data: MarketData, cfg: EnvConfig, fill: Fill, base: Fill, t: torch.Tensor, stop: torch.Tensor,
                     flattens: bool) -> torch.Tensor:
    """``[E, n]`` the credit of the step decided at bars ``t`` ``[E]`` and filled as ``fill``,
    against ``base``, held to the next decision at ``stop`` ``[E]`` (scaled by ``reward_scale``)."""
    t1 = stop
    last = data.close.shape[0] - 1
    t2 = (t1 + 1).clamp(max=last)
    ahead = (t1 < last).unsqueeze(1)
    if data.tradable is not None:
        ahead = ahead & data.tradable.index_select(0, t2)
    mark = torch.where(ahead, data.open.index_select(0, t2), data.close.index_select(0, t1))
    held = fill.shares - base.shares
    traded = fill.sold + fill.bought - base.sold - base.bought
    earned = held * (mark - fill.price) - traded * fill.price * cfg.cost_pct
    exit_price = mark
    if flattens:  # each account sells its whole holding at close s, at a cost
        s = data.next_session_end().index_select(0, t + 1)
        flat = (s <= t1).unsqueeze(1)
        close = data.close.index_select(0, s.clamp(max=last))
        earned = torch.where(flat, held * (close * (1.0 - cfg.cost_pct) - fill.price)
                             - traded * fill.price * cfg.cost_pct, earned)
        exit_price = torch.where(flat, close, mark)
    if cfg.reward == "excess":
        earned = earned - held * fill.price * (market_growth(data, t, exit_price / fill.price) - 1.0)
    return (earned * cfg.reward_scale).to(torch.float32)


def market_growth(data: MarketData, t: torch.Tensor, growth: torch.Tensor) -> torch.Tensor:
    """``[E, 1]`` the equal-weight market's growth over a holding period: the mean of the
    stocks' ``growth`` ``[E, n]`` (exit over fill price), over the stocks tradable at the bars
    ``t`` decided at in a ragged universe."""
    if data.tradable is None:
        return growth.mean(dim=1, keepdim=True)
    live = data.tradable.index_select(0, t)
    total = torch.where(live, growth, 0.0).sum(dim=1, keepdim=True)
    return total / live.sum(dim=1, keepdim=True).clamp(min=1).to(growth.dtype)
