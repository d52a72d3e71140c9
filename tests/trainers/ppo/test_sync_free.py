"""The hot loop reads nothing back to the host (docs/training.md, GPU workers): a static
rollout, a static PPO gradient step, SAC's gradient step and the evaluator's decision run
under a guard that fails on ``.item()``, ``.tolist()``, ``.cpu()``, ``.numpy()``,
``bool(tensor)``, ``nonzero`` and tensors built from host data. Each is warmed up once
first (a first call may build the constants it keeps on the device)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from tests.trainers.helpers import market, scales
from trainers.common.capture import HostReadError, no_host_reads
from trainers.common.env import MarketEnv
from trainers.config import EnvConfig, PPOConfig, SACConfig
from trainers.ppo.agent import PPOAgent
from trainers.ppo.batched import BatchedNets
from trainers.ppo.ppo import PPO
from trainers.sac.sac import SACAgent

ENV = EnvConfig(initial_cash=10_000.0, hmax=10, episode_len=8, min_episode_len=4, action="weights", decide_every=3)
CFG = PPOConfig(num_envs=4, horizon=6, batch_size=8, repeat_times=2, net_dims=(8,), policy="shared",
                credit="per_stock")


def static_population() -> PPO:
    """Two agents of different widths and env counts, on the static schedule."""
    data = market(t=60)
    agents = [PPOAgent(data, scales(data, ENV), ENV, CFG.with_hparams(h), (0, 50), seed)
              for seed, h in ((1, {"num_envs": 4}), (2, {"num_envs": 3, "net_width": 6}))]
    return PPO([lrn for a in agents for lrn in a.learners], [e for a in agents for e in a.envs], CFG, static=True)


@pytest.mark.parametrize("planted", ["item", "tolist", "cpu", "bool", "nonzero", "host tensor", "numpy"])
def test_the_guard_catches_each_kind_of_host_read(planted):
    x = torch.ones(3)
    reads = {"item": lambda: x.sum().item(), "tolist": x.tolist, "cpu": x.cpu, "bool": lambda: bool(x.any()),
             "nonzero": x.nonzero, "host tensor": lambda: torch.tensor([1.0, 2.0]), "numpy": x.numpy}
    with pytest.raises(HostReadError), no_host_reads():
        reads[planted]()


def test_the_guard_lets_device_work_through():
    x = torch.arange(6.0).reshape(2, 3)
    with no_host_reads():
        y = torch.where(x > 2, x, 0.0).softmax(1) + torch.zeros_like(x) + torch.full((2, 3), 0.5)
    assert y.shape == (2, 3)


def test_a_static_rollout_reads_nothing_back():
    ppo = static_population()
    ppo.collect([0, 1])  # warm-up
    group = ppo.group([0, 1])
    group.load([ppo.learners[0], ppo.learners[1]], ppo.envs)
    with no_host_reads():
        ppo.rollout(group)  # every step, GAE and the advantages' normalisation
    assert group.buf.truncated.any()  # the episodes ended inside: the reset path ran too


def test_a_static_gradient_step_reads_nothing_back():
    ppo = static_population()
    rollout = ppo.collect([0, 1])
    ppo.update([0, 1], rollout)  # warm-up
    group = ppo.group([0, 1])
    weight, active = group.schedule.static_masks()
    idx = torch.zeros_like(weight, dtype=torch.long)[0]
    before = [p.clone() for p in ppo.nets.params]
    with no_host_reads():
        ppo.static_step(group.batch, idx, weight[0], active[0])
    assert any(not torch.equal(a, b) for a, b in zip(before, ppo.nets.params))


def test_a_sac_gradient_step_reads_nothing_back():
    data = market(t=60)
    cfg = SACConfig(num_envs=4, horizon=8, batch_size=8, buffer_size=64, updates=1, net_dims=(8,), critic_dims=(8,),
                    policy="shared")
    agent = SACAgent(data, scales(data, ENV), ENV, cfg, (0, 50), 0)
    agent.train_iteration()  # fills the buffer and warms the optimizers up
    with no_host_reads():
        agent.gradient_step()


def test_the_evaluators_decision_reads_nothing_back():
    data = market(t=60)
    nets = static_population().nets
    env = MarketEnv(data, scales(data, ENV), ENV, num_envs=2, window=(10, 40), random_start=False)
    env.static = True
    state = env.reset()

    def policy(states: torch.Tensor) -> torch.Tensor:
        return torch.tanh(BatchedNets.mean(nets, states.unsqueeze(1))).squeeze(1)

    state = env.step(policy(state)).state  # warm-up
    with no_host_reads():
        step = env.step(policy(state))
    assert step.path is not None and step.path.shape == (ENV.decide_every, 2)


def test_a_static_env_step_of_every_kind_reads_nothing_back():
    """The turbulence gate, a ragged universe and held bars between decisions: the step's
    other branches, each under the guard."""
    data = market(t=60)
    data = dataclasses.replace(data, turbulence=torch.rand(60), tradable=torch.rand(60, 3) > 0.1)
    cfg = dataclasses.replace(ENV, turbulence_threshold=0.9, reward="excess")
    env = MarketEnv(data, scales(data, cfg), cfg, num_envs=5, window=(0, 50), seed=3)
    env.static = True
    env.reset()
    action = torch.rand(5, 3) * 2 - 1
    env.step(action, baseline=action.flip(0))  # warm-up
    episodes = env.draw_episodes(4)
    with no_host_reads():
        for t in range(4):
            env.step(action, baseline=action.flip(0), episodes=(episodes[0][t], episodes[1][t]))
