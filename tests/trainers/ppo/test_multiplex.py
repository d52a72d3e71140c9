"""Agents trained as one batched model (``trainers/ppo/multiplex.py``): each follows the trajectory
it follows alone, a resting agent is untouched, and parallel learners fuse."""

import dataclasses

import pytest
import torch

from tests.trainers.helpers import market, scales
from trainers.common.jobs import AgentJob
from trainers.config import EnvConfig, PPOConfig
from trainers.population.config import EvolutionConfig
from trainers.population.evolution import Evolution, run_serially
from trainers.ppo.multiplex import KeptPPO, Multiplexed, run_multiplexed
from trainers.ppo.ppo import PPO as BatchedPPO

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
    pop = run.state
    jobs = [AgentJob(0, i, pop.hparams[i], pop.seeds[i], pop.states[i], pop.best[i], pop.last[i], pop.falls[i], None)
            for i in range(cfg.population)]
    return jobs, run.setting


def assert_same_agent(alone, batched, atol=1e-6):
    for a, b in zip(alone.state["learners"], batched.state["learners"]):
        for net in ("actor", "critic"):
            for key in a[net]:
                torch.testing.assert_close(a[net][key], b[net][key], atol=atol, rtol=0)
        for k, moments in a["optimizer"]["state"].items():
            assert moments["step"] == b["optimizer"]["state"][k]["step"]
            torch.testing.assert_close(moments["exp_avg_sq"], b["optimizer"]["state"][k]["exp_avg_sq"], atol=atol,
                                       rtol=0)
        assert a["hparams"] == b["hparams"]
        assert torch.equal(a["rng"], b["rng"])  # the same draws, in the same order
    for ea, eb in zip(alone.state["envs"], batched.state["envs"]):
        assert torch.equal(ea["rng"], eb["rng"]) and torch.equal(ea["t"], eb["t"])
        assert torch.equal(ea["t_end"], eb["t_end"])
        torch.testing.assert_close(ea["cash"], eb["cash"])
    assert alone.cost.env_steps == batched.cost.env_steps
    assert [r.iteration for r in alone.records] == [r.iteration for r in batched.records]


@pytest.mark.parametrize("credit", ["joint", "per_stock"])
def test_a_batched_generation_trains_every_agent_as_it_trains_alone(credit):
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


def test_the_batched_engine_is_deterministic():
    jobs, setting = generation()
    a, b = run_multiplexed(jobs, setting), run_multiplexed(jobs, setting)
    for x, y in zip(a, b):
        for key, value in x.state["learners"][0]["actor"].items():
            assert torch.equal(value, y.state["learners"][0]["actor"][key])
        assert [r.fitness for r in x.records] == [r.fitness for r in y.records]


def test_parallel_learners_leave_a_generation_fused_and_batch_like_single_ones():
    ppo = dataclasses.replace(PPO, learners=2)
    jobs, setting = generation(ppo, iterations_per_generation=2)
    batched = run_multiplexed(jobs, setting)
    for alone, done in zip(run_serially(jobs, setting), batched):
        first, second = done.state["learners"]
        for net in ("actor", "critic"):  # every learner holds the average after each epoch
            assert all(torch.equal(first[net][k], second[net][k]) for k in first[net])
        assert not torch.equal(first["rng"], second["rng"])  # their own streams
        assert_same_agent(alone, done)
        assert done.cost.env_steps == 2 * 2 * done.hparams["num_envs"] * PPO.horizon


@pytest.mark.parametrize("space, reloads", [({k: v for k, v in SPACE.items() if k != "net_width"}, {True}),
                                             (SPACE, {True, False})], ids=["same widths", "new widths"])
def test_a_kept_ppo_trains_the_next_generations_as_a_new_one_would(monkeypatch, space, reloads):
    """The multiplexed engine keeps its PPO across generations (``KeptPPO``): reloaded in place
    when the next generation's networks have its shapes (its env counts may change: Nitro's,
    or a copy's), rebuilt when not. Either way a run equals one that builds a new PPO every
    generation, bit for bit, with the weight average and the anchor in play."""
    seen: list[bool] = []
    reload = BatchedPPO.reload
    monkeypatch.setattr(BatchedPPO, "reload", lambda self, *a: seen.append(reload(self, *a)) or seen[-1])
    ppo = dataclasses.replace(PPO, average=4, anchor=1.0)
    data = market(t=80, n=3, k=2)
    cfg = EvolutionConfig(population=4, generations=4, iterations_per_generation=2, eval_interval=1, quantile=0.5,
                          search_space=space, seed=5)

    def run(runner):  # type: ignore[no-untyped-def]
        evolution = Evolution(data, scales(data, ENV), ENV, ppo, cfg, (0, 59), (59, 79), 252.0)
        return evolution.run(runner=runner), evolution.state

    with KeptPPO() as kept:
        (kept_result, kept_state), kept_seen = run(kept), list(seen)
    rebuilt_result, rebuilt_state = run(run_multiplexed)
    assert set(kept_seen) == reloads and len(kept_seen) == cfg.generations - 1
    assert [r.fitness for r in kept_state.history] == [r.fitness for r in rebuilt_state.history]
    assert len({r.hparams["num_envs"] for r in kept_state.history}) > 1
    for a, b in zip(kept_state.states, rebuilt_state.states):
        for net in ("actor", "critic", "average", "anchor"):
            mine, theirs = a["learners"][0][net], b["learners"][0][net]
            assert all(torch.equal(mine[k], theirs[k]) for k in mine)
        assert all(torch.equal(a["envs"][0][k], b["envs"][0][k]) for k in a["envs"][0])
    assert kept_result.best_fitness == rebuilt_result.best_fitness


def test_a_state_dict_resumes_training_bit_for_bit():
    jobs, setting = generation(iterations_per_generation=1)

    def trained(state, iterations: int, seed: int):
        pop = Multiplexed(setting, [setting.agent(jobs[0].hparams, seed, state)])
        for _ in range(iterations):
            pop.train_iteration([0])
        return pop.finish()[0]

    straight = trained(jobs[0].state, 4, jobs[0].seed)
    resumed = trained(trained(jobs[0].state, 2, jobs[0].seed), 2, 77)  # another seed: all comes from the state
    for net in ("actor", "critic"):
        a, b = straight["learners"][0][net], resumed["learners"][0][net]
        assert all(torch.equal(a[k], b[k]) for k in a)
    assert torch.equal(straight["envs"][0]["cash"], resumed["envs"][0]["cash"])



def test_a_chunked_evaluation_scores_each_agent_on_its_own_chunks():
    """With ``eval_chunks``, the batch holds each agent's chunks in a row: scoring two agents at
    once gives each the fitness it gets alone, and the chunks change it (docs/evolution.md)."""
    data = market(t=420, n=3, k=2)
    cfg = EvolutionConfig(population=2, generations=1, iterations_per_generation=1, search_space=SPACE)
    run = Evolution(data, scales(data, ENV), ENV, PPO, cfg, (0, 59), (59, 419), 252.0)
    chunked = dataclasses.replace(run.setting, eval_chunks=3)
    agents = [chunked.agent(run.state.hparams[i], run.state.seeds[i], run.state.states[i]) for i in range(2)]
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():  # policies that trade (a fresh actor's last layer is near zero)
        for agent in agents:
            for p in agent.learners[0].actor.net.parameters():
                p.copy_(torch.randn(p.shape, generator=g))
    both = Multiplexed(chunked, agents).evaluate()
    alone = [Multiplexed(chunked, [agent]).evaluate()[0] for agent in agents]
    assert both == pytest.approx(alone, rel=1e-9, abs=1e-12)
    single = Multiplexed(run.setting, agents).evaluate()
    assert all(a != b for a, b in zip(both, single))
