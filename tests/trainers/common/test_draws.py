"""Draws made up front (trainers/common/draws.py) and random streams that travel between devices."""

from __future__ import annotations

import pytest
import torch

from tests.trainers.helpers import market, scales
from trainers.common.draws import draw_on, permutations, restore
from trainers.common.env import MarketEnv
from trainers.common.jobs import to_device
from trainers.config import EnvConfig

ENV = EnvConfig(initial_cash=10_000.0, hmax=10, episode_len=8, min_episode_len=4)


def test_a_horizon_drawn_up_front_is_what_step_by_step_draws_take():
    """On a CPU generator the whole rollout's noise is the numbers a step-by-step loop draws,
    bit for bit, also for sizes where one call for all steps would differ (7 × 3 is no
    multiple of 16, the block torch's normal sampler fills)."""
    step_by_step = torch.Generator().manual_seed(3)
    expected = torch.stack([torch.randn((7, 3), generator=step_by_step) for _ in range(5)])
    up_front = torch.Generator().manual_seed(3)
    (drawn,) = draw_on(up_front, 5, lambda lead: (torch.randn((*lead, 7, 3), generator=up_front),),
                       torch.device("cpu"))
    assert torch.equal(drawn, expected)
    one_call = torch.randn((5, 7, 3), generator=torch.Generator().manual_seed(3))
    assert not torch.equal(one_call, expected)  # why the CPU draws step by step


def test_an_envs_episodes_drawn_for_a_horizon_are_the_ones_its_steps_would_draw():
    data = market(t=60)
    a, b = (MarketEnv(data, scales(data, ENV), ENV, 5, (0, 50), seed=9) for _ in range(2))
    starts, ends = a.draw_episodes(4)
    for t in range(4):
        start, end = b._episodes()
        assert torch.equal(starts[t], start) and torch.equal(ends[t], end)
    assert ((ends - starts) >= 1).all() and (ends <= 50).all()


def test_an_updates_permutations_are_one_randperm_per_epoch():
    g, h = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    perms = permutations(g, 3, 10, torch.device("cpu"))
    assert perms.shape == (3, 10)
    for row in perms:
        assert torch.equal(row, torch.randperm(10, generator=h))


def test_generator_states_stay_cpu_byte_tensors_when_a_state_moves():
    """``Generator.set_state`` takes only a CPU byte tensor: moving an agent's state to another
    device moves everything else (here to ``meta``, a device every machine has)."""
    state = {"rng": torch.Generator().get_state(), "weights": [torch.ones(2)], "nested": ({"x": torch.zeros(1)},)}
    moved = to_device(state, "meta")
    assert moved["rng"].device.type == "cpu" and moved["rng"].dtype == torch.uint8
    assert moved["weights"][0].device.type == "meta" and moved["nested"][0]["x"].device.type == "meta"
    torch.Generator().set_state(moved["rng"])


def test_a_stream_saved_by_another_kind_of_generator_restarts_from_its_seed():
    cuda_like = torch.zeros(16, dtype=torch.uint8)  # a Philox state (seed, offset): no Mersenne-twister state
    g = torch.Generator().manual_seed(123)
    with pytest.warns(UserWarning, match="restarts from its seed"):
        restore(g, cuda_like, seed=7)
    assert torch.equal(torch.rand(4, generator=g), torch.rand(4, generator=torch.Generator().manual_seed(7)))
    saved = torch.Generator().manual_seed(5)
    torch.rand(3, generator=saved)
    same = torch.Generator()
    restore(same, saved.get_state(), seed=0)  # the same kind: the stream continues
    assert torch.equal(torch.rand(2, generator=same), torch.rand(2, generator=saved))
