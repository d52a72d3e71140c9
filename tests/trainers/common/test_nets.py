"""The actor's start (trainers/common/nets.py): a per-stock scorer started at the ranking by one of
its inputs (``ppo.start_ranked_by``), and a random start drawn as it always was."""

import pytest
import torch

from trainers.common.nets import Actor
from trainers.common.state import StateScales, StockLayout, build_state, state_dim
from trainers.config import PPOConfig

SCALES = StateScales(1e-3, 0.1, (10.0, 40.0, 7.0, 20.0))
LAYOUT = StockLayout(4, 3, SCALES)


def state(feats: torch.Tensor) -> torch.Tensor:
    return build_state(torch.tensor([500.0], dtype=torch.float64), torch.tensor([[1.0, 4.0, 0.0, 2.0]],
                       dtype=torch.float64), torch.tensor([[12.0, 35.0, 8.0, 21.0]], dtype=torch.float64),
                       feats, SCALES)


def test_a_scorer_started_at_an_input_scores_each_stock_by_it():
    torch.manual_seed(0)
    actor = Actor(state_dim(4, 3), 4, (8,), -2.5, LAYOUT, start_ranked_by=1)
    feats = torch.tensor([[[5.0, 1.5, -3.0], [-2.0, -1.5, 4.0], [0.0, 3.0, 1.0], [1.0, 0.0, 0.0]]])
    mean = actor.mean(state(feats))[0]
    # the mean is 0.1 × input 1 (ReLU(x) − ReLU(−x)) plus six random units weighted ~0.01 by the output layer
    torch.testing.assert_close(mean, 0.1 * feats[0, :, 1], atol=0.02, rtol=0.0)
    assert mean.argsort().tolist() == [1, 3, 0, 2]  # ranked by input 1, not by input 0 or 2


def test_the_start_leaves_the_random_stream_as_a_random_start_draws_it():
    torch.manual_seed(3)
    plain = Actor(state_dim(4, 3), 4, (8,), -2.5, LAYOUT)
    after_plain = torch.rand(1)
    torch.manual_seed(3)
    ranked = Actor(state_dim(4, 3), 4, (8,), -2.5, LAYOUT, start_ranked_by=0)
    assert torch.equal(torch.rand(1), after_plain)  # the critic and the draws after it are unchanged
    torch.testing.assert_close(ranked.net[0].weight[2:], plain.net[0].weight[2:])  # the other units as drawn


def test_a_start_the_scorer_cannot_take_is_refused():
    with pytest.raises(ValueError, match="input 3 is not one of the scorer's 3 indicators"):
        Actor(state_dim(4, 3), 4, (8,), -2.5, LAYOUT, start_ranked_by=3)
    with pytest.raises(ValueError, match="per-stock scorer with one hidden layer"):
        Actor(state_dim(4, 3), 4, (8,), -2.5, None, start_ranked_by=0)
    with pytest.raises(ValueError, match="start_ranked_by needs policy: shared"):
        PPOConfig(policy="mlp", net_dims=(8,), start_ranked_by=0)
    with pytest.raises(ValueError, match="start_ranked_by needs"):
        PPOConfig(policy="shared", net_dims=(8, 4), start_ranked_by=0)
