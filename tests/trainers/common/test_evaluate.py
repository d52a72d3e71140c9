"""Fixed-window episodes against hand-computed account values: buy-and-hold and a policy.

One 3-bar, 2-stock market. The window (0, 2) starts at bar 0's close, so every order fills
at a later bar's open and every value is marked at a later bar's close (docs/design.md, The market MDP).
"""

import dataclasses

import numpy as np
import torch

from tests.trainers.helpers import market
from trainers.common.env import MarketData
from trainers.common.evaluate import WARMUP, buy_and_hold, chunk_plan, run_policies, run_policy
from trainers.common.nets import Actor
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


def test_a_chunk_plan_tiles_the_window_on_the_single_passs_decision_grid():
    # 1,000 bars, a decision every 5, 4 chunks, a warm-up of at least 250: stretches of
    # (1000 - 250) // 20 · 5 = 185 bars from bars 0, 185, 370, 555; each account trades
    # 1000 - 4 · 185 = 260 bars of warm-up and its 185, so the last ends at bar 1,000.
    assert chunk_plan((0, 1000), 5, 4, 250) == ([0, 185, 370, 555], 260)
    assert chunk_plan((100, 1100), 5, 4, 250) == ([100, 285, 470, 655], 260)
    assert chunk_plan((0, 1000), 5, 1, 250) == ([0], 0)  # the single pass
    assert chunk_plan((0, 260), 5, 4, 250) == ([0], 0)  # too short for a decision per stretch


def test_chunks_chain_each_stretchs_own_returns_after_its_warm_up():
    """Each stretch's returns are those of an account started flat at its chunk's start, its
    warm-up dropped; the first chunk's values are the single pass's, bar for bar."""
    data = market(t=1200, n=3, k=2, seed=3)
    cfg = EnvConfig(initial_cash=10_000.0, hmax=20, decide_every=3, action="weights", rebalance_band=0.01)
    sc = StateScales(1 / cfg.initial_cash, 1 / cfg.hmax, tuple(data.close[0].tolist()))
    torch.manual_seed(0)
    actors = [Actor(1 + 3 * 2 + 3 * 2, 3, (4,), -0.5) for _ in range(2)]

    def policy(states: torch.Tensor) -> torch.Tensor:  # each account's chunks in a row
        rows = states.view(2, -1, states.shape[-1])
        return torch.cat([actor(rows[i]) for i, actor in enumerate(actors)])

    window = (20, 1180)
    starts, warm = chunk_plan(window, 3, 3)
    assert len(starts) == 3 and warm >= WARMUP
    chunked = run_policies(policy, data, sc, cfg, window, 2, chunks=3)
    single = run_policies(policy, data, sc, cfg, window, 2)
    length = window[1] - starts[-1]
    np.testing.assert_array_equal(chunked[: length + 1], single[: length + 1])
    for i, actor in enumerate(actors):
        growth = [chunked[1 : length + 1, i] / chunked[:length, i]]
        for start in starts[1:]:
            alone = run_policy(actor, data, sc, cfg, (start, start + length))
            growth.append(alone[warm + 1 :] / alone[warm:-1])
        np.testing.assert_allclose(chunked[1:, i] / chunked[:-1, i], np.concatenate(growth), rtol=1e-12)
    assert chunked.shape == single.shape and not np.array_equal(chunked, single)
