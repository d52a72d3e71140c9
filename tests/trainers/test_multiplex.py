"""The multiplexed engine trains each agent exactly as it would train alone."""

import copy
import dataclasses

import pytest
import torch

from trainers.batched import BatchedAdam, BatchedNets
from trainers.env import EnvConfig
from trainers.evolution import Evolution, EvolutionConfig, evolve, run_serially
from trainers.multiplex import run_multiplexed
from trainers.population import AgentJob
from trainers.ppo import Actor, Critic, PPOConfig

from .helpers import market, scales

ENV = EnvConfig(initial_cash=10_000.0, hmax=20, episode_len=8, min_episode_len=4)
PPO = PPOConfig(num_envs=4, horizon=8, batch_size=16, repeat_times=2, net_dims=(8,), lr=3e-3)
SPACE = {"lr": (1e-3, 1e-2), "net_width": (4, 12), "num_envs": (2, 6), "repeat_times": (1, 3), "gamma": (0.9, 0.99),
         "clip": (0.1, 0.3), "entropy_coef": (0.001, 0.05), "gae_lambda": (0.8, 0.99)}


def generation(ppo=PPO, **evo):
    """A heterogeneous population's first generation as jobs, and its Setting."""
    data = market(t=80, n=3, k=2)
    cfg = EvolutionConfig(**{"population": 4, "generations": 1, "iterations_per_generation": 3, "eval_interval": 1,
                             "search_space": SPACE, **evo})
    run = Evolution(data, scales(data, ENV), ENV, ppo, cfg, (0, 59), (59, 79), 252.0)
    pop = run.pop
    jobs = [AgentJob(0, i, pop.hparams[i], pop.seeds[i], pop.states[i], pop.best[i], pop.last[i], pop.falls[i], None)
            for i in range(cfg.population)]
    return jobs, run.setting


def assert_same_agent(alone, batched, atol=1e-6):
    a, b = alone.state["learners"][0], batched.state["learners"][0]
    for net in ("actor", "critic"):
        for key in a[net]:
            torch.testing.assert_close(a[net][key], b[net][key], atol=atol, rtol=0)
    for k, moments in a["optimizer"]["state"].items():
        assert moments["step"] == b["optimizer"]["state"][k]["step"]
        torch.testing.assert_close(moments["exp_avg_sq"], b["optimizer"]["state"][k]["exp_avg_sq"], atol=atol, rtol=0)
    assert a["optimizer"]["param_groups"][0]["lr"] == b["optimizer"]["param_groups"][0]["lr"]
    assert torch.equal(a["rng"], b["rng"])  # the same draws, in the same order
    ea, eb = alone.state["envs"][0], batched.state["envs"][0]
    assert torch.equal(ea["rng"], eb["rng"]) and torch.equal(ea["t"], eb["t"]) and torch.equal(ea["t_end"], eb["t_end"])
    torch.testing.assert_close(ea["cash"], eb["cash"])
    assert alone.cost.env_steps == batched.cost.env_steps
    assert [r.iteration for r in alone.records] == [r.iteration for r in batched.records]


@pytest.mark.parametrize("credit", ["joint", "per_stock"])
def test_a_multiplexed_generation_trains_every_agent_as_it_trains_alone(credit):
    jobs, setting = generation(dataclasses.replace(PPO, credit=credit))
    widths = {job.hparams["net_width"] for job in jobs}
    envs = {job.hparams["num_envs"] for job in jobs}
    assert len(widths) > 1 and len(envs) > 1  # padding and per-agent env counts are exercised
    for alone, batched in zip(run_serially(jobs, setting), run_multiplexed(jobs, setting)):
        assert_same_agent(alone, batched)
        assert [r.fitness for r in alone.records] == pytest.approx([r.fitness for r in batched.records], abs=1e-6)


def test_stopped_agents_rest_while_the_others_train():
    jobs, setting = generation(iterations_per_generation=2, patience=1)
    jobs[1].falls = 1  # the evaluator has stopped agent 1
    alone, batched = run_serially(jobs, setting), run_multiplexed(jobs, setting)
    assert batched[1].cost.env_steps == 0 and all(r.stopped for r in batched[1].records)
    assert torch.equal(batched[1].state["envs"][0]["rng"], jobs[1].state["envs"][0]["rng"])
    for a, b in zip(alone, batched):
        assert_same_agent(a, b)


def test_the_multiplexed_engine_is_deterministic():
    jobs, setting = generation()
    a, b = run_multiplexed(jobs, setting), run_multiplexed(jobs, setting)
    for x, y in zip(a, b):
        for key, value in x.state["learners"][0]["actor"].items():
            assert torch.equal(value, y.state["learners"][0]["actor"][key])
        assert [r.fitness for r in x.records] == [r.fitness for r in y.records]


def test_evolution_through_the_multiplexed_engine_matches_the_serial_one():
    data = market(t=80, n=3, k=2)
    evo = EvolutionConfig(population=4, generations=3, iterations_per_generation=2, eval_interval=1, quantile=0.25,
                          search_space={"lr": (1e-3, 1e-2), "num_envs": (2, 6)})

    def run(runner):
        return evolve(data, scales(data, ENV), ENV, PPO, evo, (0, 59), (59, 79), per_year=252.0, runner=runner)

    alone, batched = run(run_serially), run(run_multiplexed)
    assert [r.fitness for r in alone.history] == pytest.approx([r.fitness for r in batched.history], abs=1e-6)
    assert [r.parent for r in alone.history] == [r.parent for r in batched.history]
    for key, value in alone.best_actor.items():
        torch.testing.assert_close(value, batched.best_actor[key], atol=1e-6, rtol=0)


def test_padding_and_cropping_are_exact():
    torch.manual_seed(0)
    actors = [Actor(5, 2, (3, 2), -0.5), Actor(5, 2, (7, 4), -0.5)]
    critics = [Critic(5, (3, 2)), Critic(5, (7, 4))]
    nets = BatchedNets.stack(actors, critics)
    states = torch.randn(2, 6, 5)
    full = nets.sub([0, 1], grad=True)
    mean, value = full.mean(states), full.value(states)
    for i in range(2):
        torch.testing.assert_close(mean[i], actors[i].net(states[i]))
        torch.testing.assert_close(value[i], critics[i](states[i]))
    grads = torch.autograd.grad(mean.pow(2).sum() + value.pow(2).sum() + full.entropy().sum(), full.params)
    first_layer = grads[1]  # actor layer 0, [N, in, out]: agent 0 has 3 real units of 7
    assert first_layer[0, :, 3:].abs().max() == 0 and first_layer[0, :, :3].abs().max() > 0
    alone = nets.sub([0])  # agent 0 cut to its own widths
    assert alone.params[1].shape == (1, 5, 3) and alone.params[3].shape == (1, 3, 2)
    torch.testing.assert_close(alone.mean(states[:1])[0], actors[0].net(states[0]))


def test_batched_adam_is_torch_adam_per_agent_and_leaves_resting_agents_alone():
    torch.manual_seed(1)
    actors = [Actor(4, 2, (6,), -0.5), Actor(4, 2, (3,), -0.5)]
    critics = [Critic(4, (6,)), Critic(4, (3,))]
    copies = [copy.deepcopy(m) for m in (*actors, *critics)]
    lrs = [1e-2, 3e-3]
    torch_opts = [torch.optim.Adam([*copies[i].parameters(), *copies[2 + i].parameters()], lr=lrs[i]) for i in range(2)]
    nets = BatchedNets.stack(actors, critics)
    adam = BatchedAdam(nets, torch.tensor(lrs, dtype=torch.float64))
    for step in range(4):
        agents = [0, 1] if step % 2 == 0 else [0]  # agent 1 rests every other step
        x = torch.randn(2, 5, 4)
        sub = nets.sub(agents, grad=True)
        loss = sub.mean(x[agents]).sum() + sub.value(x[agents]).pow(2).sum() + sub.log_std.sum()
        before = [p[1].clone() for p in nets.params]
        adam.step(sub, torch.autograd.grad(loss, sub.params), agents, max_grad_norm=0.5)
        assert all(torch.equal(b, p[1]) for b, p in zip(before, nets.params)) == (1 not in agents)
        for i in agents:
            params = [*copies[i].parameters(), *copies[2 + i].parameters()]
            loss = copies[i].net(x[i]).sum() + copies[2 + i](x[i]).pow(2).sum() + copies[i].log_std.sum()
            torch_opts[i].zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 0.5)
            torch_opts[i].step()
    for i in range(2):
        actor, critic = copy.deepcopy(actors[i]), copy.deepcopy(critics[i])
        nets.write_back(i, actor, critic)
        for a, b in zip([*actor.parameters(), *critic.parameters()],
                        [*copies[i].parameters(), *copies[2 + i].parameters()]):
            torch.testing.assert_close(a, b, atol=1e-6, rtol=0)
        saved = adam.state_of(i, torch_opts[i].state_dict()["param_groups"])
        theirs = torch_opts[i].state_dict()["state"]
        assert saved["state"][0]["step"] == theirs[0]["step"]
        for k, moments in saved["state"].items():
            torch.testing.assert_close(moments["exp_avg_sq"], theirs[k]["exp_avg_sq"], atol=1e-7, rtol=1e-4)
    assert float(nets.params[1][1, :, 3:].abs().max()) == 0  # agent 1's padding stayed zero


def test_multiplexing_needs_one_learner_per_agent():
    jobs, setting = generation()
    with pytest.raises(ValueError, match="one learner per agent"):
        run_multiplexed(jobs, dataclasses.replace(setting, ppo_cfg=PPOConfig(learners=2)))
