import math

import numpy as np
import pytest
import torch

from trainers.env import EnvConfig
from trainers.evolution import EvolutionConfig, evolve, select
from trainers.ppo import PPOConfig

from .helpers import market, scales

BOUNDS = {"lr": (1e-5, 1e-3), "entropy_coef": (0.001, 0.1)}


def hparams(n: int) -> list[dict[str, float]]:
    return [{"lr": 1e-4 * (i + 1), "entropy_coef": 0.01, "clip": 0.25} for i in range(n)]


def test_top_agents_survive_and_bottom_become_copies_of_top():
    fitness = [0.3, 2.0, -1.0, 1.0, 0.5, -0.2, 1.5, 0.1]
    h = hparams(8)
    out = select(fitness, h, 0.25, BOUNDS, (0.8, 1.2), np.random.default_rng(0))
    assert out.ranking == [1, 6, 3, 4, 0, 7, 5, 2]
    assert set(out.copies) == {5, 2} and set(out.copies.values()) <= {1, 6}
    for agent in range(8):
        if agent not in out.copies:
            assert out.hparams[agent] == h[agent]  # survivors are untouched
    for dst, src in out.copies.items():
        assert out.hparams[dst]["clip"] == h[src]["clip"]
        ratio = out.hparams[dst]["lr"] / h[src]["lr"]
        assert math.isclose(ratio, 0.8) or math.isclose(ratio, 1.2)


def test_the_best_is_never_overwritten_even_with_ties_and_nans():
    out = select([float("nan"), 1.0, 1.0, 5.0], hparams(4), 0.5, BOUNDS, (0.8, 1.2), np.random.default_rng(1))
    assert out.ranking[0] == 3 and 3 not in out.copies and 0 in out.copies


def test_exploration_stays_within_bounds():
    h = [{"lr": 1e-3, "entropy_coef": 0.001, "clip": 0.25}, {"lr": 1e-5, "entropy_coef": 0.1, "clip": 0.25}]
    for seed in range(20):
        out = select([1.0, 0.0], h, 0.5, BOUNDS, (0.5, 2.0), np.random.default_rng(seed))
        assert BOUNDS["lr"][0] <= out.hparams[1]["lr"] <= BOUNDS["lr"][1]
        assert BOUNDS["entropy_coef"][0] <= out.hparams[1]["entropy_coef"] <= BOUNDS["entropy_coef"][1]


def test_same_seed_same_selection():
    args = ([0.1, 0.4, 0.3, 0.2], hparams(4), 0.5, BOUNDS, (0.8, 1.2))
    a = select(*args, np.random.default_rng(7))
    b = select(*args, np.random.default_rng(7))
    assert a == b


def test_evolve_returns_the_best_validation_snapshot_deterministically():
    data = market(t=60)
    env = EnvConfig(initial_cash=10_000.0, hmax=10, episode_len=8, min_episode_len=4)
    ppo = PPOConfig(num_envs=4, horizon=8, batch_size=16, repeat_times=1, net_dims=(8,))
    evo = EvolutionConfig(population=3, generations=3, iterations_per_generation=1, replace_fraction=0.34)
    seen = []

    def run():
        return evolve(data, scales(data, env), env, ppo, evo, (0, 39), (39, 59), per_year=252.0,
                      on_evaluated=lambda g, a, f: seen.append((g, a)))

    a, b = run(), run()
    assert len(a.history) == 9 and seen[:9] == [(g, i) for g in range(3) for i in range(3)]
    assert a.best_fitness == max(r.fitness for r in a.history)
    assert all(torch.equal(a.best_actor[k], b.best_actor[k]) for k in a.best_actor)
    assert [r.fitness for r in a.history] == [r.fitness for r in b.history]
    assert any(r.parent is not None for r in a.history if r.generation > 0)  # lineage is recorded
    assert a.env_steps == 3 * 3 * 1 * 4 * 8


@pytest.mark.parametrize("bad", [{"population": 0}, {"replace_fraction": 0.9}, {"search_space": {"lr": (0.0, 1.0)}}])
def test_bad_evolution_config_is_rejected(bad):
    with pytest.raises(ValueError):
        EvolutionConfig(**bad)
