from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

from tests.trainers.helpers import market, scales, tournament
from trainers.common.jobs import AgentJob
from trainers.config import EnvConfig, PPOConfig
from trainers.population.config import EvolutionConfig, TournamentConfig
from trainers.population.dispatch import Setting, run_job
from trainers.population.tournament import Entry, SimulatedPool, Tournament, tournament_select, update_board
from trainers.ppo.multiplex import Multiplexed

DATA = market(t=60)
ENV = EnvConfig(initial_cash=10_000.0, hmax=100, episode_len=8, min_episode_len=4)
PPO = PPOConfig(num_envs=4, horizon=8, batch_size=16, repeat_times=1, net_dims=(8,), lr=0.01)
SPACE = {"lr": (1e-3, 1e-2), "num_envs": (2, 8), "net_width": (4, 12)}


def configs(evo: dict | None = None, **tcfg) -> tuple[EvolutionConfig, TournamentConfig]:
    evo_cfg = EvolutionConfig(**{"population": 3, "generations": 3, "iterations_per_generation": 1,
                                 "eval_interval": 1, "search_space": SPACE, **(evo or {})})
    return evo_cfg, TournamentConfig(**{"workers": 2, "leaderboard_size": 3, "tournament_size": 2, **tcfg})


def make(evo: dict | None = None, **tcfg) -> Tournament:
    evo_cfg, t_cfg = configs(evo, **tcfg)
    return Tournament(DATA, scales(DATA, ENV), ENV, PPO, evo_cfg, t_cfg, (0, 39), (39, 59), 252.0)


def tiny_run(evo: dict | None = None, **tcfg):
    evo_cfg, t_cfg = configs(evo, **tcfg)
    return lambda **kw: tournament(DATA, scales(DATA, ENV), ENV, PPO, evo_cfg, t_cfg, (0, 39), (39, 59),
                                   per_year=252.0, **kw)


class RecordingPool(SimulatedPool):
    """A simulated pool that logs what is submitted and handed back, in order."""

    def __init__(self, setting: Setting, workers: int) -> None:
        super().__init__(setting, workers)
        self.events: list[tuple[str, int]] = []
        self.inputs: dict[int, AgentJob] = {}
        self.outputs: dict[int, AgentJob] = {}

    def submit(self, job: AgentJob, started_at: float | None = None) -> None:
        self.events.append(("submit", job.index))
        self.inputs[job.index] = job
        super().submit(job, started_at)

    def next_finished(self) -> AgentJob:
        done = super().next_finished()
        self.events.append(("finish", done.index))
        self.outputs[done.index] = done
        return done


def fresh_job(setting: Setting, index: int, num_envs: int, repeat_times: int) -> AgentJob:
    hparams = {**PPO.hparams(), "num_envs": float(num_envs), "repeat_times": float(repeat_times)}
    state = setting.agent(hparams, index).state_dict()
    return AgentJob(0, index, hparams, index, state, (-math.inf, 0, {}), math.nan, 0, None)


def test_the_simulated_pool_hands_jobs_back_in_virtual_finish_order():
    setting = make().setting
    expensive, cheap, cheap2 = (fresh_job(setting, 0, 8, 3), fresh_job(setting, 1, 2, 1),
                                fresh_job(setting, 2, 2, 1))
    cost = {j.index: setting.nominal_cost(j.hparams) for j in (expensive, cheap, cheap2)}
    assert cost[0] > 2 * cost[1]
    pool = SimulatedPool(setting, workers=2)
    pool.submit(expensive)
    pool.submit(cheap)
    assert [j.index for j in pool.pending()] == [0, 1]
    first = pool.next_finished()
    assert first.index == 1 and pool.clock == cost[1] and first.records and first.cost.env_steps > 0
    assert pool.pending() == [expensive]
    pool.submit(cheap2)  # starts at the cheap one's finish, still ends before the expensive one
    assert pool.schedule() == [(expensive, 0.0), (cheap2, cost[1])]
    restored = SimulatedPool(setting, workers=2, clock=cost[1])  # as a resumed run rebuilds it from a checkpoint
    restored.submit(expensive, started_at=0.0)
    restored.submit(cheap2)
    assert restored.schedule() == pool.schedule()
    assert pool.next_finished().index == 2 and pool.clock == cost[1] + cost[2]
    assert pool.next_finished().index == 0 and pool.clock == cost[0] and pool.pending() == []
    with pytest.raises(RuntimeError):
        pool.next_finished()

    serial = SimulatedPool(setting, workers=1)  # one worker: the cheap job queues behind the expensive one
    serial.submit(expensive)
    serial.submit(cheap)
    assert serial.next_finished().index == 0 and serial.clock == cost[0]
    assert serial.next_finished().index == 1 and serial.clock == cost[0] + cost[1]

    tie = SimulatedPool(setting, workers=2)  # equal finish times: submission order
    tie.submit(cheap2)
    tie.submit(cheap)
    assert [tie.next_finished().index for _ in range(2)] == [2, 1]


def test_a_handed_back_job_is_the_same_as_running_it_directly_and_its_input_is_unchanged():
    setting = make().setting
    job = run_job(fresh_job(setting, 0, 4, 1), setting)  # a trained job: it carries Adam moments
    pool = SimulatedPool(setting, workers=3)
    pool.submit(job)
    a, b = pool.next_finished(), run_job(job, setting)
    assert [r.fitness for r in a.records] == [r.fitness for r in b.records]
    assert all(torch.equal(a.best[2][k], b.best[2][k]) for k in b.best[2])


def test_jobs_are_generated_while_others_still_run():
    run = make(workers=3)
    pool = RecordingPool(run.setting, 3)
    run.run(pool=pool)
    finished = [i for kind, i in pool.events if kind == "finish"]
    assert sorted(finished) == list(range(9)) and finished != sorted(finished)
    at = {event: k for k, event in enumerate(pool.events)}
    children = {c: job.parent for c, job in pool.inputs.items() if job.parent is not None}
    assert children and all(at["finish", p] < at["submit", c] for c, p in children.items())  # parents first
    # No generation barrier: a copy is generated while a job started before its parent finished is still training.
    assert any(at["submit", j] < at["finish", p] and at["finish", j] > at["submit", c]
               for c, p in children.items() for j in pool.inputs)


def entry(fitness: float, job: int) -> Entry:
    return Entry(fitness, job, {}, job, {}, 0)


def test_the_updater_keeps_the_top_entries_sorted_by_fitness():
    board: list[Entry] = []
    assert all(update_board(board, entry(f, i), 3) for i, f in enumerate([1.0, 3.0, 2.0]))
    assert [e.job for e in board] == [1, 2, 0]
    assert not update_board(board, entry(0.5, 3), 3)  # worse than the worst of a full board
    assert not update_board(board, entry(1.0, 4), 3)  # a tie does not beat the worst
    assert not update_board(board, entry(math.nan, 5), 3)
    assert update_board(board, entry(2.5, 6), 3) and [e.job for e in board] == [1, 6, 2]
    assert update_board(board, entry(3.0, 7), 3) and [e.job for e in board] == [1, 7, 6]  # ties: older first

    run = make(leaderboard_size=2)  # in a run, the board ends as the top jobs by their last fitness
    run.run()
    last = {r.agent: r.fitness for r in run.state.history}
    assert len(run.state.board) == 2
    assert [e.fitness for e in run.state.board] == sorted(last.values(), reverse=True)[:2]
    assert all(last[e.job] == e.fitness for e in run.state.board)


def test_tournament_selection_copies_the_fittest_of_its_sample():
    board = [entry(f, i) for i, f in enumerate([3.0, 2.0, 1.0])]
    assert all(tournament_select(board, 3, np.random.default_rng(s)).job == 0 for s in range(10))
    picks = {tournament_select(board, 1, np.random.default_rng(s)).job for s in range(30)}
    assert picks == {0, 1, 2}
    assert tournament_select(board[:1], 2, np.random.default_rng(0)).job == 0  # fewer rows than the sample


def test_the_generator_copies_weights_and_adam_state_and_mutates_hparams_in_bounds():
    run = make({"population": 2}, workers=4, jobs=10)
    pool = RecordingPool(run.setting, 4)
    run.run(pool=pool)
    for index in (2, 3):  # generated before anything finished: fresh draws from the search space
        job = pool.inputs[index]
        assert job.parent is None and job.generation == 0 and 4 <= job.hparams["net_width"] <= 12
    children = [job for job in pool.inputs.values() if job.parent is not None]
    assert children
    for child in children:
        parent = pool.outputs[child.parent]
        mine, theirs = child.state["learners"][0], parent.state["learners"][0]
        for net in ("actor", "critic"):
            assert all(torch.equal(mine[net][k], theirs[net][k]) for k in theirs[net])
        adam, parent_adam = mine["optimizer"]["state"], theirs["optimizer"]["state"]
        assert adam.keys() == parent_adam.keys() and adam
        assert all(torch.equal(adam[p][m], parent_adam[p][m]) for p in adam for m in adam[p])
        assert child.hparams["net_width"] == parent.hparams["net_width"]  # structural: inherited
        assert SPACE["lr"][0] <= child.hparams["lr"] <= SPACE["lr"][1]
        assert child.hparams["num_envs"] == round(child.hparams["num_envs"]) and 2 <= child.hparams["num_envs"] <= 8
        assert child.generation == parent.generation + 1 and child.last == parent.last and child.falls == 0
        assert child.seed == child.index and torch.equal(child.best[2]["log_std"], theirs["actor"]["log_std"])
    assert any(c.hparams["lr"] != pool.outputs[c.parent].hparams["lr"] for c in children)  # mutated


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """An uninterrupted run of the tiny config and the folder of its checkpoint."""
    folder = tmp_path_factory.mktemp("straight")
    result = tiny_run()(checkpoint_dir=folder)
    return result, folder


def test_the_result_is_the_best_validation_snapshot_over_all_jobs(straight):
    result = straight[0]
    assert {r.agent for r in result.history} == set(range(9))  # population × generations jobs
    assert result.best_fitness == max(r.fitness for r in result.history)
    best = [r for r in result.history if r.agent == result.best_agent]
    assert result.best_hparams == best[0].hparams and result.best_generation == best[0].generation
    assert any(r.generation > 0 and r.parent is not None for r in result.history)  # lineage is recorded
    assert result.env_steps == sum(int(r.hparams["num_envs"]) * 8 for r in result.history)
    setting = make().setting
    agent = setting.agent(result.best_hparams, 0)
    agent.actor.load_state_dict(result.best_actor)
    assert Multiplexed(setting, [agent]).evaluate() == [result.best_fitness]
    assert {r.agent for r in tiny_run(jobs=5)().history} == set(range(5))


def test_same_seed_same_run_and_another_seed_another(straight):
    a, b, c = straight[0], tiny_run()(), tiny_run({"seed": 1})()
    assert all(torch.equal(a.best_actor[k], b.best_actor[k]) for k in a.best_actor)
    assert [(r.agent, r.fitness) for r in a.history] == [(r.agent, r.fitness) for r in b.history]
    assert (a.best_fitness, a.best_agent, a.env_steps) == (b.best_fitness, b.best_agent, b.env_steps)
    assert [r.fitness for r in a.history] != [r.fitness for r in c.history]


def test_a_resumed_run_ends_exactly_as_an_uninterrupted_one(tmp_path, straight):
    run = tiny_run()
    straight, folder = straight
    calls = []

    def killed(depth, job, fitness):
        calls.append(job)
        if len(calls) == 4:  # die in the middle of a run, while another job is in flight
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(checkpoint_dir=tmp_path / "b", on_evaluated=killed)
    resumed = run(checkpoint_dir=tmp_path / "b", resume=True)
    assert all(torch.equal(straight.best_actor[k], resumed.best_actor[k]) for k in straight.best_actor)
    assert [(r.agent, r.fitness) for r in straight.history] == [(r.agent, r.fitness) for r in resumed.history]
    assert straight.env_steps == resumed.env_steps and straight.best_agent == resumed.best_agent

    with pytest.raises(ValueError, match="different"):
        tiny_run(leaderboard_size=2)(checkpoint_dir=folder, resume=True)
    old = torch.load(folder / "tournament.pt", weights_only=True)  # as written before a field was renamed
    old["best_algo"] = old.pop("best_algorithm")
    (tmp_path / "old").mkdir()
    torch.save(old, tmp_path / "old" / "tournament.pt")
    with pytest.raises(ValueError, match="another version of the tournament"):
        run(checkpoint_dir=tmp_path / "old", resume=True)
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        run(checkpoint_dir=tmp_path / "c", resume=True)


class FifoPool:
    """A pool without a clock: jobs finish in submission order."""

    def __init__(self, setting: Setting) -> None:
        self.setting, self.queue = setting, []

    def submit(self, job: AgentJob) -> None:
        self.queue.append(job)

    def next_finished(self) -> AgentJob:
        return run_job(copy.deepcopy(self.queue.pop(0)), self.setting)

    def pending(self) -> list[AgentJob]:
        return list(self.queue)


def test_any_job_pool_runs_and_resumes_a_tournament(tmp_path):
    run, setting = tiny_run(jobs=5), make().setting
    fifo = run(pool=FifoPool(setting))
    assert [r.agent for r in fifo.history] == list(range(5))

    def killed(depth, job, fitness):
        if job == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(pool=FifoPool(setting), checkpoint_dir=tmp_path, on_evaluated=killed)
    resumed = run(pool=FifoPool(setting), checkpoint_dir=tmp_path, resume=True)
    assert [(r.agent, r.fitness) for r in resumed.history] == [(r.agent, r.fitness) for r in fifo.history]
    assert all(torch.equal(fifo.best_actor[k], resumed.best_actor[k]) for k in fifo.best_actor)


@pytest.mark.parametrize("bad", [{"workers": 0}, {"jobs": 0}, {"leaderboard_size": 0}, {"tournament_size": 0},
                                 {"tournament_size": 5, "leaderboard_size": 4}])
def test_bad_tournament_config_is_rejected(bad):
    with pytest.raises(ValueError):
        TournamentConfig(**bad)
