"""The selection study's rules and ensemble (benchmarks/archive/selection.py): which snapshots each
rule picks, and the ensemble's action, checked by hand."""

import pytest
import torch

from benchmarks.archive.selection import Ensemble, Snap, history_row, rules, table
from trainers.common.nets import Actor


def snap(generation: int, agent: int, fitness: float) -> Snap:
    return Snap(generation, agent, fitness, {}, {})


def picked(chosen: list[Snap]) -> list[tuple[int, int]]:
    return [(s.generation, s.agent) for s in chosen]


def test_each_rule_picks_the_snapshots_it_names():
    # two agents over three generations; agent 1's 0.9 at generation 1 is the run's best
    snaps = [snap(0, 0, 0.1), snap(0, 1, 0.5), snap(1, 0, 0.7), snap(1, 1, 0.9), snap(2, 0, 0.8), snap(2, 1, 0.2)]
    chosen = rules(snaps)
    assert picked(chosen["best"]) == [(1, 1)]
    assert picked(chosen["top-2"]) == [(1, 1), (2, 0)]
    assert picked(chosen["top-4"]) == [(1, 1), (2, 0), (1, 0), (0, 1)]
    assert picked(chosen["agent-bests"]) == [(2, 0), (1, 1)]  # agent 0's best is 0.8 at generation 2
    assert picked(chosen["last-gen"]) == [(2, 0), (2, 1)]
    assert len(chosen["all"]) == 6


def test_a_tie_goes_to_the_earlier_snapshot():
    assert picked(rules([snap(1, 0, 0.5), snap(0, 1, 0.5)])["best"]) == [(0, 1)]


def linear(weight: float, bias: float) -> Actor:
    actor = Actor(2, 1, (), 0.0)
    with torch.no_grad():
        actor.net[0].weight.fill_(weight)
        actor.net[0].bias.fill_(bias)
    return actor


def test_the_ensemble_acts_as_the_mean_of_its_members():
    state = torch.tensor([[0.5, 0.25]])
    a, b = linear(1.0, 0.0), linear(-2.0, 0.5)  # means 0.75 and -1.0
    expected = (torch.tanh(torch.tensor(0.75)) + torch.tanh(torch.tensor(-1.0))) / 2
    assert Ensemble([a, b])(state).item() == pytest.approx(expected.item())
    assert torch.equal(Ensemble([a])(state), a(state))
    with pytest.raises(ValueError, match="at least one"):
        Ensemble([])


def test_the_table_pairs_each_rule_with_best_by_seed():
    rows = [{"seed": seed, "rule": rule, "members": 1, "validation": v, "test": t, "train": 0.0}
            for seed, values in ((1, {"best": 1.0, "top-2": 1.5, "buy-and-hold": 0.5}),
                                 (2, {"best": 2.0, "top-2": 2.0, "buy-and-hold": 1.0}))
            for rule, t in values.items() for v in (t,)]
    lines = table(rows)
    top2 = next(line for line in lines if line.startswith("| top-2 "))
    # test − B&H: 1.0 and 1.0; test − best: 0.5 and 0.0 (mean 0.25, sd 0.35, t 1.00)
    assert "| 1.00 ± 0.00 (t = +inf) | 0.25 ± 0.35 (t = +1.00) |" in top2


def test_the_history_row_gives_best_over_buy_and_hold_and_the_ensembles_range_against_best():
    # test − best per seed: top-2 +0.5, 0.0 (mean +0.25); last-gen −0.5, −0.5; `all` −2 is left out
    rows = [{"seed": seed, "rule": rule, "members": 1, "validation": 0.0, "test": t, "train": 0.0}
            for seed, values in ((1, {"best": 1.0, "top-2": 1.5, "last-gen": 0.5, "all": -1.0, "buy-and-hold": 0.5}),
                                 (2, {"best": 2.0, "top-2": 2.0, "last-gen": 1.5, "all": 0.0, "buy-and-hold": 1.0}))
            for rule, t in values.items()]
    assert history_row(rows) == ("0.75 ± 0.35 (t = +3.00)", "-0.50 to +0.25")
