"""Orders: what an action asks for, and how a batch of whole-share orders fills (finrl-podracer
§3, eq. 3–4; docs/design.md, The market MDP).

The env, serving (``tasks/registry/serving.py``) and the paper broker (``tasks/delivery/broker``)
all turn actions into orders and fill them with these functions, so a paper fill follows the
training rules: sells first, buys scaled down together when the cash is short, whole shares,
``cost_pct`` on every traded notional.

Ragged universes (docs/data.md): an action never buys a stock that is not tradable at the bar it
sees, and a position in one is sold. In the env, a stock with no tradable bar at the fill's
open is not bought, and a position in it is closed out at its last real close (the rule of
docs/data.md: the close of the last bar it traded).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trainers.config import EnvConfig


@dataclass
class Fill:
    """Result of :func:`fill_orders` for a batch of accounts."""

    cash: torch.Tensor
    shares: torch.Tensor
    sold: torch.Tensor
    bought: torch.Tensor
    cost: torch.Tensor
    price: torch.Tensor
    """``[E, n]`` the price each stock filled at (the open, or the last real close on a close-out)."""


WEIGHT_LOGITS = 5.0
"""``action: weights``: logits are ``WEIGHT_LOGITS · a``, cash's is 0, so one stock may weigh
up to e^10 times another and cash can be all but emptied."""


def target_orders(
    action: torch.Tensor, cash: torch.Tensor, shares: torch.Tensor, close: torch.Tensor,
    liquidate: torch.Tensor | None = None, tradable: torch.Tensor | None = None, band: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Shares each account sells and buys to move to the target weights of ``action``
    (``action: weights``): the account is valued at ``close`` (the bar it has just seen),
    each stock's target is ``floor(w_i · value / close_i)`` whole shares, and the orders are
    the differences. :func:`fill_orders` fills them at the next open like any other (sells
    first; buys scaled down when the open costs more than the cash). The turbulence gate
    liquidates as in :func:`intended_orders`. Stocks that are not ``tradable`` ``[E, n]``
    leave the softmax: their weight is 0 and the others share the allocation.

    ``band`` is a no-trade band: an order whose notional at ``close`` is below ``band`` times
    the account's value is not sent, so a portfolio near its target is left to drift
    instead of paying costs for small corrections (daily rebalancing to fixed weights sells
    every winner, which is anti-momentum). The gate and close-outs ignore the band.
    """
    logits = action.to(torch.float64) * WEIGHT_LOGITS
    if tradable is not None:
        logits = torch.where(tradable, logits, -torch.inf)
    logits = torch.cat((logits, torch.zeros_like(cash).unsqueeze(1)), dim=1)
    sold, bought = rebalance_orders(torch.softmax(logits, dim=1)[:, :-1], cash, shares, close, band)
    return _gated(sold, bought, shares, liquidate)


def rebalance_orders(
    weights: torch.Tensor, cash: torch.Tensor, shares: torch.Tensor, close: torch.Tensor, band: float = 0.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """(sold, bought) whole shares that move each account to ``weights`` ``[E, n]`` (the rest
    in cash), the account valued at ``close``: targets are ``floor(w_i · value / close_i)``.
    A stock whose order is worth less than ``band`` × the value is left where it is."""
    value = (cash + (shares * close).sum(dim=1)).unsqueeze(1)
    target = torch.floor(weights * value / close)
    if band > 0:
        target = torch.where((target - shares).abs() * close < band * value, shares, target)
    return (shares - target).clamp(min=0.0), (target - shares).clamp(min=0.0)


def _gated(sold: torch.Tensor, bought: torch.Tensor, shares: torch.Tensor,
           liquidate: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Where ``liquidate`` ``[E]`` is true, sell every holding and buy nothing."""
    return (sold, bought) if liquidate is None else close_out(sold, bought, shares, liquidate.unsqueeze(1))


def close_out(sold: torch.Tensor, bought: torch.Tensor, shares: torch.Tensor,
              where: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Where ``where`` (``[E, n]``, or ``[E, 1]`` for whole accounts) is true, sell the whole
    holding and buy nothing; elsewhere keep the orders."""
    return torch.where(where, shares, sold), torch.where(where, torch.zeros_like(bought), bought)


def orders(
    cfg: EnvConfig, action: torch.Tensor, cash: torch.Tensor, shares: torch.Tensor, close: torch.Tensor,
    liquidate: torch.Tensor | None = None, tradable: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The (sold, bought) whole-share orders ``action`` asks for, by ``cfg.action``: the
    one function the env and serving both call, so paper orders follow the training rules.
    A stock that is not ``tradable`` (``[E, n]``, at the bar the action saw) is never bought
    and a position in it is sold."""
    if cfg.action == "weights":
        target = action if cfg.tilt is None else ranked(action, cfg.tilt, tradable)
        sold, bought = target_orders(target, cash, shares, close, liquidate, tradable, cfg.rebalance_band)
    else:
        sold, bought = intended_orders(action, shares, cfg.hmax, liquidate)
    return _untradable_sold(sold, bought, shares, tradable)


def ranked(scores: torch.Tensor, tilt: float, scored: torch.Tensor | None = None) -> torch.Tensor:
    """The ``weights`` action ``tanh(tilt · z)`` of scores ``[E, n]``: ``z`` is each row's
    cross-sectional z-score over the ``scored`` stocks (default: all), 0 elsewhere and where a
    row has fewer than two of them (``env.tilt``; the held-ranking rules of ``benchmarks/rules.py``)."""
    s = scores.to(torch.float64)
    live = torch.ones_like(s, dtype=torch.bool) if scored is None else scored
    count = live.sum(dim=-1, keepdim=True)
    mean = torch.where(live, s, 0.0).sum(dim=-1, keepdim=True) / count.clamp(min=1)
    var = torch.where(live, (s - mean) ** 2, 0.0).sum(dim=-1, keepdim=True) / (count - 1).clamp(min=1)
    z = torch.where(live & (count > 1), (s - mean) / var.sqrt().clamp(min=1e-12), 0.0)
    return torch.tanh(tilt * z)


def held_orders(
    shares: torch.Tensor, liquidate: torch.Tensor | None = None, tradable: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The orders of a bar between two decisions (``env.decide_every`` > 1): none, except
    what :func:`orders` does whatever the action, the turbulence gate's liquidation and the
    sale of a stock that is not ``tradable``. The env and serving both call it."""
    none = torch.zeros_like(shares)
    return _untradable_sold(*_gated(none, none, shares, liquidate), shares, tradable)


def _untradable_sold(sold: torch.Tensor, bought: torch.Tensor, shares: torch.Tensor,
                     tradable: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    return (sold, bought) if tradable is None else close_out(sold, bought, shares, ~tradable)


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
    return Fill(cash=cash, shares=shares - sold + bought, sold=sold, bought=bought, cost=cost,
                price=price.expand_as(shares))


def execute_orders(
    cfg: EnvConfig,
    action: torch.Tensor | None,
    cash: torch.Tensor,
    shares: torch.Tensor,
    close: torch.Tensor,
    price: torch.Tensor,
    liquidate: torch.Tensor | None = None,
    tradable: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> Fill:
    """Turn actions in [-1, 1]^n, taken at ``close``, into integer trades filled at ``price``
    (eq. 3–4): the orders of :func:`orders`, filled by :func:`fill_orders`. A ``None``
    action is a bar between decisions: :func:`held_orders`.

    ``tradable`` is the (bar seen, bar filled) masks ``[E, n]``: see :func:`orders` for the
    first; where the second is false the stock is not bought and a position in it is sold at
    ``close``, its last real close, instead of the open it does not have."""
    now, then = (None, None) if tradable is None else tradable
    if action is None:
        sold, bought = held_orders(shares, liquidate, now)
    else:
        sold, bought = orders(cfg, action, cash, shares, close, liquidate, now)
    return fill_next(sold, bought, cash, shares, close, price, cfg.cost_pct, then)


def fill_next(
    sold: torch.Tensor, bought: torch.Tensor, cash: torch.Tensor, shares: torch.Tensor, close: torch.Tensor,
    price: torch.Tensor, cost_pct: float, then: torch.Tensor | None = None,
) -> Fill:
    """Fill orders decided at ``close`` at the next bar's ``price`` with :func:`fill_orders`;
    where ``then`` ``[E, n]`` is false (no tradable bar there) the stock is not bought and a
    position in it is sold at ``close``, its last real close. The env and the rule-based
    baselines (``trainers/common/evaluate.py``) fill through here."""
    if then is not None:
        sold, bought = close_out(sold, bought, shares, ~then)
        price = torch.where(then, price, close)
    return fill_orders(sold, bought, cash, shares, price, cost_pct)
