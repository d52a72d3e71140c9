"""Fixed-window episodes against hand-computed account values: buy-and-hold and a policy.

One 3-bar, 2-stock market. The window (0, 2) starts at bar 0's close, so every order fills
at a later bar's open and every value is marked at a later bar's close (docs/design.md, The market MDP).
"""

import dataclasses

import numpy as np
import torch

from trainers.common.env import MarketData
from trainers.common.evaluate import buy_and_hold, run_policies, run_policy
from trainers.common.state import StateScales
from trainers.config import EnvConfig

OPEN = [[9.0, 21.0], [10.0, 20.0], [11.5, 18.5]]
CLOSE = [[9.5, 20.5], [11.0, 19.0], [12.0, 18.0]]
CFG = EnvConfig(initial_cash=1_000.0, hmax=10, cost_pct=0.01, episode_len=2, min_episode_len=1)
SCALES = StateScales(1 / 1_000.0, 1 / 10, (9.5, 20.5))


def tiny_market() -> MarketData:
    return MarketData(open=torch.tensor(OPEN, dtype=torch.float64), close=torch.tensor(CLOSE, dtype=torch.float64),
                      features=torch.zeros(3, 2, 1))


def test_buy_and_hold_buys_equal_cash_at_the_first_open_and_marks_at_each_close():
    # 500 per stock at bar 1's open, whole shares after the 1% cost: floor(500 / 10.1) = 49,
    # floor(500 / 20.2) = 24; cash left 1000 - (49·10 + 24·20)·1.01 = 20.3.
    values = buy_and_hold(tiny_market(), CFG, (0, 2))
    np.testing.assert_allclose(values, [1_000.0, 49 * 11 + 24 * 19 + 20.3, 49 * 12 + 24 * 18 + 20.3], rtol=0, atol=1e-9)


def test_buy_and_hold_on_a_later_window_buys_at_that_windows_first_open():
    values = buy_and_hold(tiny_market(), CFG, (1, 2))  # buys at bar 2's open: floor(500 / 11.615) = 43, 26
    cash = 1_000.0 - (43 * 11.5 + 26 * 18.5) * 1.01
    np.testing.assert_allclose(values, [1_000.0, 43 * 12 + 26 * 18 + cash], rtol=0, atol=1e-9)


def constant(actions: list[list[float]]):
    """A policy that always returns ``actions``, one row per account."""
    return lambda state: torch.tensor(actions, dtype=torch.float32)


def test_a_policy_fills_at_the_next_open_and_is_marked_at_the_close():
    # Buy hmax = 10 of stock 0 each bar (stock 1 has nothing to sell): 10 at 10.0, then 10 at 11.5, 1% cost.
    values = run_policy(constant([[1.0, -1.0]]), tiny_market(), SCALES, CFG, (0, 2))
    cash1 = 1_000.0 - 100.0 * 1.01
    cash2 = cash1 - 115.0 * 1.01
    np.testing.assert_allclose(values, [1_000.0, cash1 + 10 * 11.0, cash2 + 20 * 12.0], rtol=0, atol=1e-9)


def test_a_held_policy_is_asked_once_and_marked_at_every_close():
    # env.decide_every 2: buy 10 of stock 0 at bar 1's open and hold; bar 2 is marked, not traded.
    calls = []

    def policy(state: torch.Tensor) -> torch.Tensor:
        calls.append(state)
        return torch.tensor([[1.0, -1.0]])

    values = run_policy(policy, tiny_market(), SCALES, dataclasses.replace(CFG, decide_every=2), (0, 2))
    cash = 1_000.0 - 100.0 * 1.01
    np.testing.assert_allclose(values, [1_000.0, cash + 10 * 11.0, cash + 10 * 12.0], rtol=0, atol=1e-9)
    assert len(calls) == 1


def test_run_policies_scores_one_account_per_row_of_the_batch():
    values = run_policies(constant([[1.0, -1.0], [0.0, 0.0]]), tiny_market(), SCALES, CFG, (0, 2), accounts=2)
    assert values.shape == (3, 2)
    np.testing.assert_allclose(values[:, 0], run_policy(constant([[1.0, -1.0]]), tiny_market(), SCALES, CFG, (0, 2)))
    np.testing.assert_array_equal(values[:, 1], [1_000.0] * 3)  # no orders, no costs


def test_a_window_that_ends_before_the_data_marks_only_its_own_closes():
    values = buy_and_hold(tiny_market(), CFG, (0, 1))
    np.testing.assert_allclose(values, [1_000.0, 49 * 11 + 24 * 19 + 20.3], rtol=0, atol=1e-9)
    assert run_policy(constant([[1.0, -1.0]]), tiny_market(), SCALES, CFG, (0, 1)).shape == (2,)
