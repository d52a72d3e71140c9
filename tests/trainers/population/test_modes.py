"""The table of run modes (trainers/population/modes.py): one entry per ``evolution.mode``, each
building the run it names, and the words a run reports its progress in."""

import typing

from tests.trainers.helpers import market, scales
from trainers.config import EnvConfig, NitroConfig, PPOConfig, RuntimeConfig, SACConfig
from trainers.population.config import EvolutionConfig, TournamentConfig
from trainers.population.evolution import Evolution
from trainers.population.modes import MODES, modes_where
from trainers.population.tournament import Tournament

ENV = EnvConfig(initial_cash=10_000.0, hmax=20, episode_len=8, min_episode_len=4)


class Sections(typing.NamedTuple):
    env: EnvConfig = ENV
    ppo: PPOConfig = PPOConfig(num_envs=2, horizon=8, batch_size=8, repeat_times=1, net_dims=(8,))
    sac: SACConfig = SACConfig()
    evolution: EvolutionConfig = EvolutionConfig(population=2, generations=1, iterations_per_generation=1,
                                                 eval_interval=1, search_space={"lr": (1e-3, 1e-2)})
    tournament: TournamentConfig = TournamentConfig(workers=1, leaderboard_size=3)
    nitro: NitroConfig = NitroConfig()


def test_every_mode_the_config_allows_has_one_entry():
    assert set(MODES) == set(typing.get_args(typing.get_type_hints(EvolutionConfig)["mode"]))
    assert all(name == mode.name for name, mode in MODES.items())


def test_each_mode_builds_the_run_it_names_and_keeps_what_it_says():
    data, sections = market(t=40), Sections()
    windows = ((0, 29), (29, 39), 252.0)
    built = {name: mode.build(data, scales(data, ENV), sections, windows, RuntimeConfig(), None)
             for name, mode in MODES.items()}
    assert type(built["generational"]) is Evolution and type(built["tournament"]) is Tournament
    assert MODES["generational"].kept(sections.evolution, sections.tournament) == 2
    assert MODES["tournament"].kept(sections.evolution, sections.tournament) == 3
    assert MODES["tournament"].keyed(sections) is sections.tournament and MODES["generational"].keyed(sections) is None
    assert modes_where(lambda mode: mode.warm_start) == "generational"
    assert modes_where(lambda mode: mode.pooled) == "tournament"


def test_each_mode_says_where_a_run_stands_in_its_own_words():
    generational, tournament = MODES["generational"], MODES["tournament"]
    assert generational.progress(2, 1, 32) == "generation 3/32" and tournament.progress(2, 5, 32) == "job 5"
    assert generational.best_at(1, 3, "ppo") == "agent 1, generation 3"
    assert tournament.best_at(5, 2, "sac") == "job 5 (sac), lineage depth 2"
    assert generational.learners(TournamentConfig(algorithms={"ppo": 1.0, "sac": 1.0})) == ("ppo",)
    assert tournament.learners(TournamentConfig(algorithms={"ppo": 1.0, "sac": 1.0})) == ("ppo", "sac")
