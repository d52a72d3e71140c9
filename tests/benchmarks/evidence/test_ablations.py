"""The ablations' pieces (benchmarks/evidence/ablations.py): the rule best on validation, the
blends of rankings, the selection bound, and the GPU-scale arms."""

import math
import warnings

import numpy as np
import pytest

from benchmarks.common import market_params
from benchmarks.evidence.ablations import ARMS, BOUND, PICKED, blended, bound, picked


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
