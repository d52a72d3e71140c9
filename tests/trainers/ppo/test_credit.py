"""Per-stock credit (``ppo.credit: per_stock``): each stock's difference reward, by hand, and a
shared scorer that learns from it."""

import dataclasses

import pytest
import torch

from tests.trainers.helpers import ragged_market
from trainers.common.env import MarketData, MarketEnv
from trainers.common.state import StateScales, StockLayout
from trainers.config import EnvConfig, PPOConfig
from trainers.ppo.agent import Learner
from trainers.ppo.ppo import PPO

CFG = EnvConfig(initial_cash=10_000.0, hmax=10, cost_pct=0.01, reward_scale=1.0, episode_len=8, min_episode_len=1)
F64 = torch.float64


def exactly(values: list[float]):
    """The credits are float32: equal to the hand-computed values to float32's precision."""
    return pytest.approx(values, rel=1e-6, abs=1e-6)


def two_stocks() -> MarketEnv:
    close = torch.tensor([[100.0, 50.0], [110.0, 50.0], [120.0, 60.0], [130.0, 70.0]], dtype=F64)
    open_ = torch.tensor([[100.0, 50.0], [105.0, 52.0], [115.0, 58.0], [125.0, 66.0]], dtype=F64)
    data = MarketData(open=open_, close=close, features=torch.zeros(4, 2, 1))
    env = MarketEnv(data, StateScales(1e-4, 0.1, (100.0, 50.0)), CFG, 1, (0, 3), random_start=False)
    env.reset()
    return env


def credit(env: MarketEnv, action: list[float], baseline: list[float]) -> list[float]:
    step = env.step(torch.tensor([action]), baseline=torch.tensor([baseline]))
    assert step.credit is not None
    return step.credit[0].tolist()


def test_each_stock_is_credited_what_its_trade_earned_to_the_next_open_less_the_baselines():
    env = two_stocks()
    # sampled: 5 A, 3 B at bar 1's open (105, 52); baseline: 2 A. Marked at bar 2's open (115, 58), 1% costs.
    a = 5 * (115 - 105) - 5 * 105 * 0.01 - (2 * (115 - 105) - 2 * 105 * 0.01)
    b = 3 * (58 - 52) - 3 * 52 * 0.01
    assert credit(env, [0.5, 0.3], [0.2, 0.0]) == exactly([a, b])
    assert env.shares.tolist() == [[5.0, 3.0]]  # the account follows the sampled action, not the baseline


def test_with_the_excess_reward_each_share_is_credited_over_the_equal_weight_markets_growth():
    """The same trades as above, each counted over what its money made in the market: from the
    fill (105, 52) to the mark (115, 58) the stocks grow by 115/105 and 58/52, the equal-weight
    market by their mean. Buying more of every stock earns nothing by itself."""
    env = two_stocks()
    env.cfg = dataclasses.replace(CFG, reward="excess")
    market = (115 / 105 + 58 / 52) / 2 - 1
    a = 3 * (115 - 105) - 3 * 105 * 0.01 - 3 * 105 * market  # 3 more A than the baseline
    b = 3 * (58 - 52) - 3 * 52 * 0.01 - 3 * 52 * market
    assert credit(env, [0.5, 0.3], [0.2, 0.0]) == exactly([a, b])
    assert a < 0 < b  # A grew less than the market, B more: A's extra shares lose their credit


def test_holdings_from_before_the_step_cancel_and_the_last_bar_is_marked_at_its_close():
    env = two_stocks()
    env.step(torch.tensor([[0.5, 0.3]]))
    assert credit(env, [0.0, 0.0], [0.0, 0.0]) == [0.0, 0.0]  # 5 A and 3 B earn 40 and 18, in both
    # bar 2 -> 3 is the last step: a baseline that sells everything at bar 3's open (125, 66) is
    # compared with holding to bar 3's close (130, 70)
    assert credit(env, [0.0, 0.0], [-1.0, -1.0]) == exactly(
        [5 * (130 - 125) + 5 * 125 * 0.01, 3 * (70 - 66) + 3 * 66 * 0.01])


def test_a_stock_that_stops_trading_is_marked_at_the_close_where_the_env_closes_it_out():
    data = ragged_market()  # A trades at bars 0-1 only; B lists at bar 1
    env = MarketEnv(data, StateScales(1e-4, 0.1, (100.0, 50.0)), CFG, 1, (0, 3), random_start=False)
    env.reset()
    # 5 A bought at 105 are marked at A's last real close, 110 (not the 999 open of bar 2); B was not listed
    assert credit(env, [0.5, 1.0], [0.0, 0.0]) == exactly([5 * (110 - 105) - 5 * 105 * 0.01, 0.0])


def test_with_flatten_a_trade_is_credited_to_the_session_close_where_it_is_sold():
    data = two_stocks().data
    data.session_last = torch.tensor([False, True, False, False])  # bar 1 closes its session
    cfg = dataclasses.replace(CFG, overnight="flatten")
    env = MarketEnv(data, StateScales(1e-4, 0.1, (100.0, 50.0)), cfg, 1, (0, 3), random_start=False)
    env.reset()
    # sampled: 5 A, 3 B at bar 1's open (105, 52), sold at bar 1's close (110, 50), 1% on both trades;
    # baseline: 2 A, sold alike. Not marked at bar 2's open: the account holds nothing over the gap.
    a = 5 * (110 * 0.99 - 105) - 5 * 105 * 0.01 - (2 * (110 * 0.99 - 105) - 2 * 105 * 0.01)
    b = 3 * (50 * 0.99 - 52) - 3 * 52 * 0.01
    assert credit(env, [0.5, 0.3], [0.2, 0.0]) == exactly([a, b])
    assert env.shares.tolist() == [[0.0, 0.0]]


def signal_market(t: int = 160, n: int = 4, seed: int = 0) -> MarketData:
    """Each stock's feature at bar t is the sign of its move from the open of t+1 to that of t+2
    (2%); opens equal closes. A scorer that reads the feature earns, one that ignores it does not."""
    g = torch.Generator().manual_seed(seed)
    sign = torch.randint(0, 2, (t, n), generator=g).to(F64) * 2 - 1
    log_price = torch.zeros(t, n, dtype=F64)
    log_price[2:] = torch.cumsum(0.02 * sign[:-2], 0)
    price = 50 * torch.exp(log_price)
    return MarketData(open=price, close=price.clone(), features=sign.to(torch.float32).unsqueeze(-1))


def sign_gap(credit: str) -> float:
    """Train a shared scorer on :func:`signal_market` (16 stocks) for 8 PPO iterations; the
    mean pre-``tanh`` score of a stock whose feature says "rises" less that of one that says "falls"."""
    data = signal_market(n=16)
    env_cfg = dataclasses.replace(CFG, action="weights", initial_cash=1e6, reward_scale=1e-4, episode_len=64,
                                  min_episode_len=32)
    scales = StateScales(1e-6, 0.1, tuple(data.close[0].tolist()))
    cfg = PPOConfig(num_envs=8, horizon=32, batch_size=64, repeat_times=4, net_dims=(8,), lr=3e-3,
                    policy="shared", credit=credit)
    env = MarketEnv(data, scales, env_cfg, cfg.num_envs, (0, 150), seed=1)
    learner = Learner.fresh(env.state_dim, env.action_dim, cfg, seed=1, device=torch.device("cpu"),
                            layout=StockLayout(data.n_stocks, data.n_features, scales))
    ppo = PPO([learner], [env], cfg)
    for _ in range(8):
        ppo.train_iteration([0])
    ppo.write_back()
    state = env.observe()[:1]
    up, down = state.clone(), state.clone()
    first = env.head + data.n_stocks  # the features follow the account and the prices
    up[0, first:], down[0, first:] = 1.0, -1.0
    return (learner.actor.mean(up) - learner.actor.mean(down)).mean().item()


def test_a_shared_scorer_learns_the_sign_from_its_per_stock_credit_where_one_portfolio_advantage_barely_moves_it():
    per_stock, joint = sign_gap("per_stock"), sign_gap("joint")
    assert per_stock > 1.5, per_stock  # measured 2.41: a stock about to rise scores far above one about to fall
    assert joint < 0.5, joint  # measured 0.105: 16 actions share one advantage, in the same budget


def test_a_held_decision_is_credited_to_the_open_of_the_next_decision():
    env = two_stocks()
    env.cfg = dataclasses.replace(CFG, decide_every=2)
    # decided at bar 0, filled at bar 1's open (105, 52), held through bar 2: marked at bar 3's open (125, 66)
    a = 5 * (125 - 105) - 5 * 105 * 0.01 - (2 * (125 - 105) - 2 * 105 * 0.01)
    b = 3 * (66 - 52) - 3 * 52 * 0.01
    assert credit(env, [0.5, 0.3], [0.2, 0.0]) == exactly([a, b])
    assert env.t.item() == 2 and env.shares.tolist() == [[5.0, 3.0]]
