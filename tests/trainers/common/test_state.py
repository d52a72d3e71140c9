"""The shared policy's per-stock view of the state (docs/training.md): weights by hand, and a
scorer that cannot tell stocks apart by their place or price."""

import torch

from trainers.common.nets import Actor, Critic
from trainers.common.state import StateScales, StockLayout, build_state, state_dim
from trainers.ppo.batched import BatchedNets

SCALES = StateScales(cash_scale=1e-3, shares_scale=0.1, price_ref=(10.0, 40.0))
LAYOUT = StockLayout(n_stocks=2, n_features=1, scales=SCALES)


def test_per_stock_rows_carry_indicators_and_weights_by_hand():
    # cash 600, 2 shares at 50 (=100) and 10 shares at 30 (=300): value 1000
    state = build_state(torch.tensor([600.0], dtype=torch.float64), torch.tensor([[2.0, 10.0]], dtype=torch.float64),
                        torch.tensor([[50.0, 30.0]], dtype=torch.float64), torch.tensor([[[0.5], [-1.5]]]), SCALES)
    rows = LAYOUT.per_stock(state)
    expected = torch.tensor([[[0.5, 0.1, 0.6], [-1.5, 0.3, 0.6]]])
    torch.testing.assert_close(rows, expected, rtol=1e-5, atol=1e-6)


def test_shared_actor_permutes_with_the_stocks():
    """Swapping two stocks (indicators, holdings and prices) swaps their actions: the scorer
    has no notion of a stock's index or price level."""
    torch.manual_seed(0)
    scales = StateScales(1e-3, 0.1, (10.0, 40.0, 7.0))
    layout = StockLayout(3, 2, scales)
    actor = Actor(state_dim(3, 2), 3, (8,), 0.0, layout)
    cash = torch.tensor([500.0], dtype=torch.float64)
    shares = torch.tensor([[1.0, 4.0, 0.0]], dtype=torch.float64)
    close = torch.tensor([[12.0, 35.0, 8.0]], dtype=torch.float64)
    feats = torch.randn(1, 3, 2)
    perm = [2, 0, 1]
    swapped = StockLayout(3, 2, StateScales(1e-3, 0.1, tuple(scales.price_ref[i] for i in perm)))
    a = actor(build_state(cash, shares, close, feats, scales))
    actor.layout = swapped
    b = actor(build_state(cash, shares[:, perm], close[:, perm], feats[:, perm], swapped.scales))
    torch.testing.assert_close(b, a[:, perm])
    assert not torch.allclose(a[0, 0], a[0, 1])  # and the stocks do get different actions


def test_batched_shared_means_equal_each_actors_own():
    torch.manual_seed(1)
    layout = StockLayout(3, 2, StateScales(1e-3, 0.1, (10.0, 40.0, 7.0)))
    dim = state_dim(3, 2)
    actors = [Actor(dim, 3, (6,), -0.5, layout), Actor(dim, 3, (4,), -0.5, layout)]
    for actor in actors:
        torch.nn.init.normal_(actor.net[-1].weight)
    nets = BatchedNets.stack(actors, [Critic(dim, (6,)), Critic(dim, (4,))])
    states = torch.rand(2, 5, dim)
    got = nets.mean(states)
    for i, actor in enumerate(actors):
        torch.testing.assert_close(got[i], actor.mean(states[i]), rtol=1e-5, atol=1e-6)
