"""An ensemble policy: several trained actors that decide together as one.

FinRL-Podracer's evolution keeps the best agents of a population (finrl-podracer §4.2,
the evaluator and selector) and argues that "ensemble multiple weak agents is preferable to
aiming to train one strong agent" (§6); ElegantRL-podracers' tournament fills its training
pool with agents "initialized with different DRL algorithms for an ensemble purpose"
(elegantrl-podracers §3). An :class:`Ensemble` serves the leaders of such a pool together.

It keeps :class:`trainers.common.nets.Actor`'s contract, ``forward(state) -> action in (-1, 1)^n``,
so the env, the backtest, the MLflow pyfunc and the broker loop use it unchanged: the
members vote in the space the env's orders are made in (``trainers/common/orders.py``), and the
vote is written back as one action.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from trainers.common.nets import Actor
from trainers.common.orders import WEIGHT_LOGITS


class Ensemble(nn.Module):
    """Actors that decide by averaging, per ``env.action``:

    - ``weights``: the target allocation is the mean of the members' allocations,
      ``w̄ = mean_k softmax([WEIGHT_LOGITS · a_k, 0])`` over the n stocks and cash, and the
      action returned is the one whose allocation is ``w̄``:
      ``a_i = log(w̄_i / w̄_cash) / WEIGHT_LOGITS``. It lies in (-1, 1) because ``w̄_i / w̄_cash``
      is a cash-weighted mean of the members' ratios, each in (e^-5, e^5). Where a stock is
      not tradable, :func:`trainers.common.orders.target_orders` drops it from the softmax and shares
      its weight out among the rest; the ensemble's allocation is then the members' mean of
      their *unmasked* allocations renormalised over the tradable stocks and cash, not the
      mean of their masked allocations (the two are equal when every stock trades).
    - ``shares``: the mean of the members' actions, a vote on each order's fraction of ``hmax``.

    With ``env.tilt`` the env ranks whatever action it gets (:func:`trainers.common.orders.ranked`),
    so a ``weights`` ensemble then trades the ranking of its members' mean allocation.
    """

    def __init__(self, members: Sequence[Actor], action: str):
        super().__init__()
        if not members:
            raise ValueError("an ensemble needs at least one member")
        if action not in ("weights", "shares"):
            raise ValueError(f"ensemble action must be weights or shares, not {action!r}")
        self.members = nn.ModuleList(members)
        self.action = action

    def member_actions(self, state: torch.Tensor) -> torch.Tensor:
        """Each member's deterministic action, ``[K, ..., n]``."""
        return torch.stack([member(state) for member in self.members])

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        """The ensemble's deterministic action in (-1, 1), in the state's dtype."""
        actions = self.member_actions(state)
        if self.action == "shares":
            return actions.mean(dim=0).to(state.dtype)
        return mean_allocation_action(actions).to(state.dtype)


def mean_allocation_action(actions: torch.Tensor) -> torch.Tensor:
    """The ``weights`` action (float64) whose allocation is the mean of the allocations of
    ``actions`` ``[K, ..., n]``. Log-space throughout (log-softmax, then a logsumexp over the
    members), so a member that puts nearly all its weight on one asset loses no precision."""
    logits = actions.to(torch.float64) * WEIGHT_LOGITS
    logits = torch.cat((logits, torch.zeros_like(logits[..., :1])), dim=-1)
    log_w = torch.logsumexp(torch.log_softmax(logits, dim=-1), dim=0) - math.log(actions.shape[0])
    return (log_w[..., :-1] - log_w[..., -1:]) / WEIGHT_LOGITS
