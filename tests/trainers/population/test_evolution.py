import math

import numpy as np
import pytest
import torch

from tests.trainers.helpers import evolve, market, scales
from trainers.common.evaluate import run_policy
from trainers.common.jobs import AgentRecord
from trainers.common.metrics import FITNESS, fitness, sharpe
from trainers.common.nets import Actor
from trainers.common.state import state_dim
from trainers.config import EnvConfig, PPOConfig
from trainers.population.config import EvolutionConfig
from trainers.population.evolution import Evolution, WarmStart, run_serially
from trainers.population.selection import explore, initial_population, select
from trainers.ppo.multiplex import run_multiplexed

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
    evo = EvolutionConfig(population=3, generations=3, iterations_per_generation=1, quantile=0.34, eval_interval=1,
                          search_space={"lr": (1e-4, 1e-3), "net_width": (4, 12), "num_envs": (2, 6)})
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
    assert a.env_steps == sum(int(r.hparams["num_envs"]) * 8 for r in a.history)
    assert len({r.hparams["net_width"] for r in a.history}) > 1  # widths differ across agents


@pytest.mark.parametrize("bad", [{"population": 0}, {"quantile": 0.9}, {"search_space": {"lr": (0.0, 1.0)}}])
def test_bad_evolution_config_is_rejected(bad):
    with pytest.raises(ValueError):
        EvolutionConfig(**bad)


SPACE = {"lr": (1e-5, 1e-3), "entropy_coef": (0.001, 0.1), "num_envs": (8, 64), "net_width": (32, 256)}


def test_exploration_resamples_within_bounds_and_never_reshapes_the_network():
    source = {"lr": 1e-4, "entropy_coef": 0.01, "num_envs": 32.0, "net_width": 128.0, "clip": 0.25}
    for seed in range(50):
        out = explore(source, SPACE, (0.8, 1.2), 0.5, np.random.default_rng(seed))
        assert out["net_width"] == 128.0 and out["clip"] == 0.25  # structural / unsearched: inherited
        assert out["num_envs"] == int(out["num_envs"]) and 8 <= out["num_envs"] <= 64
        for name in ("lr", "entropy_coef"):
            assert SPACE[name][0] <= out[name] <= SPACE[name][1]
    always = explore(source, SPACE, (0.8, 1.2), 1.0, np.random.default_rng(3))
    never = explore(source, SPACE, (0.8, 1.2), 0.0, np.random.default_rng(3))
    assert math.isclose(never["lr"] / 1e-4, 0.8) or math.isclose(never["lr"] / 1e-4, 1.2)
    assert not (math.isclose(always["lr"] / 1e-4, 0.8) or math.isclose(always["lr"] / 1e-4, 1.2))


def tiny_run(**evo_overrides):
    data = market(t=60)
    env = EnvConfig(initial_cash=10_000.0, hmax=100, episode_len=8, min_episode_len=4)
    ppo = PPOConfig(num_envs=4, horizon=8, batch_size=16, repeat_times=1, net_dims=(8,), lr=0.01)
    evo = EvolutionConfig(**{"population": 4, "generations": 3, "iterations_per_generation": 2, "eval_interval": 1,
                             "quantile": 0.25, "search_space": {"lr": (1e-3, 1e-2)}, **evo_overrides})
    return lambda **kw: evolve(data, scales(data, env), env, ppo, evo, (0, 39), (39, 59), per_year=252.0, **kw)


def test_patience_stops_an_agent_whose_fitness_keeps_falling():
    result = tiny_run(patience=1, generations=2, iterations_per_generation=4)()
    stopped = [r for r in result.history if r.stopped]
    assert stopped, "some agent's validation fitness fell at least once"
    for k, r in enumerate(result.history):  # a stopped agent is not trained or re-evaluated
        if r.stopped:
            before = [h for h in result.history[:k] if h.agent == r.agent]
            assert before and r.fitness == before[-1].fitness


def test_a_resumed_run_ends_exactly_as_an_uninterrupted_one(tmp_path):
    run = tiny_run()
    straight = run(checkpoint_dir=tmp_path / "a")
    calls = []

    def killed(gen, agent, fitness):
        calls.append(gen)
        if gen == 2:  # die in the middle of the last generation
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(checkpoint_dir=tmp_path / "b", on_evaluated=killed)
    resumed = run(checkpoint_dir=tmp_path / "b", resume=True)
    assert all(torch.equal(straight.best_actor[k], resumed.best_actor[k]) for k in straight.best_actor)
    assert [r.fitness for r in straight.history] == [r.fitness for r in resumed.history]
    assert straight.env_steps == resumed.env_steps


def test_resume_without_a_checkpoint_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        tiny_run()(checkpoint_dir=tmp_path, resume=True)


def test_a_copied_agent_starts_the_next_generation_with_its_parents_weights_and_adam_state():
    """Equal widths, so copying the wrong agent's weights would not fail on a shape."""
    data = market(t=60)
    env = EnvConfig(initial_cash=10_000.0, hmax=10, episode_len=8, min_episode_len=4)
    ppo = PPOConfig(num_envs=4, horizon=8, batch_size=16, repeat_times=1, net_dims=(8,))
    evo = EvolutionConfig(population=4, generations=2, iterations_per_generation=1, quantile=0.5,
                          search_space={"lr": (1e-4, 1e-3)})
    generations = []

    def runner(jobs, setting):
        generations.append((jobs, run_serially(jobs, setting)))
        return generations[-1][1]

    Evolution(data, scales(data, env), env, ppo, evo, (0, 39), (39, 59), 252.0).run(runner=runner)
    (_, trained), (next_jobs, _) = generations
    copies = {job.index: job.parent for job in next_jobs if job.parent is not None}
    assert len(copies) == 2 and not set(copies) & set(copies.values())
    for dst, src in copies.items():
        mine, theirs = next_jobs[dst].state["learners"][0], trained[src].state["learners"][0]
        for net in ("actor", "critic"):
            assert all(torch.equal(mine[net][k], theirs[net][k]) for k in theirs[net])
        assert not all(torch.equal(mine["actor"][k], trained[dst].state["learners"][0]["actor"][k])
                       for k in mine["actor"])  # and no longer its own
        adam, parent_adam = mine["optimizer"]["state"], theirs["optimizer"]["state"]
        assert adam and all(torch.equal(adam[p]["exp_avg"], parent_adam[p]["exp_avg"]) for p in parent_adam)
        assert next_jobs[dst].seed != trained[src].seed  # its own random streams
    for survivor in set(range(4)) - set(copies):
        kept = next_jobs[survivor].state["learners"][0]["actor"]
        assert all(torch.equal(kept[k], trained[survivor].state["learners"][0]["actor"][k]) for k in kept)


@pytest.mark.parametrize("fitness", ["sortino", "cumulative_return"])
@pytest.mark.parametrize("runner", [run_serially, run_multiplexed], ids=["serial", "multiplexed"])
def test_the_evaluator_scores_with_the_configured_fitness(fitness, runner):
    data = market(t=60)
    env = EnvConfig(initial_cash=10_000.0, hmax=100, episode_len=8, min_episode_len=4)
    ppo = PPOConfig(num_envs=4, horizon=8, batch_size=16, repeat_times=1, net_dims=(8,), lr=0.01)
    evo = EvolutionConfig(population=2, generations=1, iterations_per_generation=2, fitness=fitness,
                          search_space={"lr": (1e-3, 1e-2)})
    result = evolve(data, scales(data, env), env, ppo, evo, (0, 39), (39, 59), per_year=252.0, runner=runner)
    actor = Actor(state_dim(3, 2), 3, (8,), init_log_std=0.0)
    actor.load_state_dict(result.best_actor)
    curve = run_policy(actor, data, scales(data, env), env, (39, 59))
    assert result.best_fitness == pytest.approx(FITNESS[fitness](curve, 252.0), rel=1e-6)
    assert result.best_fitness != pytest.approx(sharpe(curve, 252.0), rel=1e-3)


def test_learning_rates_are_drawn_log_uniformly_and_widths_uniformly_as_integers():
    rng = np.random.default_rng(0)
    lrs = [initial_population({"lr": 1.0}, {"lr": (1e-5, 1e-3)}, 2, rng)[1]["lr"] for _ in range(400)]
    assert 0.6e-4 < float(np.median(lrs)) < 1.6e-4  # the geometric middle; a uniform draw's median is ~5e-4
    widths = [initial_population({"net_width": 8.0}, {"net_width": (16, 64)}, 2, rng)[1]["net_width"]
              for _ in range(400)]
    assert all(w == int(w) for w in widths) and 34 < float(np.median(widths)) < 46
    assert len(initial_population({"lr": 1.0}, {"lr": (1e-5, 1e-3)}, 4, rng)) == 4


def test_a_structural_hyperparameter_first_in_the_space_does_not_stop_the_others():
    space = {"net_width": (32, 256), "lr": (1e-5, 1e-3), "entropy_coef": (0.001, 0.1)}
    out = explore({"net_width": 64.0, "lr": 1e-4, "entropy_coef": 0.01}, space, (0.8, 1.2), 0.0,
                  np.random.default_rng(0))
    assert out["net_width"] == 64.0 and out["lr"] != 1e-4 and out["entropy_coef"] != 0.01


def test_ties_keep_index_order_in_a_large_population():
    out = select([1.0] * 20 + [2.0], hparams(21), 0.25, BOUNDS, (0.8, 1.2), np.random.default_rng(0))
    assert out.ranking == [20, *range(20)]
    assert set(out.copies) == set(range(15, 20))


def test_a_warm_population_starts_from_the_champion_its_hparams_and_explored_copies():
    data = market(t=60)
    env = EnvConfig(initial_cash=10_000.0, hmax=100, episode_len=8, min_episode_len=4)
    ppo = PPOConfig(num_envs=4, horizon=8, batch_size=16, repeat_times=1, net_dims=(8,), lr=0.01)
    evo = EvolutionConfig(population=4, generations=1, iterations_per_generation=1, seed=3,
                          search_space={"lr": (1e-3, 1e-2), "clip": (0.1, 0.3)})
    champion = Actor(state_dim(data.n_stocks, data.n_features), data.n_stocks, (8,), init_log_std=0.0)
    with torch.no_grad():
        for p in champion.parameters():
            p.uniform_(-1.0, 1.0)
    warm = WarmStart(hparams={**ppo.hparams(), "lr": 0.005, "clip": 0.2}, actor=champion.state_dict())
    run = Evolution(data, scales(data, env), env, ppo, evo, (0, 39), (39, 59), 252.0, warm=warm)
    hp = run.state.hparams
    assert hp[0] == warm.hparams  # agent 0 is the champion as it was
    for copy in hp[1:]:  # the others are PBT copies: each searched value perturbed (x0.8 / x1.2) or resampled
        assert copy != warm.hparams and 1e-3 <= copy["lr"] <= 1e-2 and 0.1 <= copy["clip"] <= 0.3
        assert {k: v for k, v in copy.items() if k not in ("lr", "clip")} == \
            {k: v for k, v in warm.hparams.items() if k not in ("lr", "clip")}
    for state in run.state.states:  # every agent's actor starts as the champion's
        actor = state["learners"][0]["actor"]
        assert all(torch.equal(actor[k], v) for k, v in champion.state_dict().items())
    cold = Evolution(data, scales(data, env), env, ppo, evo, (0, 39), (39, 59), 252.0)
    assert not torch.equal(cold.state.states[0]["learners"][0]["actor"]["net.0.weight"], champion.net[0].weight)


@pytest.mark.parametrize("runner", [run_serially, run_multiplexed])
def test_a_shared_policy_population_evolves_and_reports_each_generations_best(runner):
    """The per-stock scorer trains on both engines, and ``on_generation`` sees the best
    snapshot so far after each generation: its fitness never falls, and the last is the result."""
    data = market(t=60)
    env = EnvConfig(initial_cash=10_000.0, hmax=10, episode_len=8, min_episode_len=4, action="weights",
                    reward="excess")
    ppo = PPOConfig(num_envs=4, horizon=8, batch_size=16, repeat_times=1, net_dims=(8,), policy="shared")
    evo = EvolutionConfig(population=2, generations=3, iterations_per_generation=1, eval_interval=1, quantile=0.5,
                          search_space={"net_width": (4, 12)})
    seen: list = []
    run = Evolution(data, scales(data, env), env, ppo, evo, (0, 39), (39, 59), 252.0)
    result = run.run(runner=runner, on_generation=seen.append)
    assert len(seen) == 3
    assert [s.best_fitness for s in seen] == sorted(s.best_fitness for s in seen)
    assert seen[-1].best_fitness == result.best_fitness
    assert run.state.states[0]["learners"][0]["actor"]["net.0.weight"].shape[1] == data.n_features + 2


def test_a_diverged_agent_is_never_selected_even_when_every_healthy_agent_loses():
    """A NaN account once read as a Sharpe of 0: in a year when every healthy agent's Sharpe
    is negative, the broken agent scored best and was registered. Its fitness is −inf now,
    so it is ranked last, never snapshotted, and the best is a healthy agent."""
    data = market(t=60, seed=3)
    data.close[30:] *= torch.linspace(1.0, 0.5, 30, dtype=torch.float64).unsqueeze(1)  # a falling validation year
    data.open[30:] *= torch.linspace(1.0, 0.5, 30, dtype=torch.float64).unsqueeze(1)
    env = EnvConfig(initial_cash=10_000.0, episode_len=8, min_episode_len=4, action="weights")
    ppo = PPOConfig(num_envs=4, horizon=8, batch_size=16, repeat_times=1, net_dims=(8,))
    cfg = EvolutionConfig(population=3, generations=2, iterations_per_generation=1, quantile=0.34, eval_interval=1,
                          search_space={})
    run = Evolution(data, scales(data, env), env, ppo, cfg, (0, 29), (29, 59), 252.0)
    broken = run.state.states[1]["learners"][0]["actor"]
    for name in broken:
        broken[name] = torch.full_like(broken[name], math.nan)
    result = run.run(runner=run_multiplexed)
    healthy = [r.fitness for r in result.history if r.agent != 1 or r.generation > 0]
    assert [r.fitness for r in result.history if (r.generation, r.agent) == (0, 1)] == [-math.inf]
    assert run.state.parents.get(1) is not None  # ranked last, it was replaced by a healthy agent's copy
    assert max(healthy) < 0 and math.isfinite(result.best_fitness)
    assert all(torch.isfinite(w).all() for w in result.best_actor.values())
    assert fitness("sharpe", np.array([100.0, 99.0, math.nan, 98.0]), 252.0) == -math.inf
    assert fitness("sharpe", np.array([100.0, 99.0, 0.0, 98.0]), 252.0) == -math.inf


def chosen_by_luck(best: list[float], last: list[float], history: list[float], select: str = "final"):
    """``Evolution.best()`` on a hand-set state: each agent's best snapshot fitness, its last
    (final) fitness, and every evaluation's fitness (their spread is the luck)."""
    data = market(t=60)
    env = EnvConfig(initial_cash=10_000.0, hmax=10, episode_len=8, min_episode_len=4)
    ppo = PPOConfig(num_envs=4, horizon=8, batch_size=16, repeat_times=1, net_dims=(8,))
    cfg = EvolutionConfig(population=2, generations=3, iterations_per_generation=1, search_space={}, select=select)
    run = Evolution(data, scales(data, env), env, ppo, cfg, (0, 39), (39, 59), 252.0)
    pop = run.state
    pop.generation = 3
    pop.best = [(f, 1, {"tag": torch.tensor([float(i)])}) for i, f in enumerate(best)]
    pop.last = list(last)
    pop.history = [AgentRecord(0, 0, 1, f, {}, None) for f in history]
    return run.best()


def test_the_final_population_is_chosen_however_far_a_snapshot_led_unless_every_final_agent_diverged():
    """Evaluations 0, 1, 2, 3: sd 1.291; the best of 4 such would lead by 1.291 x
    (0.4228 x Φ⁻¹(3/4) + 0.5772 x Φ⁻¹(1 − 1/(4e))) = 1.291 x (0.4228 x 0.6745 + 0.5772 x 1.3285)
    = 1.291 x 1.0520 = 1.358 by luck alone: reported, and no snapshot's lead overrides the final
    population, not even one beyond it."""
    history = [0.0, 1.0, 2.0, 3.0]
    near = chosen_by_luck(best=[3.0, 1.0], last=[2.5, 2.2], history=history)  # a lead of 0.5: luck
    assert near.luck == pytest.approx(1.2909944 * 1.0520, abs=2e-3)
    assert (near.best_agent, near.best_fitness, near.best_generation) == (0, 2.5, 2)
    assert "tag" not in near.best_actor  # the final policy, not the snapshot
    assert [leader.fitness for leader in near.leaders] == [2.5, 2.2]
    far = chosen_by_luck(best=[1.0, 3.5], last=[2.0, 1.9], history=history)  # a lead of 1.5: beyond luck
    assert (far.best_agent, far.best_fitness, far.best_generation) == (0, 2.0, 2)
    assert "tag" not in far.best_actor
    diverged = chosen_by_luck(best=[1.0, 3.5], last=[math.nan, math.nan], history=history)
    assert (diverged.best_agent, diverged.best_fitness, diverged.best_generation) == (1, 3.5, 1)
    assert torch.equal(diverged.best_actor["tag"], torch.tensor([1.0]))  # the best snapshot, never a NaN agent
    one = chosen_by_luck(best=[1.0, 3.5], last=[math.nan, -0.5], history=history)
    assert (one.best_agent, one.best_fitness, one.best_generation) == (1, -0.5, 2)  # the finite one, losing or not
    published = chosen_by_luck(best=[3.0, 1.0], last=[2.5, 2.2], history=history, select="snapshot")
    assert (published.best_agent, published.best_fitness, published.best_generation) == (0, 3.0, 1)
