"""The population's configs: how many agents, how they are scheduled, evaluated and selected
(finrl-podracer §4.2), and the tournament's pool and leaderboard (elegantrl-podracers §3).

Plain frozen dataclasses beside the learners' in ``trainers/config.py``, and, like them, no
torch import: ``tasks/config.py`` validates them as the ``evolution:`` and ``tournament:``
sections of ``params.yaml``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from trainers._checks import require
from trainers.config import HPARAMS


@dataclass(frozen=True)
class EvolutionConfig:
    """Population size, schedule, evaluator, selector and hyperparameter search space."""

    __pydantic_config__ = {"extra": "forbid"}

    population: int = 8
    generations: int = 5
    iterations_per_generation: int = 8
    """PPO iterations (rollout + update) each agent runs per generation."""
    eval_interval: int = 8
    """Evaluate every this many iterations (and always at the end of a generation)."""
    mode: Literal["generational", "tournament"] = "generational"
    """Generations with a selector (finrl-podracer §4.2), or an asynchronous training pool
    with a leaderboard (elegantrl-podracers §3, :mod:`trainers.population.tournament`)."""
    fitness: Literal["sharpe", "sortino", "cumulative_return"] = "sharpe"
    eval_chunks: int = 1
    """Trade the validation window in this many stretches side by side, each later one after an
    unscored warm-up (:func:`trainers.common.evaluate.chunk_plan`): a chain of decisions that
    many times shorter, for a GPU. 1 (the default): the single pass. On the development seeds
    chunks reordered close agents more than the single pass's own start does
    (docs/evolution.md, parallel evaluation)."""
    select: Literal["final", "snapshot"] = "final"
    """Which policy a generational run hands on: ``final``, the final population's best
    (an earlier snapshot only when every final agent diverged; docs/evolution.md);
    ``snapshot``, the best validation snapshot of all generations (finrl-podracer §4.2's
    evaluator as published)."""
    patience: int = 0
    """Stop an agent once its fitness has fallen this many evaluations in a row (0: never)."""
    quantile: float = 0.25
    """Bottom fraction of the population replaced by copies of top agents."""
    perturb_factors: tuple[float, float] = (0.8, 1.2)
    resample_p: float = 0.25
    """Probability that a copy resamples a hyperparameter instead of perturbing it (PBT)."""
    search_space: dict[str, tuple[float, float]] = field(default_factory=lambda: {
        "lr": (2.0**-16, 2.0**-10), "entropy_coef": (0.002, 0.05), "clip": (0.1, 0.3), "gamma": (0.95, 0.999),
        "gae_lambda": (0.9, 0.99), "repeat_times": (4, 16), "num_envs": (16, 64), "net_width": (64, 256)})
    """Bounds of the searched hyperparameters; agent 0 starts from the PPO defaults."""
    budget_env_steps: int | None = None
    """Hard budget on the run's env steps (nitro §5.3's cost ledger), shared equally by its
    jobs (an agent's generation, or a tournament job); None: the schedule alone decides."""
    seed: int = 0

    def __post_init__(self) -> None:
        require(self.population >= 1, "population must be >= 1")
        require(self.generations >= 1, "generations must be >= 1")
        require(self.iterations_per_generation >= 1, "iterations_per_generation must be >= 1")
        require(self.eval_interval >= 1, "eval_interval must be >= 1")
        require(self.eval_chunks >= 1, "eval_chunks must be >= 1")
        require(self.patience >= 0, "patience must be >= 0")
        require(0 <= self.quantile <= 0.5, "quantile must be in [0, 0.5]")
        require(min(self.perturb_factors) > 0, "perturb_factors must be > 0")
        require(0 <= self.resample_p <= 1, "resample_p must be in [0, 1]")
        require(self.budget_env_steps is None or self.budget_env_steps >= 1, "budget_env_steps must be >= 1")
        for name, (lo, hi) in self.search_space.items():
            require(name in HPARAMS, f"search_space.{name} is not one of {', '.join(HPARAMS)}")
            require(0 < lo <= hi, f"search_space.{name} needs 0 < low <= high")


@dataclass(frozen=True)
class TournamentConfig:
    """Size of the training pool and the leaderboard, and the number of jobs to run."""

    __pydantic_config__ = {"extra": "forbid"}

    workers: int = 4
    """Jobs trained concurrently in the pool."""
    jobs: int | None = None
    """Jobs in all; ``None``: ``population × generations``, the generational mode's compute."""
    leaderboard_size: int = 4
    """Entries the updater keeps."""
    tournament_size: int = 2
    """The generator samples this many leaderboard entries and copies the fittest."""
    algorithms: dict[str, float] = field(default_factory=lambda: {"ppo": 1.0})
    """Each learner's share of the pool's jobs, e.g. ``{ppo: 0.5, sac: 0.5}``
    (elegantrl-podracers §3: agents "initialized with different DRL algorithms"). Every
    algorithm keeps its own ``leaderboard_size`` rows and its copies explore only its own
    hyperparameters (docs/evolution.md, A pool of several algorithms)."""

    def __post_init__(self) -> None:
        for name, share in self.algorithms.items():  # the names are checked against trainers/algorithms.py
            require(share > 0, f"tournament.algorithms.{name} must be > 0")
        require(len(self.algorithms) >= 1, "tournament.algorithms needs at least one algorithm")
        require(self.workers >= 1, "workers must be >= 1")
        require(self.jobs is None or self.jobs >= 1, "jobs must be >= 1 (or unset)")
        require(self.leaderboard_size >= 1, "leaderboard_size must be >= 1")
        require(1 <= self.tournament_size <= self.leaderboard_size, "tournament_size must be in [1, leaderboard_size]")
