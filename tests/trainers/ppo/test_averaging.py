"""The averaged policy (``ppo.average``, ``trainers/ppo/averaging.py``): the mean of the iterates by
hand, then an exponential average; what the evaluator scores and a snapshot keeps; carried by a
checkpoint and by the selector's copies."""

import copy
import dataclasses

import pytest
import torch

from tests.trainers.helpers import market, scales
from trainers.common.evaluate import run_policy
from trainers.common.jobs import AgentJob
from trainers.common.metrics import FITNESS
from trainers.config import EnvConfig, PPOConfig
from trainers.population.config import EvolutionConfig
from trainers.population.evolution import Evolution
from trainers.ppo.agent import PPOAgent, policy_weights
from trainers.ppo.multiplex import Multiplexed, run_multiplexed

ENV = EnvConfig(initial_cash=10_000.0, episode_len=8, min_episode_len=4, action="weights")
PPO = PPOConfig(num_envs=4, horizon=8, batch_size=16, repeat_times=2, net_dims=(8,), lr=3e-3, average=3,
                policy="shared")
SPACE = {"lr": (1e-3, 1e-2), "net_width": (4, 12)}


def setup(ppo: PPOConfig = PPO, population: int = 2, iterations: int = 4):
    data = market(t=80, n=3, k=2)
    cfg = EvolutionConfig(population=population, generations=1, iterations_per_generation=iterations, eval_interval=1,
                          search_space=SPACE, quantile=0.5)
    run = Evolution(data, scales(data, ENV), ENV, ppo, cfg, (0, 59), (59, 79), 252.0)
    pop = run.state
    jobs = [AgentJob(0, i, pop.hparams[i], pop.seeds[i], pop.states[i], pop.best[i], pop.last[i], pop.falls[i], None)
            for i in range(cfg.population)]
    return run, jobs


def test_the_average_is_the_mean_of_the_first_iterates_then_moves_a_window_share():
    """window 3: after iterations 1-3 the mean of their weights; after the 4th, a third of the
    way from that mean to the 4th weights."""
    run, jobs = setup()
    agent = PPOAgent.of(run.setting, jobs[0].hparams, jobs[0].seed, jobs[0].state)
    engine = Multiplexed(run.setting, [agent])
    iterates = []
    for _ in range(4):
        engine.train_iteration([0])
        iterates.append(_current(engine))
    mean3 = {k: sum(it[k] for it in iterates[:3]) / 3 for k in iterates[0]}
    want = {k: mean3[k] + (iterates[3][k] - mean3[k]) / 3 for k in mean3}
    got = engine.actor_state(0)
    for k in want:
        torch.testing.assert_close(got[k], want[k], atol=1e-6, rtol=0)
    assert not torch.allclose(got["net.0.weight"], iterates[3]["net.0.weight"])  # not the last iterate


def _current(engine: Multiplexed) -> dict[str, torch.Tensor]:
    actor = copy.deepcopy(engine.agents[0].actor)
    engine.ppo.nets.write_back(0, actor)
    return {k: v.clone() for k, v in actor.state_dict().items()}


def test_the_evaluator_scores_the_averaged_policy_and_the_snapshot_keeps_it():
    run, jobs = setup(population=1)
    (done,) = run_multiplexed(jobs, run.setting)
    weights = policy_weights(done.state)
    assert done.state["learners"][0]["averaged"] == 4
    actor = copy.deepcopy(run.setting.agent(done.hparams, done.seed).actor)
    actor.load_state_dict(weights)
    curve = run_policy(actor, run.setting.data, run.setting.scales, ENV, run.setting.val_window)
    assert done.records[-1].fitness == pytest.approx(FITNESS["sharpe"](curve, 252.0), abs=1e-9)
    best_fitness, _, snapshot = done.best
    if best_fitness == done.records[-1].fitness:
        for k in weights:
            torch.testing.assert_close(snapshot[k], weights[k])


def test_without_averaging_the_policy_is_the_last_iterate():
    run, jobs = setup(dataclasses.replace(PPO, average=0), population=1)
    (done,) = run_multiplexed(jobs, run.setting)
    learner = done.state["learners"][0]
    assert learner["average"] is None
    for k, v in policy_weights(done.state).items():
        assert torch.equal(v, learner["actor"][k])


def test_a_resumed_run_keeps_the_average(tmp_path):
    """A run killed in its second generation and resumed from its checkpoint ends with the
    averages, counts and fitness of an uninterrupted one."""
    data = market(t=80, n=3, k=2)
    cfg = EvolutionConfig(population=2, generations=2, iterations_per_generation=2, eval_interval=1,
                          search_space=SPACE, quantile=0.5)

    def run(folder, on_evaluated=None, resume=False):
        evo = Evolution(data, scales(data, ENV), ENV, PPO, cfg, (0, 59), (59, 79), 252.0)
        if resume:
            evo.resume(folder)
        evo.run(on_evaluated, folder, run_multiplexed)
        return evo

    straight = run(tmp_path / "a")

    def killed(gen, agent, fitness):
        if gen == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "b", killed)
    resumed = run(tmp_path / "b", resume=True)
    assert [r.fitness for r in resumed.state.history] == [r.fitness for r in straight.state.history]
    for a, b in zip(straight.state.states, resumed.state.states):
        assert a["learners"][0]["averaged"] == b["learners"][0]["averaged"] == 4
        assert all(torch.equal(a["learners"][0]["average"][k], b["learners"][0]["average"][k])
                   for k in a["learners"][0]["average"])


def test_a_copy_starts_from_its_parents_average():
    data = market(t=80, n=3, k=2)
    cfg = EvolutionConfig(population=2, generations=2, iterations_per_generation=2, eval_interval=1,
                          search_space=SPACE, quantile=0.5)
    run = Evolution(data, scales(data, ENV), ENV, PPO, cfg, (0, 59), (59, 79), 252.0)
    checked = []

    def check(_best) -> None:
        pop = run.state
        if pop.generation != 1:
            return
        for dst, src in pop.parents.items():
            mine, theirs = pop.states[dst]["learners"][0], pop.states[src]["learners"][0]
            assert mine["averaged"] == theirs["averaged"] == 2
            assert all(torch.equal(mine["average"][k], theirs["average"][k]) for k in theirs["average"])
            checked.append(dst)

    run.run(runner=run_multiplexed, on_generation=check)
    assert checked


def test_the_average_window_must_not_be_negative():
    with pytest.raises(ValueError, match="average must be >= 0"):
        PPOConfig(average=-1)
