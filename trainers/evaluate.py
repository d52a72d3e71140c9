"""Deterministic episodes over a fixed window: the evaluator's fitness runs and the backtest.

Both run through :class:`trainers.env.MarketEnv`, so they apply exactly the training
MDP: next-bar-open fills, sells before buys, integer shares, cash ≥ 0 and costs.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from trainers import profiler
from trainers.env import EnvConfig, MarketData, MarketEnv
from trainers.state import StateScales


Policy = Callable[[torch.Tensor], torch.Tensor]
"""Deterministic actions ``[E, A]`` in (-1, 1) for states ``[E, state_dim]`` (an Actor is one)."""


@torch.no_grad()
def run_policies(
    policy: Policy, data: MarketData, scales: StateScales, cfg: EnvConfig, window: tuple[int, int], accounts: int
) -> np.ndarray:
    """Account values ``[T + 1, accounts]`` at each close of ``window``, one account per row of
    ``policy``'s batch: the multiplexed evaluator scores N agents in one pass this way.

    Each account starts with ``initial_cash`` at the close of ``window[0]``; T is
    ``window[1] − window[0]``.
    """
    env = MarketEnv(data, scales, cfg, num_envs=accounts, window=window, random_start=False)
    state = env.reset()
    values = [env.account_value()]
    for _ in range(window[1] - window[0]):
        with profiler.operation("inference"):
            action = policy(state)
        with profiler.operation("simulation"):
            state = env.step(action).state
            values.append(env.value)
    return torch.stack(values).cpu().numpy().astype(np.float64)


def run_policy(
    actor: Policy, data: MarketData, scales: StateScales, cfg: EnvConfig, window: tuple[int, int]
) -> np.ndarray:
    """Account value at each close of ``window`` for one deterministic policy
    (``window[1] − window[0] + 1`` values)."""
    return run_policies(actor, data, scales, cfg, window, accounts=1)[:, 0]


def buy_and_hold(data: MarketData, cfg: EnvConfig, window: tuple[int, int]) -> np.ndarray:
    """Equal-weight buy-and-hold over ``window`` under the same fills and costs.

    Buys ``initial_cash / n`` of every stock, in whole shares, at the first open after
    ``window[0]`` (when the agent's first orders fill too) and holds to ``window[1]``.
    """
    t_lo, t_hi = window
    price = data.open[t_lo + 1]
    shares = torch.floor(cfg.initial_cash / data.n_stocks / (price * (1.0 + cfg.cost_pct)))
    cash = cfg.initial_cash - float((shares * price).sum()) * (1.0 + cfg.cost_pct)
    marks = (data.close[t_lo + 1 : t_hi + 1] * shares).sum(dim=1) + cash
    return np.concatenate(([cfg.initial_cash], marks.cpu().numpy().astype(np.float64)))
