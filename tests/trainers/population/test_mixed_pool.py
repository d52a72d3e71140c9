"""A tournament whose pool holds PPO and SAC agents (elegantrl-podracers §3; docs/evolution.md,
A pool of several algorithms): who trains each job, what the leaderboard keeps, what a copy
inherits, and a resume after a kill."""

from __future__ import annotations

import math

import pytest
import torch

from tests.trainers.helpers import market, scales
from trainers.config import EnvConfig, PPOConfig, SACConfig
from trainers.population.config import EvolutionConfig, TournamentConfig
from trainers.population.tournament import Entry, Tournament, algorithm_of, update_board

DATA = market(t=60)
ENV = EnvConfig(initial_cash=10_000.0, hmax=100, episode_len=8, min_episode_len=4)
PPO = PPOConfig(num_envs=4, horizon=8, batch_size=16, repeat_times=1, net_dims=(8,), lr=0.01)
SAC = SACConfig(num_envs=4, horizon=8, batch_size=16, buffer_size=64, updates=2, net_dims=(8,), critic_dims=(16,),
                search_space={"lr": (1e-3, 1e-2), "tau": (0.01, 0.1), "num_envs": (2, 8), "net_width": (4, 12)})
PPO_SPACE = {"lr": (1e-3, 1e-2), "num_envs": (2, 8), "net_width": (4, 12)}
MIXED = {"ppo": 0.5, "sac": 0.5}


def make(jobs: int = 8, algorithms: dict[str, float] = MIXED, seed: int = 0) -> Tournament:
    evo = EvolutionConfig(population=4, generations=2, iterations_per_generation=1, eval_interval=1,
                          search_space=PPO_SPACE, seed=seed)
    tcfg = TournamentConfig(workers=2, jobs=jobs, leaderboard_size=2, tournament_size=2, algorithms=algorithms)
    return Tournament(DATA, scales(DATA, ENV), ENV, PPO, evo, tcfg, (0, 39), (39, 59), 252.0, sac_cfg=SAC)


def test_each_algorithm_gets_its_share_of_the_jobs_in_every_prefix():
    """Largest deficit first, ties in the order given: by hand, 3:1 gives ppo ppo sac ppo, repeated."""
    assert [algorithm_of(j, MIXED) for j in range(4)] == ["ppo", "sac", "ppo", "sac"]
    three_to_one = [algorithm_of(j, {"ppo": 0.75, "sac": 0.25}) for j in range(8)]
    assert three_to_one == ["ppo", "ppo", "sac", "ppo"] * 2
    assert [algorithm_of(j, {"sac": 1.0}) for j in range(3)] == ["sac"] * 3


def test_each_algorithm_keeps_its_own_rows_on_the_leaderboard():
    """Size 2 per algorithm: a weak SAC entry is kept beside stronger PPO ones, and an entry
    only ever displaces the worst row of its own algorithm."""
    board: list[Entry] = []

    def offer(fitness: float, job: int, algorithm: str) -> bool:
        return update_board(board, Entry(fitness, job, {}, job, {}, 0, algorithm=algorithm), 2)

    assert offer(3.0, 0, "ppo") and offer(2.0, 1, "ppo") and offer(0.5, 2, "sac")
    assert offer(2.5, 3, "ppo")  # displaces ppo 2.0, not sac 0.5
    assert offer(0.1, 4, "sac") and not offer(0.05, 5, "sac") and not offer(1.0, 6, "ppo")
    assert [(e.job, e.algorithm) for e in board] == [(0, "ppo"), (3, "ppo"), (2, "sac"), (4, "sac")]


@pytest.fixture(scope="module")
def mixed():
    run = make()
    result = run.run()
    return run, result


def test_a_mixed_pool_trains_both_and_copies_within_an_algorithm(mixed):
    run, result = mixed
    algorithm_of_job = {r.agent: r.algorithm for r in result.history}
    assert algorithm_of_job == {j: algorithm_of(j, MIXED) for j in range(8)}
    for r in result.history:
        keys = set(r.hparams)
        assert keys == set((SAC if r.algorithm == "sac" else PPO).hparams()), r  # its own hyperparameters only
        if r.parent is not None:
            assert algorithm_of_job[r.parent] == r.algorithm  # a copy of its own kind
        if r.algorithm == "sac" and r.parent is not None:
            for name, (lo, hi) in SAC.search_space.items():
                assert lo <= r.hparams[name] <= hi
    assert {e.algorithm for e in run.state.board} == {"ppo", "sac"}
    assert sorted((e.fitness for e in result.leaders), reverse=True) == [e.fitness for e in result.leaders]
    assert [(e.job, e.algorithm) for e in result.leaders] == [(e.job, e.algorithm) for e in run.state.board]


def test_a_sac_copy_continues_from_its_parents_replay_buffer():
    run = make(jobs=6)
    run.run()
    sac_rows = [e for e in run.state.board if e.algorithm == "sac"]
    parent = sac_rows[0]
    hparams, state = run.setting.offspring(parent.hparams, parent.seed, parent.state, dict(parent.hparams), 999, "sac")
    mine, theirs = state["buffer"], parent.state["buffer"]
    assert len(theirs["obs"]) and all(torch.equal(mine[k], theirs[k]) for k in theirs if torch.is_tensor(theirs[k]))
    assert not torch.equal(state["rng"], parent.state["rng"])  # its own random stream


def test_a_killed_mixed_tournament_resumes_and_ends_as_an_uninterrupted_one(tmp_path, mixed):
    _, straight = mixed

    def killed(depth, job, fitness):
        if job == 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        make().run(on_evaluated=killed, checkpoint_dir=tmp_path)
    resumed_run = make()
    resumed_run.resume(tmp_path)
    resumed = resumed_run.run(checkpoint_dir=tmp_path)
    assert [(r.agent, r.algorithm, r.fitness) for r in resumed.history] == [
        (r.agent, r.algorithm, r.fitness) for r in straight.history]
    assert resumed.best_algorithm == straight.best_algorithm and resumed.env_steps == straight.env_steps
    assert all(torch.equal(straight.best_actor[k], resumed.best_actor[k]) for k in straight.best_actor)
    assert all(math.isfinite(r.fitness) for r in resumed.history)
