"""The ablations' report and their longer histories (benchmarks/evidence/ablations.py): each arm
paired by seed with its own reference, the ladder step by step, and a market stretched back over
more histories whose own bars and windows are untouched."""

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from benchmarks.common import Market, market_params
from benchmarks.evidence.ablations import ARMS, AVERAGED, PICKED, augmented, picked, report
from trainers.common.env import MarketData


def rows(arm: str, tests: list[float], train: float = 0.0) -> list[dict]:
    return [{"arm": arm, "seed": seed, "train": train, "val": 0.0, "test": t} for seed, t in enumerate(tests)]


def test_each_arm_is_paired_with_its_reference_by_seed_and_the_ladder_step_by_step():
    text = report(rows("shipped", [1.0, 2.0, 3.0]) + rows("no averaging", [0.0, 2.0, 3.0])
                  + rows(AVERAGED, [1.0, 1.0, 1.0]) + rows("joint credit", [0.0, 0.0, 4.0])
                  + rows("vanilla", [1.0, 2.0, 3.0]))
    lines = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines() if line.startswith("| ")}
    # no averaging − shipped: −1, 0, 0 → mean −0.33, sd 0.58, t = −0.33 / (0.58 / √3) = −1.00
    assert lines["no averaging"].endswith("| − shipped: -0.33 ± 0.58 (t = -1.00) |")
    # joint credit is a change of the averaged learner: −1, −1, +3 against it
    assert lines["joint credit"].endswith("| − + averaged policy: 0.33 ± 2.31 (t = +0.25) |")
    assert lines["vanilla"].endswith("| = shipped on every seed |")
    assert "- shipped − + averaged policy: 1.00 ± 1.00 (t = +1.73)" in text


def test_without_the_shipped_arm_the_shipped_runs_rows_pair_with_the_averaged_learner():
    text = report(rows(AVERAGED, [1.0, 1.0]) + rows("vanilla", [2.0, 3.0]))
    assert "| vanilla | +0.00 ± 0.00 | +0.00 ± 0.00 | +2.50 ± 0.71 | − + averaged policy: 1.50 ± 0.71 (t = +3.00) |" \
        in text


@pytest.fixture
def market() -> Market:
    bars, n = 40, 2
    close = torch.tensor(np.exp(np.cumsum(np.full((bars, n), 0.01), axis=0)))
    data = MarketData(close * 0.999, close, torch.zeros(bars, n, 1))
    params = SimpleNamespace(features=SimpleNamespace(warmup=5))
    fs = SimpleNamespace(feature_names=["ret_5"], mean=np.zeros((n, 1)), std=np.ones((n, 1)))
    return Market(params, fs, data, None, (0, 20), (20, 30), (30, 40), 252.0)


def test_more_histories_run_on_into_the_market_which_keeps_its_own_bars_and_windows(market):
    histories = [np.full((25, 2, 2), 0.002), np.full((25, 2, 2), -0.001)]  # [bars, n, (gap, move)]
    m = augmented(market, histories)
    extra = 50 - 5  # the histories' bars less the warm-up their first indicators need
    assert (m.train, m.val, m.test) == ((0, 20 + extra), (20 + extra, 30 + extra), (30 + extra, 40 + extra))
    assert torch.equal(m.data.close[extra:], market.data.close) and torch.equal(m.data.open[extra:], market.data.open)
    assert torch.equal(m.data.features[extra:], market.data.features)
    # the last history bar closes at the market's first open, and each history bar moves as its returns say
    assert math.isclose(float(m.data.close[extra - 1, 0]), float(market.data.open[0, 0]), rel_tol=1e-12)
    assert math.isclose(float(m.data.close[1, 0] / m.data.close[0, 0]), math.exp(0.004), rel_tol=1e-12)
    assert math.isclose(float(m.data.close[-41, 0] / m.data.open[-41, 0]), math.exp(-0.001), rel_tol=1e-12)


def test_the_rules_alone_pair_with_the_first_rule_and_print_no_ladder():
    # sr_40 − ewm_40: 0.2, 0.1, 0.3 (mean 0.2, sd 0.1, t = 0.2 / (0.1 / √3) = 3.46)
    text = report(rows("ewm_40 rule", [0.5, 0.7, 0.6]) + rows("sr_40 rule", [0.7, 0.8, 0.9]))
    assert ("| sr_40 rule | +0.00 ± 0.00 | +0.00 ± 0.00 | +0.80 ± 0.10 | − ewm_40 rule: 0.20 ± 0.10 (t = +3.46) |"
            in text)
    assert "ladder" not in text


def test_the_rule_best_on_validation_is_chosen_by_validation_never_by_test_nor_a_nan():
    rules = [{"arm": "ewm_20 rule", "train": 0.3, "val": math.nan, "test": 2.0},  # first: max() would keep a NaN
             {"arm": "ewm_40 rule", "train": 0.1, "val": 0.3, "test": 0.9},
             {"arm": "sr_40 rule", "train": 0.2, "val": 0.5, "test": 0.2},
             {"arm": "filter", "train": 0.9, "val": 9.0, "test": 9.0}]  # not a rule a member could start at
    got = picked(rules)
    assert got == {"arm": PICKED, "picked": "sr_40 rule", "train": 0.2, "val": 0.5, "test": 0.2}
    none = picked([dict(r, val=math.nan) for r in rules])  # no validation edge at all: nothing is picked
    assert none["picked"] is None and all(math.isnan(none[w]) for w in ("train", "val", "test"))


def test_the_rule_best_on_validation_pairs_with_the_learners_start_and_counts_its_picks():
    # picked − sr_40 on test: 0.0, −0.3, +0.1 (mean −0.0667, sd 0.2082, t = −0.55)
    chosen = [dict(r, picked=name) for r, name in zip(rows(PICKED, [0.5, 0.4, 0.9]),
                                                       ("sr_40 rule", "ewm_20 rule", "ewm_40 rule"))]
    text = report(rows("ewm_40 rule", [0.6, 0.6, 0.9]) + rows("sr_40 rule", [0.5, 0.7, 0.8]) + chosen)
    assert f"| {PICKED} | +0.00 ± 0.00 | +0.00 ± 0.00 | +0.60 ± 0.26 | − sr_40 rule: -0.07 ± 0.21 (t = -0.55) |" in text
    assert ("The rule best on validation: ewm_40 rule on 1 of 3 seeds, sr_40 rule on 1 of 3 seeds, "
            "ewm_20 rule on 1 of 3 seeds.") in text


@pytest.mark.parametrize("market", ["learnable", "minute"])
def test_the_gpu_scale_arms_change_only_the_passes_batch_and_rate_and_cover_every_agents_rollout(tmp_path, market):
    base = market_params(tmp_path, market, 100, [])
    for arm in ("epochs 4", "epochs 2", "epochs 2, lr x2", "epochs 2, whole rollout, lr x4"):
        p = market_params(tmp_path, market, 100, ARMS[arm].overrides)
        assert p.env == base.env and p.features == base.features and p.ppo.net_dims == base.ppo.net_dims
        space, shipped = p.evolution.search_space, base.evolution.search_space
        steps = p.ppo.repeat_times / base.ppo.repeat_times
        # the search space moves with agent 0: every agent's passes and rate scale alike
        assert [b * steps for b in shipped["repeat_times"]] == list(space["repeat_times"])
        assert [b * p.ppo.lr / base.ppo.lr for b in shipped["lr"]] == list(space["lr"])
    whole = market_params(tmp_path, market, 100, ARMS["epochs 2, whole rollout, lr x4"].overrides)
    # one minibatch is each agent's whole rollout, the largest the search space can draw included
    assert whole.ppo.batch_size >= max(whole.evolution.search_space["num_envs"]) * whole.ppo.horizon
