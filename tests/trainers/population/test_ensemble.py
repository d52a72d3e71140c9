"""The ensemble policy on hand-made actors whose actions are known exactly.

Each member's weights are zeroed and its output bias chosen, so it acts ``tanh(bias)`` on any
state. With ``action: weights`` the two-stock members below ask for

- member 0: a = (0, 0), logits (0, 0, 0): the allocation (1/3, 1/3, 1/3) to AAA, BBB, cash;
- member 1: a = (ln 4, ln 2) / 5, logits (ln 4, ln 2, 0): the allocation (4/7, 2/7, 1/7);

so the mean allocation is ((1/3 + 4/7) / 2, (1/3 + 2/7) / 2, (1/3 + 1/7) / 2) = (19, 13, 10) / 42
and the action that asks for it is a_i = ln(w̄_i / w̄_cash) / 5 = (ln 1.9, ln 1.3) / 5
≈ (0.1284, 0.0525): not the mean action (ln 4, ln 2) / 10 ≈ (0.1386, 0.0693).
"""

from __future__ import annotations

import math

import pytest
import torch

from tests.tasks.handmade import ensemble
from trainers.common.nets import Actor
from trainers.common.orders import WEIGHT_LOGITS
from trainers.config import EnvConfig
from trainers.population.ensemble import Ensemble

SYMBOLS, FEATURES = ["AAA", "BBB"], ["rsi_30"]
STATE_DIM = 1 + 2 * 2 + 2  # cash, shares, prices, one indicator per stock
MEMBER_1 = [math.log(4.0) / WEIGHT_LOGITS, math.log(2.0) / WEIGHT_LOGITS]


def hand_made(actions: list[list[float]], action: str = "weights") -> Ensemble:
    """An ensemble whose member k acts ``actions[k]`` on any state."""
    biases = [[math.atanh(a) for a in member] for member in actions]
    return ensemble(SYMBOLS, FEATURES, biases, EnvConfig(action=action))[0]


def allocation(action: torch.Tensor) -> torch.Tensor:
    """What ``trainers.common.orders.target_orders`` allocates to the stocks and cash for ``action``."""
    logits = torch.cat((action.double() * WEIGHT_LOGITS, torch.zeros_like(action[..., :1]).double()), dim=-1)
    return torch.softmax(logits, dim=-1)


def states(e: int = 5, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(e, STATE_DIM, generator=torch.Generator().manual_seed(0), dtype=dtype)


def test_the_weights_ensemble_asks_for_the_mean_of_its_members_allocations():
    ens = hand_made([[0.0, 0.0], MEMBER_1])
    action = ens(states())
    expected = torch.tensor([math.log(1.9), math.log(1.3)]) / WEIGHT_LOGITS
    torch.testing.assert_close(action, expected.expand(5, 2), rtol=0, atol=1e-6)
    torch.testing.assert_close(allocation(action), torch.tensor([19.0, 13.0, 10.0], dtype=torch.float64)
                               .div(42).expand(5, 3), rtol=0, atol=1e-6)


def test_a_three_member_vote_counts_every_member():
    """Member 2, logits (0, ln 3, 0), allocates (1/5, 3/5, 1/5); the mean of the three is
    (1/3 + 4/7 + 1/5, 1/3 + 2/7 + 3/5, 1/3 + 1/7 + 1/5) / 3 = (116, 128, 71) / 315."""
    ens = hand_made([[0.0, 0.0], MEMBER_1, [0.0, math.log(3.0) / WEIGHT_LOGITS]])
    torch.testing.assert_close(allocation(ens(states(1)))[0], torch.tensor([116.0, 128.0, 71.0],
                               dtype=torch.float64) / 315, rtol=0, atol=1e-6)


def test_the_shares_ensemble_averages_its_members_actions():
    """(0.5, -0.2), (0.1, 0.8) and (-0.3, 0.0) average to (0.1, 0.2): a vote on each order's
    fraction of hmax."""
    ens = hand_made([[0.5, -0.2], [0.1, 0.8], [-0.3, 0.0]], action="shares")
    torch.testing.assert_close(ens(states()), torch.tensor([[0.1, 0.2]]).expand(5, 2), rtol=0, atol=1e-6)


def test_member_actions_stack_each_members_action():
    ens = hand_made([[0.5, -0.2], [0.1, 0.8], [-0.3, 0.0]])
    got = ens.member_actions(states(5))
    assert got.shape == (3, 5, 2)
    torch.testing.assert_close(got[:, 0], torch.tensor([[0.5, -0.2], [0.1, 0.8], [-0.3, 0.0]]), rtol=0, atol=1e-6)


@pytest.mark.parametrize("action", ["weights", "shares"])
def test_identical_members_act_as_one(action):
    """The mean of K equal allocations is that allocation: the ensemble is its member, even
    near saturation (the log-space mean loses nothing there)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        actor = Actor(STATE_DIM, 2, (8,), init_log_std=0.0)
    with torch.no_grad():
        actor.net[-1].weight.mul_(300.0)
    ens = Ensemble([actor, actor, actor], action)
    state = states(64)
    torch.testing.assert_close(ens(state), actor(state), rtol=0, atol=1e-6)
    assert actor(state).abs().max() > 0.9  # saturated members were tested


def test_the_action_stays_in_the_open_interval_and_in_the_states_dtype():
    """Members near the extremes, a = ±tanh(5) ≈ ±1, meet strictly inside (-1, 1). With
    e = exp(5 tanh 5), AAA's mean weight over cash's is
    (e / (e + 1 + 1/e) + (1/e) / (e + 1 + 1/e) + e / (2e + 1)) / (2 / (e + 1 + 1/e) + 1 / (2e + 1)) ≈ 89.1,
    so a_AAA = ln(89.1) / 5 ≈ 0.898, and BBB's is the same by symmetry."""
    ens = ensemble(SYMBOLS, FEATURES, [[5.0, -5.0], [-5.0, 5.0], [5.0, 5.0]], EnvConfig(action="weights"))[0]
    e = math.exp(WEIGHT_LOGITS * math.tanh(5.0))
    one, two = e + 1 + 1 / e, 2 * e + 1
    expected = math.log((e / one + 1 / e / one + e / two) / (2 / one + 1 / two)) / WEIGHT_LOGITS
    for dtype in (torch.float32, torch.float64):
        action = ens.to(dtype)(states(3, dtype))
        assert action.dtype == dtype and bool((action.abs() < 1.0).all())
        assert action.tolist() == [pytest.approx([expected, expected], abs=1e-5)] * 3


def test_an_ensemble_needs_members_and_a_known_action_kind():
    with pytest.raises(ValueError, match="at least one member"):
        Ensemble([], "weights")
    with pytest.raises(ValueError, match="weights or shares"):
        Ensemble([Actor(STATE_DIM, 2, (4,), 0.0)], "target")
