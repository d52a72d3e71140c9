"""Orders: what an action asks for, and how a batch of whole-share orders fills (finrl-podracer
§3, eq. 3–4; DESIGN §2).

The env, serving (``tasks/registry/serving.py``) and the paper broker (``tasks/delivery``)
all turn actions into orders and fill them with these functions, so a paper fill follows the
training rules: sells first, buys scaled down together when the cash is short, whole shares,
``cost_pct`` on every traded notional.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from trainers.env import EnvConfig


@dataclass
class Fill:
    """Result of :func:`fill_orders` for a batch of accounts."""

    cash: torch.Tensor
    shares: torch.Tensor
    sold: torch.Tensor
    bought: torch.Tensor
    cost: torch.Tensor


WEIGHT_LOGITS = 5.0
"""``action: weights``: logits are ``WEIGHT_LOGITS · a``, cash's is 0, so one stock may weigh
up to e^10 times another and cash can be all but emptied."""


def target_orders(
    action: torch.Tensor, cash: torch.Tensor, shares: torch.Tensor, close: torch.Tensor,
    liquidate: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Shares each account sells and buys to move to the target weights of ``action``
    (``action: weights``): the account is valued at ``close`` (the bar it has just seen),
    each stock's target is ``floor(w_i · value / close_i)`` whole shares, and the orders are
    the differences. :func:`fill_orders` fills them at the next open like any other (sells
    first; buys scaled down when the open costs more than the cash). The turbulence gate
    liquidates as in :func:`intended_orders`.
    """
    logits = torch.cat((action.to(torch.float64) * WEIGHT_LOGITS, torch.zeros_like(cash).unsqueeze(1)), dim=1)
    sold, bought = rebalance_orders(torch.softmax(logits, dim=1)[:, :-1], cash, shares, close)
    return _gated(sold, bought, shares, liquidate)


def rebalance_orders(
    weights: torch.Tensor, cash: torch.Tensor, shares: torch.Tensor, close: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(sold, bought) whole shares that move each account to ``weights`` ``[E, n]`` (the rest
    in cash), the account valued at ``close``: targets are ``floor(w_i · value / close_i)``."""
    value = cash + (shares * close).sum(dim=1)
    target = torch.floor(weights * value.unsqueeze(1) / close)
    return (shares - target).clamp(min=0.0), (target - shares).clamp(min=0.0)


def _gated(sold: torch.Tensor, bought: torch.Tensor, shares: torch.Tensor,
           liquidate: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Where ``liquidate`` ``[E]`` is true, sell every holding and buy nothing."""
    if liquidate is None:
        return sold, bought
    gate = liquidate.unsqueeze(1)
    return torch.where(gate, shares, sold), torch.where(gate, torch.zeros_like(bought), bought)


def orders(
    cfg: EnvConfig, action: torch.Tensor, cash: torch.Tensor, shares: torch.Tensor, close: torch.Tensor,
    liquidate: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The (sold, bought) whole-share orders ``action`` asks for, by ``cfg.action``: the
    one function the env and serving both call, so paper orders follow the training rules."""
    if cfg.action == "weights":
        return target_orders(action, cash, shares, close, liquidate)
    return intended_orders(action, shares, cfg.hmax, liquidate)


def intended_orders(
    action: torch.Tensor, shares: torch.Tensor, hmax: int, liquidate: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Shares each account asks to sell and to buy at the next open, before cash is counted
    (eq. 3): ``trunc(a · hmax)`` per stock, sells capped at the holdings (no shorting).

    Where ``liquidate`` ``[E]`` is true (the turbulence gate) every holding is sold and
    nothing is bought. Serving sends exactly these orders to the broker, which fills them
    at the open with :func:`fill_orders`, so paper fills follow the training rules.
    """
    want = torch.trunc(action.clamp(-1.0, 1.0).to(shares.dtype) * hmax)
    sold = torch.minimum((-want).clamp(min=0.0), shares)
    return _gated(sold, want.clamp(min=0.0), shares, liquidate)


def fill_orders(
    sold: torch.Tensor, bought: torch.Tensor, cash: torch.Tensor, shares: torch.Tensor, price: torch.Tensor,
    cost_pct: float,
) -> Fill:
    """Fill a batch of whole-share orders at ``price`` (eq. 4): sells first, then buys.

    Sells come first and their proceeds fund the buys. When the buys cost more than the
    cash available, every buy is scaled down by the same ratio and rounded down to whole
    shares, which keeps cash ≥ 0 without a sequential loop over stocks. Costs are
    ``cost_pct`` of each traded notional. The local paper broker fills the orders queued
    for an open with this same function.
    """
    proceeds = (sold * price).sum(dim=1)
    cost = proceeds * cost_pct
    cash = cash + proceeds - cost

    need = (bought * price).sum(dim=1) * (1.0 + cost_pct)
    ratio = torch.where(need > cash, cash / need.clamp(min=1e-12), torch.ones_like(cash))
    bought = torch.floor(bought * ratio.unsqueeze(1))
    spend = (bought * price).sum(dim=1)
    cost = cost + spend * cost_pct
    cash = (cash - spend * (1.0 + cost_pct)).clamp(min=0.0)
    return Fill(cash=cash, shares=shares - sold + bought, sold=sold, bought=bought, cost=cost)


def execute_orders(
    cfg: EnvConfig,
    action: torch.Tensor,
    cash: torch.Tensor,
    shares: torch.Tensor,
    close: torch.Tensor,
    price: torch.Tensor,
    liquidate: torch.Tensor | None = None,
) -> Fill:
    """Turn actions in [-1, 1]^n, taken at ``close``, into integer trades filled at ``price``
    (eq. 3–4): the orders of :func:`orders`, filled by :func:`fill_orders`."""
    sold, bought = orders(cfg, action, cash, shares, close, liquidate)
    return fill_orders(sold, bought, cash, shares, price, cfg.cost_pct)
