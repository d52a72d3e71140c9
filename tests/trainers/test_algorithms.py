"""The learners' table: each learner's calibration iteration is one training iteration of a
fresh agent, as its runner trains it (the workload the profiler measures its bias on)."""

import dataclasses

import pytest
import torch

from trainers.algorithms import ALGORITHMS
from trainers.config import EnvConfig, PPOConfig, SACConfig
from trainers.population.config import EvolutionConfig
from trainers.population.evolution import make_setting
from trainers.ppo.multiplex import Multiplexed

from .helpers import market, scales

ENV = EnvConfig(initial_cash=10_000.0, hmax=20, episode_len=8, min_episode_len=4)
PPO = PPOConfig(num_envs=2, horizon=8, batch_size=8, repeat_times=1, net_dims=(8,))
SAC = SACConfig(num_envs=2, horizon=8, batch_size=8, buffer_size=32, updates=1, net_dims=(8,), critic_dims=(8,))


def setting():
    data = market(t=40, n=2, k=2)
    return make_setting(data, scales(data, ENV), ENV, PPO, EvolutionConfig(population=1), (0, 29), (29, 39), 252.0,
                        sac_cfg=SAC)


def by_hand(name, s, seed):
    """One iteration as each learner's runner trains it: PPO on the multiplexed engine, SAC alone."""
    agent = ALGORITHMS[name].agent(s, {}, seed, None)
    if isinstance(agent.cfg, PPOConfig):
        engine = Multiplexed(s, [agent])
        return lambda: engine.train_iteration([0])
    return agent.train_iteration


def flat(out):
    """An iteration's output as tensors (copied: a rollout's buffers are reused): PPO's
    rollouts, SAC's losses."""
    if isinstance(out, dict):
        return [torch.tensor(v) for _, v in sorted(out.items())]
    return [getattr(r, f.name).clone() for r in out for f in dataclasses.fields(r)
            if isinstance(getattr(r, f.name), torch.Tensor)]


def same(a, b):
    return len(a) == len(b) > 0 and all(torch.equal(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_the_calibration_iteration_is_one_training_iteration_of_a_fresh_agent(name):
    s = setting()
    expected = by_hand(name, s, 7)
    first, second = flat(expected()), flat(expected())
    assert not same(first, second)  # the first iteration trained: the second sees another policy or buffer
    iteration = ALGORITHMS[name].iteration(s, 7)
    assert same(flat(iteration()), first) and same(flat(iteration()), second)
