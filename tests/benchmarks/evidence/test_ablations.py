"""The ablations' pieces (benchmarks/evidence/ablations.py): a market stretched back over more
histories whose own bars and windows are untouched, the rule best on validation, the blends of
rankings, the selection bound, and the GPU-scale arms."""

import math
import warnings
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from benchmarks.common import Market, market_params
from benchmarks.evidence.ablations import ARMS, BOUND, PICKED, augmented, blended, bound, picked
from trainers.common.env import MarketData


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


def test_the_rule_best_on_validation_is_chosen_by_validation_never_by_test_nor_a_nan():
    rules = [{"arm": "ewm_20 rule", "train": 0.3, "val": math.nan, "test": 2.0},  # first: max() would keep a NaN
             {"arm": "ewm_40 rule", "train": 0.1, "val": 0.3, "test": 0.9},
             {"arm": "sr_40 rule", "train": 0.2, "val": 0.5, "test": 0.2},
             {"arm": "filter", "train": 0.9, "val": 9.0, "test": 9.0}]  # not a rule a member could start at
    got = picked(rules)
    assert got == {"arm": PICKED, "picked": "sr_40 rule", "train": 0.2, "val": 0.5, "test": 0.2}
    none = picked([dict(r, val=math.nan) for r in rules])  # no validation edge at all: nothing is picked
    assert none["picked"] is None and all(math.isnan(none[w]) for w in ("train", "val", "test"))


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


def test_a_blend_averages_each_rankings_cross_sectional_z_score_bar_by_bar():
    a = np.array([[0.0, 1.0, 2.0], [np.nan, np.nan, np.nan], [5.0, 5.0, 5.0]])
    b = np.array([[0.0, 0.0, 30.0], [np.nan, np.nan, np.nan], [1.0, 2.0, 2.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the warm-up's all-NaN bar warns nothing
        got = blended([a, b])
    # bar 0: z(a) = (−1, 0, 1)/√(2/3) = (−1.2247, 0, 1.2247); z(b) = ((0, 0, 30) − 10)/√200 = (−0.7071, −0.7071, 1.4142)
    np.testing.assert_allclose(got[0], [-0.96593, -0.35355, 1.31948], atol=1e-5)
    assert (got[1] == 0).all()  # no ranking yet: neutral, as the `_xs` features are
    # bar 2: a does not tell the stocks apart (0); z(b) = (−1.4142, 0.7071, 0.7071)
    np.testing.assert_allclose(got[2], [-0.70711, 0.35355, 0.35355], atol=1e-5)


def test_the_bound_is_the_final_agent_best_on_test_never_a_nan_with_its_spread():
    scored = [{"train": 0.0, "val": 0.1, "test": math.nan},  # a diverged agent: never the bound, nor the spread
              {"train": 0.9, "val": 0.9, "test": 0.2},
              {"train": 0.1, "val": 0.2, "test": 0.7},
              {"train": 0.5, "val": 0.5, "test": 0.4}]
    assert bound(scored) == {"arm": BOUND, "train": 0.1, "val": 0.2, "test": 0.7, "spread": pytest.approx(0.5)}
    none = bound([dict(e, test=math.nan) for e in scored])
    assert all(math.isnan(none[k]) for k in ("train", "val", "test", "spread"))
