"""The run modes, in one table: :data:`MODES` maps ``evolution.mode`` to how a run of that mode
is built, how its jobs are handed out and how it reports its progress, as
:mod:`trainers.algorithms` does for learners (docs/evolution.md, Tournament mode).

- ``generational`` (finrl-podracer §4.2): each generation's jobs train together, then the
  selector copies top agents over the bottom ones
  (:class:`~trainers.population.evolution.Evolution`).
- ``tournament`` (elegantrl-podracers §3–4.1): a training pool with no generation barrier
  whose finished jobs feed a leaderboard (:class:`~trainers.population.tournament.Tournament`).

Nothing outside this module tests a mode's name (``tests/tasks/test_layout.py``): the config,
the train stage, its plan and its leaderboard look the mode up here, and where a mode's jobs
run is the engine's choice (``tasks/model/scaleout.py::ENGINES``). The module imports no
torch, so validating a config stays cheap; each mode's run is imported when first built.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from trainers.algorithms import DEFAULT_LEARNER
from trainers.config import EnvConfig, NitroConfig, PPOConfig, RuntimeConfig, SACConfig
from trainers.population.config import EvolutionConfig, TournamentConfig

if TYPE_CHECKING:
    from trainers.common.env import MarketData
    from trainers.common.state import StateScales
    from trainers.population.evolution import Run, WarmStart

Windows = tuple[tuple[int, int], tuple[int, int], float]
"""A run's training window, its validation window and the bars in a year."""


class Sections(Protocol):
    """The sections of a run's config that shape training (``params.yaml``'s, as
    :class:`tasks.config.Params` holds them)."""

    env: EnvConfig
    ppo: PPOConfig
    sac: SACConfig
    evolution: EvolutionConfig
    tournament: TournamentConfig
    nitro: NitroConfig


@dataclass(frozen=True)
class Mode:
    """One run mode: how its run is built and started, how its jobs are handed out, what it
    trains and keeps, and how its progress reads."""

    name: str
    build: Callable[[MarketData, StateScales, Sections, Windows, RuntimeConfig, WarmStart | None], Run]
    """``build(data, scales, sections, windows, runtime, warm)``: a run of this mode, from a warm
    start when ``warm`` is given (only where :attr:`warm_start`)."""
    pooled: bool
    """Its jobs go to a :class:`~trainers.population.dispatch.JobPool` and come back one by one
    as each finishes, and it reports each job; else a generation's jobs go to a
    :data:`~trainers.population.evolution.JobRunner` together, and it reports each generation."""
    warm_start: bool
    """It can start from a trained policy (the continuous-training cycle's champion)."""
    learners: Callable[[TournamentConfig], tuple[str, ...]]
    """The learners its agents may have: ``tournament.algorithms``'s, or the default one alone."""
    kept: Callable[[EvolutionConfig, TournamentConfig], int]
    """How many agents it ends with: the most ``registry.ensemble`` may register."""
    keyed: Callable[[Sections], object]
    """Its own section in the key of its checkpoint folder (``tasks/model/plan.py``), or None."""
    progress: Callable[[int, int, int], str]
    """``progress(generation, agent, generations)``: where an evaluation stands, e.g. ``generation 3/32``."""
    best_at: Callable[[int, int, str], str]
    """``best_at(agent, generation, algorithm)``: where the chosen snapshot came from, in words."""


def _generational(data: MarketData, scales: StateScales, sections: Sections, windows: Windows,
                  runtime: RuntimeConfig, warm: WarmStart | None) -> Run:
    from trainers.population.evolution import Evolution

    return Evolution(data, scales, sections.env, sections.ppo, sections.evolution, *windows, sections.nitro, warm,
                     runtime)


def _tournament(data: MarketData, scales: StateScales, sections: Sections, windows: Windows,
                runtime: RuntimeConfig, warm: WarmStart | None) -> Run:
    from trainers.population.tournament import Tournament

    assert warm is None, "a tournament starts from fresh agents"
    return Tournament(data, scales, sections.env, sections.ppo, sections.evolution, sections.tournament, *windows,
                      sections.nitro, sections.sac, runtime)


MODES: Mapping[str, Mode] = {mode.name: mode for mode in (
    Mode(name="generational", build=_generational, pooled=False, warm_start=True,
         learners=lambda tournament: (DEFAULT_LEARNER,),
         kept=lambda evolution, tournament: evolution.population,
         keyed=lambda sections: None,
         progress=lambda generation, agent, generations: f"generation {generation + 1}/{generations}",
         best_at=lambda agent, generation, algorithm: f"agent {agent}, generation {generation}"),
    Mode(name="tournament", build=_tournament, pooled=True, warm_start=False,
         learners=lambda tournament: tuple(tournament.algorithms),
         kept=lambda evolution, tournament: tournament.leaderboard_size * len(tournament.algorithms),
         keyed=lambda sections: sections.tournament,
         progress=lambda generation, agent, generations: f"job {agent}",
         best_at=lambda agent, generation, algorithm: f"job {agent} ({algorithm}), lineage depth {generation}"),
)}
"""Every run mode, by ``evolution.mode``'s name: generations with a selector (``evolution:``)
and the asynchronous pool with a leaderboard (``tournament:``)."""


def modes_where(test: Callable[[Mode], bool]) -> str:
    """The names of the modes that pass ``test``, for a message (e.g. those that can start warm)."""
    return ", ".join(name for name, mode in MODES.items() if test(mode))
