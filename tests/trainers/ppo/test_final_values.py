"""A static rollout values only the final states its env lists (each learner's capacity,
by its own critic; not every env's state by every critic): the same bootstrap values as
valuing all E, no host read, and an overflow caught."""

from __future__ import annotations

import pytest
import torch

import trainers.common.truncation as truncation
from tests.trainers.helpers import market, scales
from trainers.common.capture import no_host_reads
from trainers.common.env import MarketEnv
from trainers.config import EnvConfig, PPOConfig
from trainers.ppo.agent import PPOAgent
from trainers.ppo.ppo import PPO

ENV = EnvConfig(initial_cash=10_000.0, hmax=10, episode_len=24, min_episode_len=8, action="weights", decide_every=2)
CFG = PPOConfig(horizon=16, batch_size=64, repeat_times=1, net_dims=(8,), policy="shared", credit="per_stock")


def static_population() -> PPO:
    """Two agents of different widths and env counts (224 envs), on the static schedule."""
    data = market(t=120)
    agents = [PPOAgent(data, scales(data, ENV), ENV, CFG.with_hparams(h), (0, 110), seed)
              for seed, h in ((1, {"num_envs": 128}), (2, {"num_envs": 96, "net_width": 6}))]
    return PPO([lrn for a in agents for lrn in a.learners], [e for a in agents for e in a.envs], CFG, static=True)


def spy_on_steps(monkeypatch: pytest.MonkeyPatch) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each step's truncations and last states (a truncated env's final state), as stepped."""
    seen = []
    step = MarketEnv.step

    def spy(self, *args, **kwargs):
        out = step(self, *args, **kwargs)
        seen.append((out.truncated.clone(), out.last_states()))
        return out

    monkeypatch.setattr(MarketEnv, "step", spy)
    return seen


def test_the_final_values_are_those_of_valuing_every_env(monkeypatch):
    """Against the all-E computation, by hand: every env's state through its own learner's
    critic, kept where the env truncated."""
    ppo = static_population()
    seen = spy_on_steps(monkeypatch)
    ppo.collect([0, 1])
    group = ppo.group([0, 1])
    layout, buf = group.schedule.layout, group.buf
    assert group.env.slots.width * 2 < group.env.num_envs == 224
    with torch.no_grad():
        for t, (truncated, last) in enumerate(seen):
            every = layout.from_agents(group.nets.value(layout.to_agents(last.unsqueeze(0))), 1)[0]
            torch.testing.assert_close(buf.final_values[t], torch.where(truncated, every, 0.0), atol=1e-6, rtol=0)
            assert (buf.final_values[t][~truncated] == 0).all()
    assert sum(int(truncated.sum()) for truncated, _ in seen) > 224  # many episodes ended


def test_a_compact_static_rollout_reads_nothing_back():
    ppo = static_population()
    ppo.collect([0, 1])  # warm-up
    group = ppo.group([0, 1])
    group.load(ppo.learners, ppo.envs)
    with no_host_reads():
        ppo.rollout(group)
    assert group.env.slots.width * 2 < group.env.num_envs and group.buf.truncated.any()
    ppo.write_back()  # checks the capacity: nothing overflowed


def test_a_rollout_over_capacity_fails_when_the_weights_are_read_back(monkeypatch):
    monkeypatch.setattr(truncation, "capacity", lambda cfg, bars, num_envs: 1)
    ppo = static_population()
    ppo.collect([0, 1])
    assert ppo.group([0, 1]).env.slots.capacities == (1, 1)
    with pytest.raises(RuntimeError, match=r"more envs than a part's capacity \[1, 1\] of \[128, 96\]"):
        ppo.write_back()
