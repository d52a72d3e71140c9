"""Agent jobs: budgets, Nitro's env scaling in both engines, and inputs left untouched."""

import copy
import dataclasses

import pytest
import torch

from tests.trainers.helpers import evolve, market, scales
from trainers.common.jobs import AgentJob
from trainers.config import EnvConfig, NitroConfig, PPOConfig, RuntimeConfig
from trainers.population.config import EvolutionConfig
from trainers.population.dispatch import gpu_turn, run_job, set_deterministic
from trainers.population.evolution import Evolution, run_serially
from trainers.ppo.multiplex import run_multiplexed

ENV = EnvConfig(initial_cash=10_000.0, hmax=20, episode_len=8, min_episode_len=4)
PPO = PPOConfig(num_envs=4, horizon=8, batch_size=16, repeat_times=2, net_dims=(8,), lr=3e-3)
NITRO = NitroConfig(enabled=True, min_envs=2, max_envs=12, window=3, decay=0.9, lanczos_steps=4, subset=16)


def first_generation(nitro=NitroConfig(), ppo=PPO, **evo):
    data = market(t=80, n=3, k=2)
    cfg = EvolutionConfig(**{"population": 3, "generations": 1, "iterations_per_generation": 4, "eval_interval": 2,
                             "search_space": {"lr": (1e-3, 1e-2), "num_envs": (2, 6)}, **evo})
    run = Evolution(data, scales(data, ENV), ENV, ppo, cfg, (0, 59), (59, 79), 252.0, nitro)
    pop = run.state
    jobs = [AgentJob(0, i, pop.hparams[i], pop.seeds[i], pop.states[i], pop.best[i], pop.last[i], pop.falls[i], None,
                     run.budget) for i in range(cfg.population)]
    return jobs, run.setting


def test_running_a_job_leaves_its_input_untouched():
    jobs, setting = first_generation()
    trained = run_job(jobs[0], setting)  # a job whose state holds Adam moments, not an empty optimizer
    job = dataclasses.replace(jobs[0], state=trained.state, generation=1)
    before = copy.deepcopy(job.state)
    run_job(job, setting)
    moments, saved = job.state["learners"][0]["optimizer"]["state"], before["learners"][0]["optimizer"]["state"]
    assert moments and moments.keys() == saved.keys()
    assert all(torch.equal(m[name], saved[k][name]) for k, m in moments.items() for name in ("exp_avg", "exp_avg_sq"))
    assert all(torch.equal(job.state["learners"][0]["actor"][k], v) for k, v in before["learners"][0]["actor"].items())
    assert torch.equal(job.state["envs"][0]["rng"], before["envs"][0]["rng"])


def test_a_shipped_job_sets_train_deterministic_in_the_process_that_runs_it():
    """A Dask worker is a process of its own: the driver's ``train.deterministic`` reaches it
    only through the shipped setting."""
    jobs, setting = first_generation()
    try:
        run_job(jobs[0], dataclasses.replace(setting, runtime=RuntimeConfig(deterministic=True)))
        assert not torch.are_deterministic_algorithms_enabled()  # in the driver's process, its own switch holds
        run_job(jobs[0], dataclasses.replace(setting, runtime=RuntimeConfig(deterministic=True)).shipped())
        assert torch.are_deterministic_algorithms_enabled()
    finally:
        set_deterministic(False)


def test_jobs_on_cuda_go_to_the_gpu_workers_in_turn():
    workers = {"tcp://b:2": {"resources": {"GPU": 1}}, "tcp://cpu:3": {"resources": {}},
               "tcp://a:1": {"resources": {"GPU": 1}}}
    assert [gpu_turn(workers, turn)["workers"] for turn in range(3)] == [["tcp://a:1"], ["tcp://b:2"], ["tcp://a:1"]]
    assert gpu_turn(workers, 0)["allow_other_workers"] is True  # a job whose worker has gone runs elsewhere
    assert gpu_turn({"tcp://cpu:3": {"resources": {}}}, 0) == {}  # no GPU worker yet: Dask waits for one


def test_a_job_never_spends_more_than_its_budget():
    jobs, setting = first_generation(budget_env_steps=3 * 60)  # 60 env steps a job, less than 4 rounds of 16..48
    for job in run_serially(jobs, setting):
        round_cost = int(job.hparams["num_envs"]) * PPO.horizon
        assert job.cost.env_steps <= 60 < job.cost.env_steps + round_cost  # it stopped at the last affordable round
        assert job.records[-1].stopped
        spent = [r.env_steps for r in job.records]  # what the agent had spent at each evaluation
        assert spent == sorted(spent) and spent[-1] == job.cost.env_steps
        assert job.cost.cpu_seconds > 0 and job.cost.gpu_seconds == 0


def test_evolution_respects_the_run_budget_in_both_engines():
    data = market(t=80, n=3, k=2)
    evo = EvolutionConfig(population=3, generations=2, iterations_per_generation=3, eval_interval=1,
                          search_space={"num_envs": (2, 6)}, budget_env_steps=400)
    for runner in (run_serially, run_multiplexed):
        result = evolve(data, scales(data, ENV), ENV, PPO, evo, (0, 59), (59, 79), per_year=252.0, runner=runner)
        assert 0 < result.cost.env_steps <= 400


@pytest.mark.parametrize("credit", ["joint", "per_stock"])
def test_nitro_rescales_envs_within_bounds_the_same_in_both_engines(credit):
    jobs, setting = first_generation(NITRO, dataclasses.replace(PPO, credit=credit))
    alone, batched = run_serially(jobs, setting), run_multiplexed(jobs, setting)
    for a, b in zip(alone, batched):
        counts = [r.hparams["num_envs"] for r in a.records]
        assert all(NITRO.min_envs <= c <= NITRO.max_envs for c in counts)
        assert counts == [r.hparams["num_envs"] for r in b.records]  # the same boosting decisions
        assert a.boost["rounds"] == b.boost["rounds"] == 4
        assert a.boost["history"] == pytest.approx(b.boost["history"], rel=1e-5)  # R, up to float summation order
        assert a.state["envs"][0]["cash"].shape[0] == a.hparams["num_envs"]
    assert len({r.hparams["num_envs"] for job in alone for r in job.records}) > 1  # it does change the counts


def test_a_nitro_run_resumes_exactly(tmp_path):
    data = market(t=80, n=3, k=2)
    evo = EvolutionConfig(population=2, generations=3, iterations_per_generation=2, eval_interval=1,
                          search_space={"lr": (1e-3, 1e-2)})

    def run(**kw):
        return evolve(data, scales(data, ENV), ENV, PPO, evo, (0, 59), (59, 79), per_year=252.0, nitro=NITRO, **kw)

    straight = run(checkpoint_dir=tmp_path / "a")

    def killed(gen, agent, fitness):
        if gen == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(checkpoint_dir=tmp_path / "b", on_evaluated=killed)
    resumed = run(checkpoint_dir=tmp_path / "b", resume=True)
    assert [r.fitness for r in straight.history] == [r.fitness for r in resumed.history]
    assert [r.hparams["num_envs"] for r in straight.history] == [r.hparams["num_envs"] for r in resumed.history]
    assert all(torch.equal(straight.best_actor[k], resumed.best_actor[k]) for k in straight.best_actor)
