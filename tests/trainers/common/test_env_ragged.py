"""A ragged universe in the env, by hand (docs/data.md, Ragged universes): untradable stocks are masked from the
state, never bought, and a position in a stock that stops trading is closed out at its last
real close."""

import torch

from tests.trainers.helpers import ragged_market
from trainers.common.env import MarketData, MarketEnv
from trainers.common.orders import orders
from trainers.common.state import StateScales
from trainers.config import EnvConfig

CFG = EnvConfig(initial_cash=10_000.0, hmax=10, cost_pct=0.01, episode_len=8, min_episode_len=1)
F64 = torch.float64


def env_at_bar_0(cfg: EnvConfig = CFG) -> tuple[MarketData, MarketEnv]:
    data = ragged_market()
    env = MarketEnv(data, StateScales(1 / cfg.initial_cash, 1 / cfg.hmax, (100.0, 50.0)), cfg, 1, (0, 3),
                    random_start=False)
    return data, env


def test_an_untradable_stock_shows_the_policy_nothing():
    _, env = env_at_bar_0()
    state = env.reset()
    # [cash, shares A, shares B, price A, price B, feat A, feat B]: B is not listed at bar 0
    assert state[0].tolist() == [1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0]


def test_a_stock_not_yet_listed_is_never_bought():
    _, env = env_at_bar_0()
    env.reset()
    env.step(torch.tensor([[0.5, 1.0]]))  # B is tradable at bar 1 (the fill), but the action saw bar 0
    assert env.shares.tolist() == [[5.0, 0.0]]
    assert env.cash.item() == 10_000 - 5 * 105.0 * 1.01


def test_a_position_is_closed_out_at_the_last_real_close_when_the_stock_stops():
    _, env = env_at_bar_0()
    env.reset()
    env.step(torch.tensor([[0.5, 0.0]]))  # 5 A at 105
    before = 10_000 - 5 * 105.0 * 1.01
    step = env.step(torch.tensor([[1.0, 0.3]]))  # A has no bar at 2: sold at its close of bar 1, 110 (not 999)
    assert env.shares.tolist() == [[0.0, 3.0]]
    cash = before + 5 * 110.0 * 0.99 - 3 * 58.0 * 1.01
    assert abs(env.cash.item() - cash) < 1e-9
    assert abs(env.value.item() - (cash + 3 * 60.0)) < 1e-9
    expected = (cash + 3 * 60.0 - (before + 5 * 110.0)) * CFG.reward_scale
    assert abs(step.reward.item() - expected) < 1e-6


def test_target_weights_leave_untradable_stocks_out_of_the_softmax():
    cash = torch.tensor([1_000.0], dtype=F64)
    shares = torch.zeros((1, 2), dtype=F64)
    close = torch.tensor([[10.0, 10.0]], dtype=F64)
    mask = torch.tensor([[True, False]])
    cfg = EnvConfig(action="weights")
    sold, bought = orders(cfg, torch.zeros((1, 2)), cash, shares, close, tradable=mask)
    # softmax over (A, cash) = (1/2, 1/2): 50 shares of A; B is out (1/3 each if it were in)
    assert bought.tolist() == [[50.0, 0.0]] and sold.tolist() == [[0.0, 0.0]]


def test_a_held_stock_that_is_not_tradable_is_sold_by_the_order_rule():
    shares = torch.tensor([[4.0, 6.0]], dtype=F64)
    sold, bought = orders(CFG, torch.tensor([[1.0, 1.0]]), torch.tensor([0.0], dtype=F64), shares,
                          torch.tensor([[10.0, 10.0]], dtype=F64), tradable=torch.tensor([[True, False]]))
    assert sold.tolist() == [[0.0, 6.0]] and bought.tolist() == [[10.0, 0.0]]


def test_excess_reward_benchmarks_only_stocks_that_trade_at_both_closes():
    data = ragged_market()
    growth = data.market_growth()
    # 0->1: only A (110/100); 1->2: only B (60/50); 2->3: only B (70/60)
    expected = torch.log(torch.tensor([1.1, 1.2, 70 / 60], dtype=F64))
    torch.testing.assert_close(growth, expected)
