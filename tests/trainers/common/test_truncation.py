"""A static step's slots for truncated envs (trainers/common/truncation.py): the capacity
against a simulation of the episodes' law, the slots of a stacked env's parts, and an
overflow caught where the host reads."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import trainers.common.truncation as truncation
from tests.trainers.helpers import market, scales
from trainers.common.capture import no_host_reads
from trainers.common.env import MarketEnv
from trainers.common.truncation import FinalSlots, capacity, place, step_lengths, truncation_rate
from trainers.config import EnvConfig

CFG = EnvConfig(initial_cash=10_000.0, hmax=10, episode_len=8, min_episode_len=8)


def simulated_peak(min_len: int, max_len: int, bars: int, every: int, envs: int, steps: int) -> float:
    """The largest share of ``envs`` envs that truncate in one step, all reset at step 0,
    each episode drawn as :meth:`MarketEnv.draw_episodes` draws it."""
    g = torch.Generator().manual_seed(0)

    def lengths(n: int) -> torch.Tensor:
        start = torch.randint(0, bars, (n,), generator=g)
        length = torch.randint(min_len, max_len + 1, (n,), generator=g)
        return torch.ceil(torch.minimum(length, bars - start) / every).long()

    left, peak = lengths(envs), 0.0
    for _ in range(steps):
        left -= 1
        done = left == 0
        ended = int(done.sum())
        peak = max(peak, ended / envs)
        left[done] = lengths(ended)  # new episodes for the envs that ended, and only for them
    return peak


@pytest.mark.parametrize("law", [(64, 256, 19_999, 5), (8, 24, 119, 1), (16, 48, 300, 3)])
def test_the_truncation_rate_is_the_peak_of_the_simulated_share(law):
    """The peak comes a few episodes after the common reset, above the long-run rate 1/E[steps]
    (and above decide_every / (max − min + 1) plus the clamp share, 0.034 on the paper's law)."""
    f = step_lengths(*law)
    assert f.sum().item() == pytest.approx(1.0)
    rate = truncation_rate(*law)
    assert rate > 1.0 / float((f * torch.arange(len(f))).sum())
    assert simulated_peak(*law, envs=100_000, steps=12 * (len(f) - 1)) == pytest.approx(rate, abs=0.004)


def test_the_capacity_is_a_binomial_tail_capped_at_every_env():
    paper = EnvConfig(decide_every=5)  # 64 to 256 bars
    assert capacity(paper, 19_999, 32_768) == 1746  # 16 agents x 2,048 envs: 5.3% of them
    assert capacity(paper, 19_999, 64) == 32
    assert capacity(CFG, 119, 256) == 256  # fixed lengths: every env may end in one step
    assert capacity(CFG, 119, 4096) > 0.97 * 4096  # but those clamped at the window's end


def test_place_drops_the_padding_entries():
    base = torch.zeros(4, 2)
    rows = torch.tensor([[1.0, 1.0], [3.0, 3.0], [9.0, 9.0], [9.0, 9.0]])
    out = place(base, torch.tensor([1, 3, 4, 4]), rows)
    assert out.tolist() == [[0.0, 0.0], [1.0, 1.0], [0.0, 0.0], [3.0, 3.0]] and base.abs().sum() == 0


def test_a_step_over_capacity_is_caught_where_the_host_reads(monkeypatch):
    """Fixed-length episodes all end in one step; with room for one final state the step still
    reads nothing back, and the check afterwards names the capacity."""
    monkeypatch.setattr(truncation, "capacity", lambda cfg, bars, num_envs: 1)
    data = market(t=60)
    env = MarketEnv(data, scales(data, CFG), CFG, 6, (0, 59), seed=1)
    env.static = True
    env.reset()
    action = torch.zeros(6, 3)
    env.step(action)  # warm-up
    env.check_capacity()  # nothing truncated yet
    with no_host_reads():
        for _ in range(8):
            step = env.step(action)
    assert step.final.index.shape == (1,)
    with pytest.raises(RuntimeError, match=r"truncated 5 more envs than a part's capacity \[1\] of \[6\] envs"):
        env.check_capacity()


def test_a_stacked_or_resized_env_gets_the_slots_of_its_parts():
    cfg = dataclasses.replace(CFG, min_episode_len=4, episode_len=40)
    data = market(t=400)
    parts = [MarketEnv(data, scales(data, cfg), cfg, n, (0, 399), seed=s) for n, s in ((300, 1), (500, 2))]
    slots = MarketEnv.stack(parts).slots
    assert slots.capacities == (capacity(cfg, 399, 300), capacity(cfg, 399, 500)) and slots.width < 300
    parts[0].resize(40)
    assert parts[0].slots.capacities == (capacity(cfg, 399, 40),)


def test_each_part_lists_its_truncated_envs_in_its_own_slots(monkeypatch):
    monkeypatch.setattr(truncation, "capacity", lambda cfg, bars, num_envs: 2)  # room for two per part
    slots = FinalSlots(CFG, 119, [3, 4], torch.device("cpu"))
    truncated = torch.tensor([True, False, True, True, True, False, True])
    index, over = slots.list(truncated)
    assert index.tolist() == [0, 2, 3, 4] and int(over) == 1  # part 2 truncated 3: one too many
    index, over = slots.list(torch.tensor([False, True, False, False, False, True, False]))
    assert index.tolist() == [1, 7, 5, 7] and int(over) == 0
