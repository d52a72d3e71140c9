"""The population's search space and its selector (finrl-podracer §4.2; PBT semantics).

The selector is a **pure, seeded function**: given the fitness and hyperparameters of every
agent and a random generator, it ranks the agents (best first), replaces the bottom
``quantile`` with copies of top agents, and explores the copies' hyperparameters the way
Ray Tune's PopulationBasedTraining does: each searched value is resampled from the search
space with probability ``resample_p``, otherwise multiplied by one of ``factors``
(0.8 / 1.2) and clipped to the bounds. The published FinRL_Podracer code sorted ascending
and copied the worst agents over the best (docs/evolution.md, Selector); here the ranking is descending and
a survivor is never a copy destination, so the top agents always survive unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

LOG_SCALE = ("lr", "entropy_coef", "tau")
"""Searched log-uniformly: they span orders of magnitude."""
INTEGER = ("repeat_times", "num_envs", "net_width", "updates")
"""Rounded to whole numbers."""
STRUCTURAL = ("net_width",)
"""Changes the weights' shapes: drawn once per agent and inherited by copies, never perturbed."""

Bounds = Mapping[str, tuple[float, float]]


def sample(name: str, bounds: tuple[float, float], rng: np.random.Generator) -> float:
    """One draw of ``name`` from its range (log-uniform for learning rates and entropy)."""
    lo, hi = bounds
    value = math.exp(rng.uniform(math.log(lo), math.log(hi))) if name in LOG_SCALE else rng.uniform(lo, hi)
    return float(round(value)) if name in INTEGER else float(value)


def draw(base: Mapping[str, float], space: Bounds, rng: np.random.Generator) -> dict[str, float]:
    """``base`` with every hyperparameter in ``space`` drawn afresh: a new agent."""
    return {**base, **{name: sample(name, bounds, rng) for name, bounds in space.items()}}


def initial_population(base: Mapping[str, float], space: Bounds, size: int,
                       rng: np.random.Generator) -> list[dict[str, float]]:
    """Agent 0 keeps ``base`` (the PPO defaults, Table 3); the others draw every searched
    hyperparameter from ``space``."""
    return [dict(base)] + [draw(base, space, rng) for _ in range(size - 1)]


def explore(source: Mapping[str, float], space: Bounds, factors: tuple[float, float], resample_p: float,
            rng: np.random.Generator) -> dict[str, float]:
    """PBT exploration of a copy: resample with probability ``resample_p``, else perturb."""
    out = dict(source)
    for name, (lo, hi) in space.items():
        if name in STRUCTURAL:
            continue
        if rng.random() < resample_p:
            out[name] = sample(name, (lo, hi), rng)
        else:
            value = float(np.clip(source[name] * rng.choice(factors), lo, hi))
            out[name] = float(round(value)) if name in INTEGER else value
    return out


@dataclass(frozen=True)
class Selection:
    """What the selector decided for one generation."""

    ranking: list[int]
    """Agent indices, best first."""
    copies: dict[int, int]
    """Replaced agent → the top agent it becomes a copy of (the lineage edge)."""
    hparams: list[dict[str, float]]
    """Hyperparameters of every agent for the next generation."""


def select(
    fitness: Sequence[float],
    hparams: Sequence[Mapping[str, float]],
    quantile: float,
    space: Bounds,
    factors: tuple[float, float],
    rng: np.random.Generator,
    resample_p: float = 0.0,
) -> Selection:
    """Rank by fitness and replace the bottom ``quantile`` with explored copies of the top.

    NaN fitness counts as worst and ties keep index order, so the result depends only on
    the inputs and ``rng``.
    """
    n = len(fitness)
    scores = np.array([f if math.isfinite(f) else -np.inf for f in fitness], dtype=np.float64)
    ranking = [int(i) for i in np.argsort(-scores, kind="stable")]
    n_replace = min(int(n * quantile), n // 2)
    top, bottom = ranking[:n_replace], ranking[n - n_replace :]
    new = [dict(h) for h in hparams]
    copies: dict[int, int] = {}
    for dst in bottom:
        src = int(rng.choice(top))
        copies[dst] = src
        new[dst] = explore(hparams[src], space, factors, resample_p, rng)
    return Selection(ranking=ranking, copies=copies, hparams=new)
