"""PPO's loss math (``trainers/ppo/loss.py``) against hand-computed values: GAE(λ) with
truncation, the clipped surrogate, the per-learner advantage normalisation. The loss on a
minibatch is checked against CleanRL's in tests/trainers/ppo/test_ppo.py."""

import math

import pytest
import torch

from trainers.ppo.batched import Layout
from trainers.ppo.loss import clipped, gae_advantages, normalised


def test_gae_bootstraps_at_truncation_and_cuts_the_recursion():
    gamma, lam = 0.9, 0.5
    rewards = torch.tensor([[1.0], [2.0], [3.0]])
    values = torch.tensor([[0.5], [1.0], [1.5]])
    truncated = torch.tensor([[False], [True], [False]])
    final_values = torch.tensor([[0.0], [4.0], [0.0]])
    next_value = torch.tensor([2.0])
    adv = gae_advantages(rewards, values, next_value, truncated, final_values, gamma, lam)
    d2 = 3.0 + gamma * 2.0 - 1.5  # last step bootstraps from the state after the rollout
    d1 = 2.0 + gamma * 4.0 - 1.0  # truncation: bootstrap from the final state, ignore step 2
    d0 = 1.0 + gamma * 1.0 - 0.5
    expected = torch.tensor([[d0 + gamma * lam * d1], [d1], [d2]])
    torch.testing.assert_close(adv, expected)


def test_the_clipped_surrogate_is_the_pessimistic_bound_by_hand():
    ratio = torch.tensor([0.5, 1.0, 1.5, 1.5, 0.5])
    adv = torch.tensor([1.0, 1.0, 1.0, -1.0, -1.0])
    # min(ρA, clip(ρ, 0.8, 1.2)·A): a good action gains at most 1.2A, a bad one is charged in full
    assert clipped(ratio, adv, 0.2, per_action=False).tolist() == pytest.approx([0.5, 1.0, 1.2, -1.5, -0.8])
    per_action = clipped(torch.tensor([[1.5, 0.5]]), torch.tensor([[1.0, -1.0]]), 0.2, per_action=True)
    assert per_action.tolist() == pytest.approx([1.2 - 0.8])  # each action clipped alone, then summed


def test_advantages_are_normalised_per_learner_with_the_unbiased_std():
    layout = Layout.of([1, 2], torch.device("cpu"))  # learner 0 has env 0, learner 1 envs 1 and 2
    adv = torch.tensor([[1.0, 10.0, 20.0], [3.0, 30.0, 50.0]])  # [H = 2, E = 3]
    out = normalised(adv, layout)
    first = (torch.tensor([1.0, 3.0]) - 2.0) / (math.sqrt(2.0) + 1e-8)
    second = (torch.tensor([10.0, 20.0, 30.0, 50.0]) - 27.5) / (math.sqrt(875.0 / 3.0) + 1e-8)
    torch.testing.assert_close(out[:, 0], first)
    torch.testing.assert_close(out[:, 1:].flatten(), second)
