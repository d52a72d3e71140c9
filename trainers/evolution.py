"""Generational evolution of a PPO population (finrl-podracer.txt §4.2).

Each generation every agent trains, the **evaluator** scores its deterministic policy on
the validation window (never the test window, DESIGN §3) and keeps the best snapshot,
and the **selector** replaces the bottom agents with copies of top ones (weights and
optimizer state) whose hyperparameters it perturbs.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from trainers import profiler
from trainers._checks import require
from trainers.agent import PPOAgent
from trainers.env import EnvConfig, MarketData
from trainers.evaluate import run_policy
from trainers.metrics import sharpe
from trainers.ppo import HPARAMS, PPOConfig
from trainers.state import StateScales


@dataclass(frozen=True)
class EvolutionConfig:
    """Population size, schedule and hyperparameter search space."""

    __pydantic_config__ = {"extra": "forbid"}

    population: int = 4
    generations: int = 5
    iterations_per_generation: int = 6
    """PPO iterations (rollout + update) each agent runs per generation."""
    replace_fraction: float = 0.25
    """Bottom fraction of the population replaced by copies of top agents."""
    perturb_factors: tuple[float, float] = (0.8, 1.2)
    search_space: dict[str, tuple[float, float]] = field(
        default_factory=lambda: {"lr": (2.0**-16, 2.0**-10), "entropy_coef": (0.002, 0.05)}
    )
    """Bounds of the evolved hyperparameters; agent 0 starts from the PPO defaults and
    the others are drawn log-uniformly within these bounds."""
    seed: int = 0

    def __post_init__(self) -> None:
        require(self.population >= 1, "population must be >= 1")
        require(self.generations >= 1, "generations must be >= 1")
        require(self.iterations_per_generation >= 1, "iterations_per_generation must be >= 1")
        require(0 <= self.replace_fraction <= 0.5, "replace_fraction must be in [0, 0.5]")
        require(min(self.perturb_factors) > 0, "perturb_factors must be > 0")
        for name, (lo, hi) in self.search_space.items():
            require(name in HPARAMS, f"search_space.{name} is not one of {', '.join(HPARAMS)}")
            require(0 < lo <= hi, f"search_space.{name} needs 0 < low <= high")


@dataclass(frozen=True)
class Selection:
    """What the selector decided for one generation."""

    ranking: list[int]
    """Agent indices, best first."""
    copies: dict[int, int]
    """Replaced agent → the top agent it becomes a copy of."""
    hparams: list[dict[str, float]]
    """Hyperparameters of every agent for the next generation."""


def select(
    fitness: Sequence[float],
    hparams: Sequence[Mapping[str, float]],
    replace_fraction: float,
    bounds: Mapping[str, tuple[float, float]],
    factors: tuple[float, float],
    rng: np.random.Generator,
) -> Selection:
    """Rank by fitness and replace the bottom ``replace_fraction`` with perturbed copies.

    A pure function of its inputs and ``rng``. Ranking is descending (NaN counts as
    worst), so the top agents always survive unchanged: the published FinRL_Podracer
    code sorted ascending and copied the worst agents over the best (DESIGN §3).
    Each copy's evolved hyperparameters are multiplied by a factor drawn from
    ``factors`` and clipped to ``bounds`` (PBT-style exploration).
    """
    n = len(fitness)
    scores = np.array([f if math.isfinite(f) else -np.inf for f in fitness], dtype=np.float64)
    ranking = [int(i) for i in np.argsort(-scores, kind="stable")]
    n_replace = min(int(n * replace_fraction), n // 2)
    top, bottom = ranking[:n_replace], ranking[n - n_replace :]
    new = [dict(h) for h in hparams]
    copies: dict[int, int] = {}
    for dst in bottom:
        src = int(rng.choice(top))
        copies[dst] = src
        new[dst] = dict(hparams[src])
        for name, (lo, hi) in bounds.items():
            new[dst][name] = float(np.clip(hparams[src][name] * rng.choice(factors), lo, hi))
    return Selection(ranking=ranking, copies=copies, hparams=new)


def initial_hparams(base: PPOConfig, cfg: EvolutionConfig, rng: np.random.Generator) -> list[dict[str, float]]:
    """Agent 0 keeps ``base``'s values; the others are drawn log-uniformly from the search space."""
    population = [base.hparams()]
    for _ in range(cfg.population - 1):
        h = base.hparams()
        for name, (lo, hi) in cfg.search_space.items():
            h[name] = float(math.exp(rng.uniform(math.log(lo), math.log(hi))))
        population.append(h)
    return population


@dataclass
class AgentRecord:
    """One agent in one generation: the lineage and leaderboard row."""

    generation: int
    agent: int
    fitness: float
    hparams: dict[str, float]
    parent: int | None
    """The agent this one was copied from at the start of the generation, if any."""


@dataclass
class EvolutionResult:
    best_actor: dict[str, torch.Tensor]
    best_fitness: float
    best_generation: int
    best_agent: int
    best_hparams: dict[str, float]
    history: list[AgentRecord]
    env_steps: int


ProgressFn = Callable[[int, int, float], None]
"""Called as ``(generation, agent, fitness)`` after each evaluation."""


def evolve(
    data: MarketData,
    scales: StateScales,
    env_cfg: EnvConfig,
    ppo_cfg: PPOConfig,
    evo_cfg: EvolutionConfig,
    train_window: tuple[int, int],
    val_window: tuple[int, int],
    *,
    per_year: float,
    on_evaluated: ProgressFn | None = None,
) -> EvolutionResult:
    """Train a population with generational evolution and return the best validation snapshot.

    Fitness is the Sharpe ratio of the deterministic policy on ``val_window`` (§4.2,
    eq. 1's J(π) measured on held-out data); the snapshot with the highest fitness over
    all generations is the result, which mitigates over-fitting as training goes on.
    """
    rng = np.random.default_rng(evo_cfg.seed)
    hparams = initial_hparams(ppo_cfg, evo_cfg, rng)
    agents = [PPOAgent(data, scales, env_cfg, ppo_cfg.with_hparams(h), train_window, evo_cfg.seed * 1000 + i)
              for i, h in enumerate(hparams)]
    history: list[AgentRecord] = []
    parents: dict[int, int] = {}
    best = (-math.inf, 0, 0)
    best_actor = copy.deepcopy(agents[0].actor.state_dict())
    for gen in range(evo_cfg.generations):
        fitness = []
        for i, agent in enumerate(agents):
            profiler.set_phase("training")
            for _ in range(evo_cfg.iterations_per_generation):
                agent.train_iteration()
            profiler.set_phase("evaluation")
            score = sharpe(run_policy(agent.actor, data, scales, env_cfg, val_window), per_year)
            fitness.append(score)
            history.append(AgentRecord(gen, i, score, agent.cfg.hparams(), parents.get(i)))
            if score > best[0]:
                best = (score, gen, i)
                best_actor = copy.deepcopy(agent.actor.state_dict())
            if on_evaluated is not None:
                on_evaluated(gen, i, score)
        if gen == evo_cfg.generations - 1:
            break
        profiler.set_phase("selection")
        chosen = select(
            fitness, [a.cfg.hparams() for a in agents], evo_cfg.replace_fraction,
            evo_cfg.search_space, evo_cfg.perturb_factors, rng,
        )
        for dst, src in chosen.copies.items():
            agents[dst].copy_from(agents[src])
        for agent, h in zip(agents, chosen.hparams):
            agent.set_hparams(h)
        parents = dict(chosen.copies)
    steps = evo_cfg.generations * evo_cfg.iterations_per_generation * agents[0].samples_per_iteration
    return EvolutionResult(
        best_actor=best_actor,
        best_fitness=best[0],
        best_generation=best[1],
        best_agent=best[2],
        best_hparams=next(r.hparams for r in history if (r.generation, r.agent) == best[1:]),
        history=history,
        env_steps=steps * evo_cfg.population,
    )
