"""The CT cycle's walk-forward windows, worked out by hand on a ten-bar feature set, its warm
start and its training plan (the challenger resumes from its checkpoint), and the walk that
holds them, built from one read of the features."""

from dataclasses import replace

import pytest
import torch

from standins.tiny import tiny_params
from tasks.data import feature_set as feature_set_module
from tasks.data.arrivals import simulate
from tasks.data.feature_set import load
from tasks.data.features import features
from tasks.data.validate import validate
from tasks.errors import DataError
from tasks.model import bundle
from tasks.model.plan import checkpoint_dir, state_scales
from tasks.model.walkforward import Champion, challenger_plan, seen_bars, walk, warm_start, windows
from tests.tasks.handmade import feature_set, policy
from trainers.config import EnvConfig
from trainers.population.evolution import CHECKPOINT

DATES = [f"2024-01-{d:02d}" for d in (2, 3, 4, 5, 8, 9, 10, 11, 12, 16)]  # bars 0..9


def ten_bars():
    prices = [[10.0 + t] for t in range(10)]
    return feature_set(prices, prices, DATES, {"train": (0, 3), "validation": (4, 6), "test": (7, 9)}, ["AAA"])


def test_the_window_is_the_last_bars_and_selection_fills_the_gap_to_the_train_split():
    w = windows(ten_bars(), eval_bars=3)
    # train bars 0..3 (env window from bar 0); selection decides from bar 3 and marks bars 4..6;
    # the evaluation window decides from bar 6 and marks the last three bars 7, 8, 9
    assert (w.train, w.select, w.eval) == ((0, 3), (3, 6), (6, 9))
    assert (w.cutoff, w.first, w.last, w.eval_bars) == ("2024-01-10", "2024-01-11", "2024-01-16", 3)


def test_a_window_that_leaves_under_two_selection_bars_is_one_line():
    assert windows(ten_bars(), eval_bars=4).select == (3, 5)  # bars 4 and 5: just enough
    with pytest.raises(DataError, match=r"^ct: 10 bars leave 1 selection bars between the train split "
                                        r"\(to 2024-01-05\) and the last 5 bars; lower ct.eval_bars"):
        windows(ten_bars(), eval_bars=5)


@pytest.mark.parametrize(("cutoff", "seen"), [("2024-01-10", 0), ("2024-01-11", 1), ("2024-01-15", 2),
                                              ("2024-01-16", 3), ("2030-01-01", 3), (None, 3)])
def test_the_champion_has_seen_the_window_bars_up_to_its_cutoff(cutoff, seen):
    fs = ten_bars()
    assert seen_bars(fs, windows(fs, 3), cutoff) == seen  # None: unknown, assume all seen (conservative)


def test_a_fitting_champion_warm_starts_with_its_weights_and_hparams(tmp_path):
    params = tiny_params(tmp_path, "ppo.net_dims=[4]")
    fs = ten_bars()
    actor, meta = policy(["AAA"], ["rsi_30"], [0.3], EnvConfig())
    meta = bundle.PolicyMeta(**{**meta.__dict__, "scales": state_scales(params, fs)})
    hparams = {**params.ppo.hparams(), "lr": 0.000123}
    tmp_path.joinpath("champ").mkdir()
    bundle.save(tmp_path / "champ", actor.state_dict(), meta, hparams)
    warm, how = warm_start(params, fs, tmp_path / "champ")
    assert how == "warm start from the champion" and warm.hparams == hparams
    assert all(torch.equal(warm.actor[k], v) for k, v in actor.state_dict().items())

    bundle.save(tmp_path / "champ", actor.state_dict(), meta)  # a bundle from before hparams.json
    (tmp_path / "champ" / bundle.HPARAMS).unlink()
    assert warm_start(params, fs, tmp_path / "champ") == (
        None, "the champion's bundle has no hparams.json (registered before warm starts)")


def test_a_champion_of_other_symbols_or_scaling_is_no_warm_start(tmp_path):
    params = tiny_params(tmp_path, "ppo.net_dims=[4]")
    fs = ten_bars()
    cases = ((["BBB"], None, "the champion trades other symbols or indicators"),
             (["AAA"], "other", "the champion's state scaling differs from this data's train split"))
    for i, (symbols, scales, why) in enumerate(cases):
        actor, meta = policy(symbols, ["rsi_30"], [0.3], EnvConfig(), price_ref=(99.0,))
        if scales is None:
            meta = bundle.PolicyMeta(**{**meta.__dict__, "scales": state_scales(params, fs)})
        folder = tmp_path / f"champion{i}"
        folder.mkdir()
        bundle.save(folder, actor.state_dict(), meta, params.ppo.hparams())
        assert warm_start(params, fs, folder) == (None, why)


def test_the_challenger_warm_starts_from_a_fitting_champion_and_resumes_its_own_checkpoint(built_copy):
    params = built_copy
    simulate(params, 3)
    validate(params)
    features(params)
    fs = load(params.dirs.features)
    w = windows(fs, 20)
    cold = challenger_plan(params, fs, w, None)
    assert (cold.warm, cold.start, cold.warm_id) == (None, "no champion: cold start", "")
    champion = Champion("7", params.dirs.models, None, None)
    plan = challenger_plan(params, fs, w, champion)
    assert plan.start == "warm start from the champion" and plan.warm_id == "7" and plan.warm is not None
    assert (plan.train_window, plan.val_window, plan.out) == (w.train, w.select, params.dirs.ct / "challenger")
    configured = plan.configure(params, "v")
    assert configured.evolution.generations == params.ct.generations and configured.train.resume is False
    folder = checkpoint_dir(configured, "v", plan)
    folder.mkdir(parents=True)
    (folder / CHECKPOINT).touch()
    assert plan.configure(params, "v").train.resume is True  # a retried cycle continues where it stopped


def test_the_walk_is_built_from_one_read_of_the_features(built_copy, monkeypatch):
    params = tiny_params(built_copy.data_dir.parent, "ct.eval_bars=5")
    fs = load(params.dirs.features)
    w = windows(fs, 5)
    champion = Champion("7", params.dirs.models, None, None)
    reads = []

    def counted(folder):
        reads.append(folder)
        return load(folder)

    monkeypatch.setattr(feature_set_module, "load", counted)
    walked = walk(params, champion)
    assert reads == [params.dirs.features]  # windows, warm start, plan and seen bars share one read
    assert (walked.windows, walked.champion, walked.seen) == (w, champion, seen_bars(fs, w, None)) and walked.seen == 5
    plan = challenger_plan(params, fs, w, champion)
    assert replace(walked.plan, warm=None) == replace(plan, warm=None) and walked.plan.warm is not None
    assert walked.plan.warm.hparams == plan.warm.hparams
    assert all(torch.equal(walked.plan.warm.actor[k], v) for k, v in plan.warm.actor.items())

    reads.clear()
    cold = walk(params, None)
    assert reads == [params.dirs.features]
    assert (cold.windows, cold.champion, cold.seen, cold.plan.start) == (w, None, None, "no champion: cold start")
