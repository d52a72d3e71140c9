import dataclasses
import math

import pytest
import torch

from tests.trainers.helpers import market, ragged_market, scales
from trainers.common.env import MarketData, MarketEnv
from trainers.common.orders import execute_orders, orders, ranked, target_orders
from trainers.common.state import build_state, state_dim
from trainers.config import EnvConfig

CFG = EnvConfig(initial_cash=10_000.0, hmax=10, cost_pct=0.002, episode_len=8, min_episode_len=3)


def test_sells_execute_before_buys_and_fund_them():
    price = torch.tensor([[100.0, 50.0]], dtype=torch.float64)
    fill = execute_orders(EnvConfig(hmax=10, cost_pct=0.0), torch.tensor([[-1.0, 1.0]]),
                          torch.tensor([0.0], dtype=torch.float64), torch.tensor([[10.0, 0.0]], dtype=torch.float64),
                          price, price)
    assert fill.shares.tolist() == [[0.0, 10.0]]  # the sale paid for the purchase
    assert fill.cash.item() == 500.0


def test_integer_shares_cash_never_negative_and_costs_exact():
    g = torch.Generator().manual_seed(1)
    for _ in range(50):
        price = torch.rand(16, 5, generator=g, dtype=torch.float64) * 200 + 1
        cash = torch.rand(16, generator=g, dtype=torch.float64) * 5_000
        shares = torch.randint(0, 20, (16, 5), generator=g).double()
        action = torch.rand(16, 5, generator=g) * 2 - 1
        fill = execute_orders(EnvConfig(hmax=15, cost_pct=0.002), action, cash, shares, price, price)
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
    _, reward, truncated, *_ = env.step(torch.tensor([[1.0, 0.0, 0.0]]))
    o, c = data.open[6, 0].item(), data.close[6, 0].item()
    cash = 10_000 - 10 * o * 1.002
    expected = (cash + 10 * c - 10_000) * CFG.reward_scale
    assert abs(reward.item() - expected) < 1e-6 and not truncated.item()
    assert env.t.item() == 6


@pytest.mark.parametrize("cut", [3, 11, 25])
def test_state_at_t_ignores_bars_after_t(cut):
    """No look-ahead: a market that differs only after bar t gives bit-identical states up to t."""
    data = market()
    later = MarketData(data.open.clone(), data.close.clone(), data.features.clone())
    later.close[cut + 1 :] *= 3
    later.open[cut + 1 :] *= 0.5
    later.features[cut + 1 :] += 5
    envs = [MarketEnv(d, scales(data, CFG), CFG, 2, (0, 39), random_start=False) for d in (data, later)]
    states = [env.reset() for env in envs]
    assert torch.equal(*states)
    for _ in range(cut):
        action = torch.tensor([[0.7, -0.2, 0.4], [-0.5, 0.9, 0.1]])
        states = [env.step(action)[0] for env in envs]
        assert torch.equal(*states)


def test_turbulence_gate_blocks_buys_and_liquidates():
    data = market()
    data.turbulence = torch.zeros(40, dtype=torch.float64)
    data.turbulence[2] = 50.0  # observed at bar 2: the orders that fill at bar 3's open are gated
    cfg = EnvConfig(initial_cash=10_000.0, hmax=10, turbulence_threshold=30.0, episode_len=8, min_episode_len=3)
    env = MarketEnv(data, scales(data, cfg), cfg, num_envs=1, window=(0, 39), random_start=False)
    env.reset()
    env.step(torch.tensor([[1.0, 1.0, 0.0]]))
    env.step(torch.tensor([[0.0, 0.0, 0.0]]))
    assert env.shares.tolist() == [[10.0, 10.0, 0.0]]
    env.step(torch.tensor([[1.0, 1.0, 1.0]]))  # wants to buy; the gate sells everything instead
    assert env.shares.tolist() == [[0.0, 0.0, 0.0]]
    env.step(torch.tensor([[1.0, 0.0, 0.0]]))  # calm again
    assert env.shares.tolist() == [[10.0, 0.0, 0.0]]


def test_the_env_state_is_the_serving_state():
    """One state builder: the env's cached bar rows give exactly build_state's output."""
    data = market()
    env = MarketEnv(data, scales(data, CFG), CFG, num_envs=5, window=(0, 39), seed=2)
    env.reset()
    for _ in range(6):
        state, *_ = env.step(torch.rand(5, 3) * 2 - 1)
    expected = build_state(env.cash, env.shares, data.close[env.t], data.features[env.t], env.scales)
    assert torch.equal(state, expected)


def test_episodes_truncate_and_reset_inside_step():
    data = market()
    env = MarketEnv(data, scales(data, CFG), CFG, num_envs=64, window=(0, 39), seed=3)
    state = env.reset()
    assert state.shape == (64, state_dim(3, 2)) and state.dtype == torch.float32
    assert env.t.unique().numel() > 5  # random start offsets per env
    lengths = env.t_end - env.t
    assert lengths.unique().numel() > 2 and lengths.max() <= CFG.episode_len  # random lengths
    assert ((lengths >= CFG.min_episode_len) | (env.t_end == 39)).all()
    ends = 0
    for _ in range(12):
        step = env.step(torch.rand(64, 3) * 2 - 1)
        state, truncated, final = step.state, step.truncated, step.last_states()
        assert torch.equal(step.final.index, truncated.nonzero().squeeze(1))  # CPU: only those
        ends += int(truncated.sum())
        assert torch.equal(env.cash[truncated], torch.full_like(env.cash[truncated], CFG.initial_cash))
        assert not torch.equal(final[truncated], state[truncated]) or not truncated.any()
    assert ends >= 64  # every env finished an episode of at most 8 bars (or hit the end of data)


def test_target_weights_become_whole_share_orders_by_hand():
    cash, close = torch.tensor([1000.0], dtype=torch.float64), torch.tensor([[10.0, 20.0]], dtype=torch.float64)
    flat = torch.zeros(1, 2, dtype=torch.float64)
    # logits (0, 0, 0): a third each -> floor(333.3 / 10) = 33 and floor(333.3 / 20) = 16
    sold, bought = target_orders(torch.zeros(1, 2), cash, flat, close)
    assert sold.tolist() == [[0.0, 0.0]] and bought.tolist() == [[33.0, 16.0]]
    # logits (5, -5, 0): e^5 / (e^5 + e^-5 + 1) = 0.99326 of 1000 -> 99 shares; e^-5 / ... -> 0
    assert target_orders(torch.tensor([[1.0, -1.0]]), cash, flat, close)[1].tolist() == [[99.0, 0.0]]
    # holding 50 and 10 shares with no cash: value 700, a third each -> 23 and 11 shares
    sold, bought = target_orders(torch.zeros(1, 2), torch.zeros(1, dtype=torch.float64),
                                 torch.tensor([[50.0, 10.0]], dtype=torch.float64), close)
    assert sold.tolist() == [[27.0, 0.0]] and bought.tolist() == [[0.0, 1.0]]


def test_the_no_trade_band_drops_small_orders_only_by_hand():
    close = torch.tensor([[10.0, 20.0]], dtype=torch.float64)
    cash, held = torch.zeros(1, dtype=torch.float64), torch.tensor([[50.0, 10.0]], dtype=torch.float64)
    # value 700, targets 23 and 11 shares: sell 27 x 10 = 270 (38.6%), buy 1 x 20 = 20 (2.86%)
    cfg = EnvConfig(action="weights", rebalance_band=0.03)
    sold, bought = orders(cfg, torch.zeros(1, 2), cash, held, close)
    assert sold.tolist() == [[27.0, 0.0]] and bought.tolist() == [[0.0, 0.0]]
    sold, bought = orders(EnvConfig(action="weights", rebalance_band=0.02), torch.zeros(1, 2), cash, held, close)
    assert sold.tolist() == [[27.0, 0.0]] and bought.tolist() == [[0.0, 1.0]]
    sold, bought = orders(EnvConfig(action="weights", rebalance_band=0.5), torch.zeros(1, 2), cash, held, close)
    assert sold.tolist() == [[0.0, 0.0]] and bought.tolist() == [[0.0, 0.0]]
    # the turbulence gate and a stock that stops trading still sell the whole holding
    sold, _ = target_orders(torch.zeros(1, 2), cash, held, close, torch.tensor([True]), band=0.5)
    assert sold.tolist() == [[50.0, 10.0]]
    sold, _ = orders(EnvConfig(action="weights", rebalance_band=0.5), torch.zeros(1, 2), cash, held, close,
                     tradable=torch.tensor([[True, False]]))
    assert sold.tolist() == [[0.0, 10.0]]


def test_the_gate_liquidates_a_weights_account_too():
    shares = torch.tensor([[5.0, 3.0]], dtype=torch.float64)
    sold, bought = target_orders(torch.ones(1, 2), torch.tensor([100.0], dtype=torch.float64), shares,
                                 torch.tensor([[10.0, 20.0]], dtype=torch.float64), torch.tensor([True]))
    assert sold.tolist() == [[5.0, 3.0]] and bought.tolist() == [[0.0, 0.0]]


def test_orders_follow_the_configured_action():
    cash, close = torch.tensor([1000.0], dtype=torch.float64), torch.tensor([[10.0, 20.0]], dtype=torch.float64)
    flat, act = torch.zeros(1, 2, dtype=torch.float64), torch.tensor([[0.5, 0.5]])
    assert orders(EnvConfig(hmax=10), act, cash, flat, close)[1].tolist() == [[5.0, 5.0]]
    assert orders(EnvConfig(hmax=10, action="weights"), act, cash, flat, close)[1].tolist() == \
        target_orders(act, cash, flat, close)[1].tolist()


def test_a_tilt_trades_the_ranking_of_the_action_by_hand():
    # scores (1, 2, 3, 10) over tradable (T, T, T, F): mean 2, sd 1 -> z (-1, 0, 1, 0)
    scores = torch.tensor([[1.0, 2.0, 3.0, 10.0]])
    live = torch.tensor([[True, True, True, False]])
    expected = [math.tanh(-0.5), 0.0, math.tanh(0.5), 0.0]
    assert ranked(scores, 0.5, live).tolist()[0] == pytest.approx(expected, abs=1e-15)
    assert ranked(scores * 7 + 3, 0.5, live).tolist()[0] == pytest.approx(expected, abs=1e-15)  # scale-free
    assert ranked(torch.tensor([[4.0, 9.0]]), 1.0, torch.tensor([[True, False]])).tolist() == [[0.0, 0.0]]
    cash, close = torch.tensor([1000.0], dtype=torch.float64), torch.tensor([[10.0, 20.0]], dtype=torch.float64)
    flat, act = torch.zeros(1, 2, dtype=torch.float64), torch.tensor([[0.1, 0.3]])
    # two stocks: z (-0.707, 0.707); tilt 2 -> the target's action tanh(±1.414), whatever the action's scale
    tilted = orders(EnvConfig(action="weights", tilt=2.0), act, cash, flat, close)[1]
    assert tilted.tolist() == target_orders(torch.tanh(torch.tensor([[-2.0, 2.0]]) / math.sqrt(2)), cash, flat,
                                            close)[1].tolist()
    assert tilted.tolist() != orders(EnvConfig(action="weights"), act, cash, flat, close)[1].tolist()
    with pytest.raises(ValueError, match="tilt must be > 0, with action: weights"):
        EnvConfig(action="shares", tilt=1.0)


def test_a_decision_is_held_for_decide_every_bars_by_hand():
    data = market()
    cfg = dataclasses.replace(CFG, decide_every=3)
    env = MarketEnv(data, scales(data, cfg), cfg, num_envs=1, window=(5, 12), random_start=False)
    env.reset()
    step = env.step(torch.tensor([[1.0, 0.0, 0.0]]))  # 10 A at bar 6's open, held through bars 7 and 8
    cash = 10_000 - 10 * data.open[6, 0].item() * 1.002
    marks = [cash + 10 * data.close[t, 0].item() for t in (6, 7, 8)]
    assert env.t.item() == 8 and env.shares.tolist() == [[10.0, 0.0, 0.0]]
    assert step.path is not None and step.path[:, 0].tolist() == pytest.approx(marks, rel=1e-12)
    assert step.reward.item() == pytest.approx((marks[-1] - 10_000) * cfg.reward_scale, rel=1e-6)
    env.step(torch.tensor([[1.0, 0.0, 0.0]]))  # the next decision buys 10 more at bar 9's open
    assert env.t.item() == 11 and env.shares.tolist() == [[20.0, 0.0, 0.0]]
    last = env.step(torch.tensor([[1.0, 0.0, 0.0]]))  # one bar left in the window
    assert env.t.item() == 12 and last.truncated.item() and last.path is not None and len(last.path) == 1


def test_a_held_bar_still_gates_and_closes_out():
    data = market()
    data.turbulence = torch.zeros(40, dtype=torch.float64)
    data.turbulence[7] = 50.0  # seen at bar 7, a held bar: everything is sold at bar 8's open
    cfg = dataclasses.replace(CFG, decide_every=4, turbulence_threshold=30.0)
    env = MarketEnv(data, scales(data, cfg), cfg, num_envs=1, window=(5, 39), random_start=False)
    env.reset()
    env.step(torch.tensor([[1.0, 1.0, 0.0]]))
    assert env.t.item() == 9 and env.shares.tolist() == [[0.0, 0.0, 0.0]]
    ragged = ragged_market()  # A stops trading after bar 1: a held bar 1 closes it out at its close
    cfg = dataclasses.replace(CFG, decide_every=3, initial_cash=1_000.0)
    env = MarketEnv(ragged, scales(ragged, cfg), cfg, num_envs=1, window=(0, 3), random_start=False)
    env.reset()
    env.step(torch.tensor([[0.5, 0.0]]))  # 5 A at bar 1's open (105), sold at bar 1's close (110)
    assert env.shares.tolist() == [[0.0, 0.0]]
    assert env.cash.item() == pytest.approx(1_000 - 5 * 105 * 1.002 + 5 * 110 * 0.998)


@pytest.mark.parametrize("cfg, compact", [
    (dataclasses.replace(CFG, episode_len=24, min_episode_len=8), True),  # spread lengths: K < E
    (dataclasses.replace(CFG, episode_len=6, min_episode_len=6), False),  # fixed lengths: K = E
])
def test_a_static_step_lists_the_truncated_final_states_the_cpu_step_lists(cfg, compact):
    """On the same draws, the static step's listed final states (index < E) are exactly the
    CPU step's, in order, and its padding carries index E; over many steps and resets."""
    data, envs = market(t=120), 256
    cpu, static = (MarketEnv(data, scales(data, cfg), cfg, envs, (0, 119), seed=7) for _ in range(2))
    static.static = True
    assert (static.slots.width < envs) == compact and not cpu.static
    cpu.reset(), static.reset()
    g = torch.Generator().manual_seed(0)
    ends = most = 0
    for _ in range(60):
        action = torch.rand(envs, 3, generator=g) * 2 - 1
        x, y = cpu.step(action), static.step(action)
        for u, v in zip(x[:3], y[:3]):
            assert torch.equal(u, v)
        index, states = y.final
        listed = index < envs
        assert index.shape == (static.slots.width,) and (index[~listed] == envs).all()
        assert torch.equal(index[listed], x.final.index) and torch.equal(states[listed], x.final.states)
        assert torch.equal(y.last_states(), x.last_states())
        ends, most = ends + len(x.final.index), max(most, len(x.final.index))
    assert ends > 2 * envs and most > (envs // 2 if not compact else 0)  # fixed lengths: most end at once
    static.check_capacity()
