"""Tournament-based ensemble training (elegantrl-podracers §3, §4.1): the asynchronous
alternative to the generational mode of :mod:`trainers.population.evolution`.

A *training pool* runs ``workers`` agent jobs at a time with no generation barrier. When a
job finishes, the *updater* may insert it into a *leaderboard* of the best agents, and the
*generator* fills the freed slot with a new job: a copy of a leaderboard agent chosen by
tournament selection (weights and Adam state, §4.1's "training files"), its hyperparameters
mutated by PBT exploration. Jobs are the self-contained :class:`trainers.common.jobs.AgentJob`
of the generational mode, so a real pool (Dask, Prefect) and the in-process
:class:`SimulatedPool` run the same code. A checkpoint after every finished job lets a killed
run resume and end exactly as an uninterrupted one.
"""

from __future__ import annotations

import copy
import heapq
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trainers import profiler
from trainers._checks import require
from trainers.algorithms import ALGORITHMS, DEFAULT_LEARNER, check_names
from trainers.common.cost import CostLedger
from trainers.common.env import MarketData
from trainers.common.jobs import AgentJob, AgentRecord, Snapshot
from trainers.common.state import StateScales
from trainers.config import EnvConfig, NitroConfig, PPOConfig, RuntimeConfig, SACConfig
from trainers.population.config import EvolutionConfig, TournamentConfig
from trainers.population.dispatch import JobPool, Setting, run_job
from trainers.population.evolution import (
    EvolutionResult,
    Leader,
    ProgressFn,
    atomic_save,
    job_budget,
    make_setting,
    resume_from,
)
from trainers.population.selection import draw, explore, initial_population

CHECKPOINT = "tournament.pt"
_INPUTS = ("generation", "index", "hparams", "seed", "state", "best", "last", "falls", "parent", "budget", "boost",
           "algorithm")
"""The fields of an :class:`AgentJob` that a job's input consists of (records and env steps are outputs)."""


class SimulatedPool:
    """A :class:`~trainers.population.dispatch.JobPool` of ``workers`` slots in this process.

    Jobs run one at a time here, but are handed back in the order a real pool of
    ``workers`` workers would finish them, taking ``Setting.nominal_cost(job.hparams)`` as a
    job's duration on a virtual clock (ties: submission order; a job submitted while every
    worker is busy waits for the first free one). The asynchronous scheme thus becomes
    deterministic and testable in-process: what the generator sees at each step is what it
    would see in a real pool with those durations. Lazy: a job runs when it is handed back,
    which is sound because its result depends only on its input.

    ``clock`` is the virtual time of the last finish, i.e. the finish time of the job
    :meth:`next_finished` last handed back; :meth:`schedule` gives the pending jobs' start times.
    """

    def __init__(self, setting: Setting, workers: int, clock: float = 0.0) -> None:
        require(workers >= 1, "workers must be >= 1")
        self.setting = setting
        self.clock = clock
        self._free = [clock] * workers
        """When each worker is next free (a heap)."""
        self._running: list[tuple[float, int, float, AgentJob]] = []
        """(finish, submission number, start, input) per pending job, in submission order."""
        self._submitted = 0

    def submit(self, job: AgentJob, started_at: float | None = None) -> None:
        """Queue ``job`` on the first free worker, starting no earlier than ``clock``.
        ``started_at`` overrides the start: a resumed run passes each in-flight job's
        original start (from :meth:`schedule`), so it finishes when it would have."""
        free = heapq.heappop(self._free)
        start = max(free, self.clock) if started_at is None else started_at
        finish = start + self.setting.nominal_cost(job.hparams, job.algorithm)
        heapq.heappush(self._free, finish)
        self._running.append((finish, self._submitted, start, job))
        self._submitted += 1

    def next_finished(self) -> AgentJob:
        """Run and return the pending job that finishes first; advance ``clock`` to its finish."""
        if not self._running:
            raise RuntimeError("no job in the pool")
        first = min(range(len(self._running)), key=lambda i: self._running[i][:2])
        finish, _, _, job = self._running.pop(first)
        self.clock = finish
        return run_job(job, self.setting)

    def pending(self) -> list[AgentJob]:
        """The inputs of the jobs not yet handed back, in submission order."""
        return [job for job, _ in self.schedule()]

    def schedule(self) -> list[tuple[AgentJob, float]]:
        """The pending jobs' inputs with their virtual start times, in submission order."""
        return [(job, start) for _, _, start, job in self._running]


@dataclass
class Entry:
    """One leaderboard row: a finished job and the training files it hands on (§4.1)."""

    fitness: float
    """The job's last evaluation: the fitness of the state it hands on."""
    job: int
    hparams: dict[str, float]
    seed: int
    state: dict[str, Any]
    """``PPOAgent.state_dict()`` at the end of the job: what the generator copies (weights + optimizer)."""
    depth: int
    """Lineage depth: 0 for a fresh agent, the parent's depth + 1 for a copy."""
    boost: dict[str, Any] | None = None
    """Nitro's score state, handed on with the weights."""
    algorithm: str = DEFAULT_LEARNER
    """The learner that trained it; its copies are trained by the same."""


def _rank(fitness: float) -> float:
    """NaN (and infinite) fitness counts as worst, as in :func:`trainers.population.selection.select`."""
    return fitness if math.isfinite(fitness) else -math.inf


def update_board(board: list[Entry], entry: Entry, size: int) -> bool:
    """The updater (§4.1): insert ``entry`` into ``board`` (best first) if its algorithm holds
    fewer than ``size`` rows or it beats that algorithm's worst row, which it then replaces;
    on equal fitness the older entry ranks first. Each algorithm keeps its own ``size``
    rows, so one learner's entries never push another's copies out of the pool. Returns
    whether ``entry`` was inserted."""
    own = [e for e in board if e.algorithm == entry.algorithm]
    if len(own) >= size and _rank(entry.fitness) <= _rank(own[-1].fitness):
        return False
    board.append(entry)
    board.sort(key=lambda e: -_rank(e.fitness))  # stable: ties keep their order
    if len(own) >= size:
        board.remove(own[-1])
    return True


def tournament_select(board: list[Entry], size: int, rng: np.random.Generator) -> Entry:
    """Tournament selection: the fittest of ``size`` rows drawn without replacement (all
    rows while the board holds fewer). ``board`` is sorted best first."""
    picks = rng.choice(len(board), size=min(size, len(board)), replace=False)
    return board[int(picks.min())]


def algorithm_of(job: int, shares: dict[str, float]) -> str:
    """The learner of the pool's ``job``-th job: the algorithm furthest below its share of
    the jobs so far (ties: the order of ``shares``), so any prefix of the jobs keeps every
    algorithm within one job of its share."""
    counts = dict.fromkeys(shares, 0)
    total = sum(shares.values())
    for j in range(job + 1):
        pick = max(shares, key=lambda a: shares[a] / total * (j + 1) - counts[a])
        counts[pick] += 1
    return pick


@dataclass
class _Run:
    """Everything that changes during a run: what a checkpoint holds."""

    board: list[Entry] = field(default_factory=list)
    best: Snapshot = field(default_factory=lambda: (-math.inf, 0, {}))
    """The best validation snapshot of all finished jobs (fitness, depth, actor weights)."""
    best_job: int = -1
    best_hparams: dict[str, float] = field(default_factory=dict)
    best_algorithm: str = DEFAULT_LEARNER
    history: list[AgentRecord] = field(default_factory=list)
    cost: CostLedger = field(default_factory=CostLedger)
    submitted: int = 0
    pending: list[tuple[AgentJob, float | None]] = field(default_factory=list)
    """Jobs in flight with their virtual start (``None`` from a pool without a clock)."""
    clock: float = 0.0


class Tournament:
    """One tournament run (elegantrl-podracers §3–4.1) over ``data``.

    The orchestrator keeps ``workers`` jobs in the pool until ``jobs`` have been submitted.
    When one finishes, the updater offers it to the leaderboard, the run's best validation
    snapshot is updated, and the generator submits the next job. The first ``population``
    jobs are fresh agents from :func:`~trainers.population.selection.initial_population` (job 0 = the
    PPO defaults) so the board starts diverse; later ones are explored copies of a
    tournament winner (:meth:`Setting.offspring`), or fresh draws from the search space
    while the board is still empty. Every job is ``run_job``: ``iterations_per_generation``
    iterations, evaluations every ``eval_interval``, patience. Job ``j`` gets seed
    ``seed * 1000 + j``; all other randomness comes from one generator seeded by ``seed``.

    With several ``tournament.algorithms`` the pool is mixed (§3): job ``j`` is trained by
    :func:`algorithm_of`, a fresh agent draws from its algorithm's search space (the first
    of each algorithm keeps its defaults), and a copy's parent is a tournament winner among
    the board rows of the same algorithm, explored within that algorithm's space.
    """

    CHECKPOINT = CHECKPOINT

    def __init__(self, data: MarketData, scales: StateScales, env_cfg: EnvConfig, ppo_cfg: PPOConfig,
                 cfg: EvolutionConfig, tcfg: TournamentConfig, train_window: tuple[int, int],
                 val_window: tuple[int, int], per_year: float, nitro: NitroConfig = NitroConfig(),
                 sac_cfg: SACConfig = SACConfig(), runtime: RuntimeConfig = RuntimeConfig()) -> None:
        check_names(tcfg.algorithms)
        self.cfg, self.tcfg = cfg, tcfg
        self.jobs = tcfg.jobs if tcfg.jobs is not None else cfg.population * cfg.generations
        self.setting = make_setting(data, scales, env_cfg, ppo_cfg, cfg, train_window, val_window, per_year, nitro,
                                    sac_cfg, runtime)
        self.budget = job_budget(cfg, self.jobs)
        self.rng = np.random.default_rng(cfg.seed)
        learners = [algorithm_of(j, tcfg.algorithms) for j in range(cfg.population)]
        drawn = {a: initial_population(self.setting.base(a).hparams(), self.space(a), learners.count(a), self.rng)
                 for a in tcfg.algorithms}
        self.initial = [(a, drawn[a][learners[:j].count(a)]) for j, a in enumerate(learners)]
        """The first jobs' algorithms and hyperparameters."""
        self.state = _Run()

    def space(self, algorithm: str) -> dict[str, tuple[float, float]]:
        """The search space ``algorithm``'s agents are drawn from and explored within."""
        return ALGORITHMS[algorithm].search_space(self.cfg, self.setting.base(algorithm))

    def run(self, on_evaluated: ProgressFn | None = None, checkpoint_dir: Path | None = None,
            pool: JobPool | None = None) -> EvolutionResult:
        """Run the remaining jobs on ``pool`` (a :class:`SimulatedPool` of ``workers`` by default),
        checkpointing into ``checkpoint_dir`` after every finished job; ``on_evaluated`` is
        called as ``(depth, job, fitness)`` for each evaluation of a finished job."""
        run = self.state
        pool = SimulatedPool(self.setting, self.tcfg.workers, run.clock) if pool is None else pool
        for job, started in run.pending:  # a resumed run's jobs in flight
            if isinstance(pool, SimulatedPool):
                pool.submit(job, started)
            else:
                pool.submit(job)
        self._fill(pool)
        while run.pending:
            done = pool.next_finished()
            self._update(done)
            for record in done.records if on_evaluated is not None else []:
                on_evaluated(done.generation, done.index, record.fitness)
            self._fill(pool)
            if checkpoint_dir is not None:
                self.save(checkpoint_dir / CHECKPOINT)
        return self.best()

    def best(self) -> EvolutionResult:
        """The best validation snapshot of the finished jobs, and the leaderboard as the leaders
        (each row's final policy)."""
        run = self.state
        leaders = [Leader(e.fitness, e.job, e.algorithm, e.hparams, ALGORITHMS[e.algorithm].actor_weights(e.state))
                   for e in run.board]
        return EvolutionResult(
            best_actor=run.best[2], best_fitness=run.best[0], best_generation=run.best[1], best_agent=run.best_job,
            best_hparams=run.best_hparams, history=run.history, cost=run.cost, best_algorithm=run.best_algorithm,
            leaders=leaders,
        )

    def resume(self, checkpoint_dir: Path | None) -> None:
        """Continue from the checkpoint in ``checkpoint_dir`` (:func:`~trainers.population.evolution.resume_from`)."""
        resume_from(self, checkpoint_dir)

    def _fill(self, pool: JobPool) -> None:
        """The orchestrator: top the pool up to ``workers`` jobs, then note what is in flight."""
        run = self.state
        while run.submitted < self.jobs and len(pool.pending()) < self.tcfg.workers:
            pool.submit(self._generate())
        if isinstance(pool, SimulatedPool):
            run.pending, run.clock = [(job, start) for job, start in pool.schedule()], pool.clock
        else:
            run.pending = [(job, None) for job in pool.pending()]

    def _generate(self) -> AgentJob:
        """The generator (§4.1): the next job, a fresh agent or a mutated copy of a tournament winner."""
        run, cfg = self.state, self.cfg
        index, seed = run.submitted, cfg.seed * 1000 + run.submitted
        run.submitted += 1
        if index < len(self.initial):
            return self._fresh(index, seed, *self.initial[index])
        algorithm = algorithm_of(index, self.tcfg.algorithms)
        board = [e for e in run.board if e.algorithm == algorithm]
        if not board:  # no agent of this algorithm has finished yet: a fresh draw from its search space
            hparams = draw(self.setting.base(algorithm).hparams(), self.space(algorithm), self.rng)
            return self._fresh(index, seed, algorithm, hparams)
        profiler.set_phase("selection")
        parent = tournament_select(board, self.tcfg.tournament_size, self.rng)
        mutated = explore(parent.hparams, self.space(algorithm), cfg.perturb_factors, cfg.resample_p, self.rng)
        hparams, state = self.setting.offspring(parent.hparams, parent.seed, parent.state, mutated, seed, algorithm)
        depth = parent.depth + 1
        best = (-math.inf, depth, ALGORITHMS[algorithm].actor_weights(state))
        return AgentJob(depth, index, hparams, seed, state, best, parent.fitness, 0, parent.job, self.budget,
                        copy.deepcopy(parent.boost), algorithm)

    def _fresh(self, index: int, seed: int, algorithm: str, hparams: dict[str, float]) -> AgentJob:
        """A job for a new ``algorithm`` agent with ``hparams``: lineage depth 0, no parent."""
        state = self.setting.agent(hparams, seed, algorithm=algorithm).state_dict()
        best = (-math.inf, 0, ALGORITHMS[algorithm].actor_weights(state))
        return AgentJob(0, index, hparams, seed, state, best, math.nan, 0, None, self.budget, algorithm=algorithm)

    def _update(self, done: AgentJob) -> None:
        """Take in a finished job: history, env steps, the leaderboard and the best snapshot."""
        run = self.state
        run.history.extend(done.records)
        run.cost += done.cost
        update_board(run.board, Entry(done.last, done.index, done.hparams, done.seed, done.state, done.generation,
                                      done.boost, done.algorithm), self.tcfg.leaderboard_size)
        if run.best_job < 0 or done.best[0] > run.best[0]:
            run.best, run.best_job, run.best_hparams = done.best, done.index, dict(done.hparams)
            run.best_algorithm = done.algorithm

    def _config(self) -> dict[str, Any]:
        learners = {name: asdict(ALGORITHMS[name].base(self.setting)) for name in self.tcfg.algorithms}
        return {"evolution": asdict(self.cfg), "tournament": asdict(self.tcfg), "nitro": asdict(self.setting.nitro),
                "learners": learners}

    def save(self, path: Path) -> None:
        """Checkpoint the run after a finished job (atomic: temp file, then rename)."""
        run = self.state
        state: dict[str, Any] = {
            "board": [dict(vars(e)) for e in run.board], "best": run.best, "best_job": run.best_job,
            "best_hparams": run.best_hparams, "best_algorithm": run.best_algorithm,
            "history": [asdict(r) for r in run.history],
            "cost": run.cost.as_dict(), "submitted": run.submitted, "clock": run.clock,
            "pending": [({name: getattr(job, name) for name in _INPUTS}, start) for job, start in run.pending],
            "rng": self.rng.bit_generator.state, "config": self._config(),
        }
        atomic_save(state, path)

    def load(self, path: Path) -> None:
        """Resume from :meth:`save`: the run continues as if it had never stopped."""
        state = torch.load(path, map_location="cpu", weights_only=True)
        if state["config"] != self._config():
            raise ValueError(f"{path}: checkpoint of a different evolution or tournament config; start afresh")
        fitness, depth, weights = state["best"]
        try:
            self.state = _Run(
                board=[Entry(**e) for e in state["board"]], best=(fitness, depth, weights), best_job=state["best_job"],
                best_hparams=state["best_hparams"], best_algorithm=state["best_algorithm"],
                history=[AgentRecord(**r) for r in state["history"]],
                cost=CostLedger(**state["cost"]), submitted=state["submitted"], clock=state["clock"],
                pending=[(AgentJob(**job), start) for job, start in state["pending"]],
            )
        except (KeyError, TypeError) as err:  # a field renamed or added since it was written
            raise ValueError(f"{path}: checkpoint written by another version of the tournament ({err}); "
                             "start afresh without --resume") from None
        self.rng.bit_generator.state = state["rng"]
