import torch

from trainers.env import EnvConfig, MarketEnv, execute_orders
from trainers.state import state_dim

from .helpers import market, scales

CFG = EnvConfig(initial_cash=10_000.0, hmax=10, cost_pct=0.002, episode_len=8)


def test_sells_execute_before_buys_and_fund_them():
    price = torch.tensor([[100.0, 50.0]], dtype=torch.float64)
    fill = execute_orders(torch.tensor([[-1.0, 1.0]]), torch.tensor([0.0], dtype=torch.float64),
                          torch.tensor([[10.0, 0.0]], dtype=torch.float64), price, hmax=10, cost_pct=0.0)
    assert fill.shares.tolist() == [[0.0, 10.0]]  # the sale paid for the purchase
    assert fill.cash.item() == 500.0


def test_integer_shares_cash_never_negative_and_costs_exact():
    g = torch.Generator().manual_seed(1)
    for _ in range(50):
        price = torch.rand(16, 5, generator=g, dtype=torch.float64) * 200 + 1
        cash = torch.rand(16, generator=g, dtype=torch.float64) * 5_000
        shares = torch.randint(0, 20, (16, 5), generator=g).double()
        action = torch.rand(16, 5, generator=g) * 2 - 1
        fill = execute_orders(action, cash, shares, price, hmax=15, cost_pct=0.002)
        assert torch.equal(fill.shares, fill.shares.round()) and (fill.shares >= 0).all()
        assert (fill.cash >= 0).all()
        assert (fill.sold <= shares).all() and (fill.bought <= 15).all()
        traded = ((fill.sold + fill.bought) * price).sum(1)
        torch.testing.assert_close(fill.cost, traded * 0.002)
        value_before = cash + (shares * price).sum(1)
        value_after = fill.cash + (fill.shares * price).sum(1)
        torch.testing.assert_close(value_before - value_after, fill.cost)  # value is conserved up to costs


def test_an_action_actually_moves_holdings():
    """ElegantRL's env replaced actions with ones; here each stock follows its own action."""
    data = market()
    env = MarketEnv(data, scales(data, CFG), CFG, num_envs=1, window=(0, 39), random_start=False)
    env.reset()
    env.step(torch.tensor([[1.0, 0.0, 0.35]]))
    assert env.shares.tolist() == [[10.0, 0.0, 3.0]]
    env.step(torch.tensor([[-0.5, 0.0, 0.0]]))
    assert env.shares.tolist() == [[5.0, 0.0, 3.0]]  # the sell mask is per stock


def test_orders_fill_at_next_open_and_reward_marks_next_close():
    data = market()
    env = MarketEnv(data, scales(data, CFG), CFG, num_envs=1, window=(5, 39), random_start=False)
    env.reset()
    _, reward, truncated, _ = env.step(torch.tensor([[1.0, 0.0, 0.0]]))
    o, c = data.open[6, 0].item(), data.close[6, 0].item()
    cash = 10_000 - 10 * o * 1.002
    expected = (cash + 10 * c - 10_000) * CFG.reward_scale
    assert abs(reward.item() - expected) < 1e-6 and not truncated.item()
    assert env.t.item() == 6


def test_state_at_t_ignores_bars_after_t():
    data = market()
    env = MarketEnv(data, scales(data, CFG), CFG, num_envs=1, window=(0, 39), random_start=False)
    env.reset()
    for _ in range(10):
        env.step(torch.full((1, 3), 0.3))
    before = env.observe().clone()
    data.close[11:] *= 3
    data.open[11:] *= 3
    data.features[11:] += 5
    assert torch.equal(env.observe(), before)


def test_episodes_truncate_and_reset_inside_step():
    data = market()
    env = MarketEnv(data, scales(data, CFG), CFG, num_envs=64, window=(0, 39), seed=3)
    state = env.reset()
    assert state.shape == (64, state_dim(3, 2)) and state.dtype == torch.float32
    starts = env.t.clone()
    assert starts.unique().numel() > 5  # random start offsets per env
    ends = 0
    for _ in range(12):
        state, _, truncated, final = env.step(torch.rand(64, 3) * 2 - 1)
        ends += int(truncated.sum())
        assert torch.equal(env.cash[truncated], torch.full_like(env.cash[truncated], CFG.initial_cash))
        assert not torch.equal(final[truncated], state[truncated]) or not truncated.any()
    assert ends >= 64  # every env finished an 8-bar episode (or hit the end of data)
