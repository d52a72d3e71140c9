"""Generational evolution of a PPO population (finrl-podracer §4.2).

Each generation every agent trains; the **evaluator** scores its deterministic policy on
the validation window (never the test window, docs/evolution.md) every ``eval_interval``
iterations and keeps each agent's best snapshot; an agent whose fitness has fallen for
``patience`` evaluations in a row stops training; and the **selector**
(:mod:`trainers.population.selection`) replaces the bottom agents with explored copies of top ones
(weights and optimizer state). A checkpoint after every generation lets a killed run
resume and end exactly as an uninterrupted one.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from trainers import profiler
from trainers.algorithms import ALGORITHMS, DEFAULT_LEARNER
from trainers.common.cost import CostLedger
from trainers.common.env import MarketData
from trainers.common.jobs import AgentJob, AgentRecord, Snapshot, evaluation_due
from trainers.common.metrics import expected_max_sharpe
from trainers.common.state import StateScales
from trainers.config import EnvConfig, NitroConfig, PPOConfig, RuntimeConfig, SACConfig
from trainers.population.config import EvolutionConfig
from trainers.population.dispatch import Setting, run_job
from trainers.population.selection import explore, initial_population, select

CHECKPOINT = "evolution.pt"


@dataclass(frozen=True)
class Leader:
    """One of the agents a run ends with, for an ensemble (``registry.ensemble``): its
    validation fitness, where it came from and its policy's weights."""

    fitness: float
    job: int
    """The agent's index (generational) or job number (tournament)."""
    algorithm: str
    hparams: dict[str, float]
    actor: dict[str, torch.Tensor]


@dataclass
class EvolutionResult:
    best_actor: dict[str, torch.Tensor]
    best_fitness: float
    best_generation: int
    best_agent: int
    best_hparams: dict[str, float]
    history: list[AgentRecord]
    cost: CostLedger
    """What the whole run spent: env steps, CPU and GPU seconds."""
    best_algorithm: str = DEFAULT_LEARNER
    """The learner of the best snapshot."""
    leaders: list[Leader] = field(default_factory=list)
    """The agents the run ends with, best validation fitness first: a generational run's final
    population (or, when the chosen policy is an earlier snapshot, each agent's best snapshot),
    a tournament's leaderboard (each row's final policy)."""
    luck: float = 0.0
    """How far the best of the run's evaluations would lead their mean by luck alone (SR₀ of
    Bailey & López de Prado 2014, in fitness units): the expected shrinkage of a chosen best."""

    @property
    def env_steps(self) -> int:
        return self.cost.env_steps


def _ranked(fitness: float) -> float:
    """A fitness as the selector ranks it: NaN (not evaluated yet) counts as worst."""
    return fitness if math.isfinite(fitness) else -math.inf


def make_setting(data: MarketData, scales: StateScales, env_cfg: EnvConfig, ppo_cfg: PPOConfig, cfg: EvolutionConfig,
                 train_window: tuple[int, int], val_window: tuple[int, int], per_year: float,
                 nitro: NitroConfig = NitroConfig(), sac_cfg: SACConfig = SACConfig(),
                 runtime: RuntimeConfig = RuntimeConfig()) -> Setting:
    """What every job of a run shares, from the run's configs."""
    return Setting(data, scales, env_cfg, ppo_cfg, train_window, val_window, per_year, cfg.fitness,
                   cfg.iterations_per_generation, cfg.eval_interval, cfg.patience, nitro, sac_cfg=sac_cfg,
                   runtime=runtime, eval_chunks=cfg.eval_chunks)


def job_budget(cfg: EvolutionConfig, jobs: int) -> int | None:
    """Each job's equal share of the run's hard env-step budget."""
    return None if cfg.budget_env_steps is None else cfg.budget_env_steps // jobs


@dataclass(frozen=True)
class WarmStart:
    """A trained policy to start a population from (the continuous-training cycle's
    champion): agent 0 keeps its hyperparameters, the others are PBT-explored copies of
    them (:func:`trainers.population.selection.explore`), and every agent starts from its actor's
    weights. The critics and optimizers start fresh: only the actor is in a policy bundle."""

    hparams: dict[str, float]
    actor: dict[str, torch.Tensor]


ProgressFn = Callable[[int, int, float], None]
"""Called as ``(generation, agent, fitness)`` after each evaluation."""


JobRunner = Callable[[list[AgentJob], Setting], list[AgentJob]]
"""Runs a generation's jobs and returns them in order: in this process by default, or as
Prefect tasks on a Dask cluster (``tasks/model/scaleout.py``)."""


def run_serially(jobs: list[AgentJob], setting: Setting) -> list[AgentJob]:
    return [run_job(job, setting) for job in jobs]


@dataclass
class _Population:
    """Everything that changes during a run: what a checkpoint holds."""

    hparams: list[dict[str, float]]
    seeds: list[int]
    states: list[dict[str, Any]]
    """Each agent's ``PPOAgent.state_dict()``."""
    best: list[Snapshot]
    last: list[float]
    falls: list[int]
    boost: list[dict[str, Any] | None]
    """Each agent's Nitro score state."""
    history: list[AgentRecord] = field(default_factory=list)
    parents: dict[int, int] = field(default_factory=dict)
    cost: CostLedger = field(default_factory=CostLedger)
    generation: int = 0
    """The next generation to run."""


class Evolution:
    """One evolution run over ``data``: build or resume the population, then run it."""

    CHECKPOINT = CHECKPOINT

    def __init__(self, data: MarketData, scales: StateScales, env_cfg: EnvConfig, ppo_cfg: PPOConfig,
                 cfg: EvolutionConfig, train_window: tuple[int, int], val_window: tuple[int, int],
                 per_year: float, nitro: NitroConfig = NitroConfig(), warm: WarmStart | None = None,
                 runtime: RuntimeConfig = RuntimeConfig()) -> None:
        self.cfg = cfg
        self.setting = make_setting(data, scales, env_cfg, ppo_cfg, cfg, train_window, val_window, per_year, nitro,
                                    runtime=runtime)
        self.budget = job_budget(cfg, cfg.population * cfg.generations)
        self.rng = np.random.default_rng(cfg.seed)
        if warm is None:
            hparams = initial_population(ppo_cfg.hparams(), cfg.search_space, cfg.population, self.rng)
        else:
            base = {**ppo_cfg.hparams(), **warm.hparams}
            hparams = [base] + [explore(base, cfg.search_space, cfg.perturb_factors, cfg.resample_p, self.rng)
                                for _ in range(cfg.population - 1)]
        seeds = [cfg.seed * 1000 + i for i in range(cfg.population)]
        agents = [self.setting.agent(h, s) for h, s in zip(hparams, seeds)]
        for agent in agents if warm is not None else []:
            for learner in agent.learners:
                learner.actor.load_state_dict(warm.actor)  # raises on a shape mismatch
        self.state = _Population(hparams, seeds, [a.state_dict() for a in agents],
                               [(-math.inf, 0, copy.deepcopy(a.actor.state_dict())) for a in agents],
                               [math.nan] * len(agents), [0] * len(agents), [None] * len(agents))

    @property
    def jobs(self) -> int:
        """Agent jobs in the whole run: every agent, every generation."""
        return self.cfg.population * self.cfg.generations

    def run(self, on_evaluated: ProgressFn | None = None, checkpoint_dir: Path | None = None,
            runner: JobRunner = run_serially,
            on_generation: Callable[[EvolutionResult], None] | None = None) -> EvolutionResult:
        """Run the remaining generations on ``runner``, checkpointing after each into
        ``checkpoint_dir``; ``on_generation`` sees the best snapshot so far after each (a
        learning curve)."""
        pop, cfg = self.state, self.cfg
        while pop.generation < cfg.generations:
            gen = pop.generation
            jobs = [AgentJob(gen, i, pop.hparams[i], pop.seeds[i], pop.states[i], pop.best[i], pop.last[i],
                             pop.falls[i], pop.parents.get(i), self.budget, pop.boost[i])
                    for i in range(cfg.population)]
            for done in runner(jobs, self.setting):
                i = done.index
                pop.states[i], pop.best[i], pop.last[i], pop.falls[i] = done.state, done.best, done.last, done.falls
                pop.hparams[i], pop.boost[i] = done.hparams, done.boost  # Nitro may have rescaled the envs
                pop.cost += done.cost
                pop.history.extend(done.records)
                for record in done.records if on_evaluated is not None else []:
                    on_evaluated(gen, i, record.fitness)
            if gen < cfg.generations - 1:
                self._select()
            pop.generation += 1
            if checkpoint_dir is not None:
                self.save(checkpoint_dir / CHECKPOINT)
            if on_generation is not None:
                on_generation(self.best())
        return self.best()

    def best(self) -> EvolutionResult:
        """The run's result so far (§4.2's evaluator, with the winner's curse counted;
        docs/evolution.md, which policy is registered): the final population's best agent, as
        its last evaluation found it, however far an earlier snapshot led it on validation,
        unless no final agent has a finite fitness (every one diverged); then the best
        snapshot. On the development seeds the best snapshot of all generations scored 0.11 ±
        0.23 less on test than the final population's best (t −1.59), and a snapshot that led
        it by more than the best of the run's evaluations would by luck
        (:func:`trainers.common.metrics.expected_max_sharpe`, reported as ``luck``) 0.24 less on
        the one seed where it did (docs/results.md). With ``evolution.select: snapshot``, the
        best snapshot."""
        pop = self.state
        order = sorted(range(len(pop.best)), key=lambda i: (-pop.best[i][0], i))
        finals = sorted(range(len(pop.last)), key=lambda i: (-_ranked(pop.last[i]), i))
        luck = expected_max_sharpe(np.array([r.fitness for r in pop.history]))
        final = self.cfg.select == "final" and pop.generation > 0
        if final and _ranked(pop.last[finals[0]]) > -math.inf:
            weights = ALGORITHMS[DEFAULT_LEARNER].actor_weights
            leaders = [Leader(pop.last[i], i, DEFAULT_LEARNER, pop.hparams[i], weights(pop.states[i])) for i in finals]
            generation = pop.generation - 1
        else:
            leaders = [Leader(pop.best[i][0], i, DEFAULT_LEARNER, self._hparams_at(pop.best[i][1], i), pop.best[i][2])
                       for i in order]
            generation = pop.best[order[0]][1]
        chosen = leaders[0]
        return EvolutionResult(
            best_actor=chosen.actor, best_fitness=chosen.fitness, best_generation=generation, best_agent=chosen.job,
            best_hparams=chosen.hparams, history=pop.history, cost=pop.cost, leaders=leaders, luck=luck)

    def _hparams_at(self, generation: int, agent: int) -> dict[str, float]:
        """The hyperparameters ``agent`` trained with in ``generation`` (its snapshot's)."""
        return next((r.hparams for r in self.state.history if (r.generation, r.agent) == (generation, agent)),
                    self.state.hparams[agent])

    def _select(self) -> None:
        """Exploit and explore: bottom agents become copies of top ones (weights, Adam state
        and Nitro's score), rebuilt with the copy's explored hyperparameters and own random streams."""
        profiler.set_phase("selection")
        pop, cfg = self.state, self.cfg
        chosen = select(pop.last, pop.hparams, cfg.quantile, cfg.search_space, cfg.perturb_factors, self.rng,
                        cfg.resample_p)
        for dst, src in chosen.copies.items():
            pop.seeds[dst] += 1_000_003  # a fresh random stream for the copy
            pop.hparams[dst], pop.states[dst] = self.setting.offspring(
                pop.hparams[src], pop.seeds[src], pop.states[src], chosen.hparams[dst], pop.seeds[dst])
            pop.last[dst], pop.falls[dst], pop.boost[dst] = pop.last[src], 0, copy.deepcopy(pop.boost[src])
        pop.parents = dict(chosen.copies)

    def _config(self) -> dict[str, Any]:
        return {"evolution": asdict(self.cfg), "nitro": asdict(self.setting.nitro)}

    def save(self, path: Path) -> None:
        """Checkpoint the population after a generation (atomic: temp file, then rename)."""
        pop = self.state
        state: dict[str, Any] = {
            "generation": pop.generation, "hparams": pop.hparams, "seeds": pop.seeds, "states": pop.states,
            "best": pop.best, "last": pop.last, "falls": pop.falls, "boost": pop.boost,
            "history": [asdict(r) for r in pop.history], "parents": pop.parents, "cost": pop.cost.as_dict(),
            "rng": self.rng.bit_generator.state, "config": self._config(),
        }
        atomic_save(state, path)

    def resume(self, checkpoint_dir: Path | None) -> None:
        """Continue from the checkpoint in ``checkpoint_dir`` (:func:`resume_from`)."""
        resume_from(self, checkpoint_dir)

    def load(self, path: Path) -> None:
        """Resume from :meth:`save`: the run continues as if it had never stopped (on the
        device it was saved on; on another, from the same weights and accounts with its random
        streams restarted, trainers/common/draws.py)."""
        state = torch.load(path, map_location="cpu", weights_only=True)
        if state["config"] != self._config():
            raise ValueError(f"{path}: checkpoint of a different evolution config; start afresh without --resume")
        self.state = _Population(
            hparams=state["hparams"], seeds=state["seeds"], states=state["states"],
            best=[(f, g, snap) for f, g, snap in state["best"]], last=state["last"], falls=state["falls"],
            boost=state["boost"], history=[AgentRecord(**r) for r in state["history"]], parents=state["parents"],
            cost=CostLedger(**state["cost"]), generation=state["generation"],
        )
        self.rng.bit_generator.state = state["rng"]


def atomic_save(state: dict[str, Any], path: Path) -> None:
    """``torch.save`` to a temp file, then rename: a kill never leaves half a checkpoint."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    torch.save(state, tmp)
    tmp.replace(path)


class RunState(Protocol):
    """What a run has done so far, whatever its mode."""

    history: list[AgentRecord]
    cost: CostLedger


class Run(Protocol):
    """A training run, generational (:class:`Evolution`) or a tournament
    (:class:`trainers.population.tournament.Tournament`): the train stage drives either through this."""

    CHECKPOINT: str
    setting: Setting

    @property
    def jobs(self) -> int:
        """Agent jobs in the whole run (the progress bar's unit, with the evaluations of each)."""

    @property
    def state(self) -> RunState:
        """Everything that changes during the run: what a checkpoint holds."""

    def run(self, on_evaluated: ProgressFn | None = None, checkpoint_dir: Path | None = None,
            engine: Any = None, /) -> EvolutionResult:
        """Run what is left on ``engine`` (a :data:`JobRunner` for generations, a
        :class:`~trainers.population.dispatch.JobPool` for a tournament; None: in this process), calling
        ``on_evaluated`` after each evaluation and checkpointing into ``checkpoint_dir``."""

    def best(self) -> EvolutionResult:
        """The run's result so far: its best validation snapshot and its leaders."""

    def resume(self, checkpoint_dir: Path | None) -> None:
        """Continue from the run's checkpoint in ``checkpoint_dir``; ``FileNotFoundError`` if none."""

    def load(self, path: Path) -> None: ...


def resume_from(run: Run, checkpoint_dir: Path | None) -> None:
    """Load ``run``'s checkpoint from ``checkpoint_dir``, or say there is none."""
    path = None if checkpoint_dir is None else checkpoint_dir / run.CHECKPOINT
    if path is None or not path.exists():
        raise FileNotFoundError(f"{path or 'no checkpoint folder'}: no checkpoint to resume from")
    run.load(path)


def evaluations_per_generation(cfg: EvolutionConfig) -> int:
    """How many evaluations each agent gets per generation."""
    last = cfg.iterations_per_generation
    return sum(evaluation_due(it, cfg.eval_interval, last) for it in range(1, last + 1))
