import json
import shutil
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from standins.tiny import tiny_params
from tasks.data.feature_set import load, save
from tasks.errors import MissingInput
from tasks.model import bundle
from tasks.model.backtest import CURVE_FILE, METRICS_FILE, PLOT_FILE, backtest, since_window
from tasks.model.plan import Plan
from tasks.model.walkforward import CHALLENGER, Champion, Walk, windows
from tests.tasks.handmade import feature_set, policy
from trainers.common.metrics import METRICS, performance
from trainers.config import EnvConfig


def test_backtest_outputs(built):
    folder = built.dirs.backtest
    metrics = json.loads((folder / METRICS_FILE).read_text())
    assert set(metrics["agent"]) == set(METRICS) == set(metrics["buy_and_hold"])
    assert (metrics["start"], metrics["end"]) == ("2021-09-01", "2021-12-31")  # the first and last test sessions
    assert pd.read_csv(folder / CURVE_FILE, index_col=0).index[0] == "2021-08-31"  # starts at the last validation close
    curve = pd.read_csv(folder / CURVE_FILE, index_col=0)
    assert curve.iloc[0].tolist() == [built.env.initial_cash] * 2
    assert np.isclose(curve["agent"].iloc[-1] / curve["agent"].iloc[0] - 1, metrics["agent"]["cumulative_return"])
    assert (folder / PLOT_FILE).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


DATES = ["2021-12-29", "2021-12-30", "2021-12-31", "2022-01-03", "2022-01-04", "2022-01-05"]
OPENS = [[10.0, 20.0], [10.5, 19.0], [11.0, 18.0], [12.0, 21.0], [10.0, 20.0], [11.5, 18.5]]
CLOSES = [[10.2, 19.5], [10.8, 18.5], [11.5, 18.5], [9.5, 20.5], [11.0, 19.0], [12.0, 18.0]]


def test_backtest_of_a_handmade_policy_by_hand(tmp_path):
    """Test split = bars 4..5, so the env window starts at bar 3's close: orders fill at the opens
    of bars 4 and 5, values are marked at their closes. The policy buys 9 AAA a bar, sells no BBB."""
    params = tiny_params(tmp_path, "backtest.risk_free=0.05")
    fs = feature_set(OPENS, CLOSES, DATES, {"train": (0, 1), "validation": (2, 3), "test": (4, 5)}, ["AAA", "BBB"])
    env = EnvConfig(initial_cash=1_000.0, hmax=10, cost_pct=0.01)
    actor, meta = policy(["AAA", "BBB"], ["rsi_30"], [3.0, -3.0], env)
    for folder in (params.dirs.features, params.dirs.models):
        folder.mkdir(parents=True)
    save(fs, params.dirs.features)
    bundle.save(params.dirs.models, actor.state_dict(), meta)

    result = backtest(params)
    cash4 = 1_000.0 - 9 * 10.0 * 1.01
    cash5 = cash4 - 9 * 11.5 * 1.01
    agent = [1_000.0, cash4 + 9 * 11.0, cash5 + 18 * 12.0]
    hold_cash = 1_000.0 - (49 * 10.0 + 24 * 20.0) * 1.01  # floor(500 / 10.1) = 49, floor(500 / 20.2) = 24
    hold = [1_000.0, 49 * 11.0 + 24 * 19.0 + hold_cash, 49 * 12.0 + 24 * 18.0 + hold_cash]
    assert (result.start, result.end) == ("2022-01-04", "2022-01-05")
    curve = pd.read_csv(params.dirs.backtest / CURVE_FILE, index_col=0)
    assert curve.index.tolist() == ["2022-01-03", "2022-01-04", "2022-01-05"] and curve.index.name == "ts"
    np.testing.assert_allclose(curve["agent"], agent, rtol=0, atol=1e-9)
    np.testing.assert_allclose(curve["buy_and_hold"], hold, rtol=0, atol=1e-9)
    saved = json.loads((params.dirs.backtest / METRICS_FILE).read_text())
    for name, values in (("agent", agent), ("buy_and_hold", hold)):
        expected = performance(np.array(values), 252.0, 0.05)
        assert saved[name] == pytest.approx(expected, rel=1e-12)
    assert result.metrics["agent"] == saved["agent"] and result.buy_and_hold == saved["buy_and_hold"]
    assert (saved["start"], saved["end"]) == ("2022-01-04", "2022-01-05")
    assert result.plot == params.dirs.backtest / PLOT_FILE
    assert result.metrics_file == params.dirs.backtest / METRICS_FILE


def test_backtest_refuses_a_model_trained_on_other_symbols(tmp_path):
    params = tiny_params(tmp_path)
    fs = feature_set(OPENS, CLOSES, DATES, {"train": (0, 1), "validation": (2, 3), "test": (4, 5)}, ["AAA", "BBB"])
    actor, meta = policy(["AAA", "CCC"], ["rsi_30"], [0.0, 0.0], EnvConfig())
    for folder in (params.dirs.features, params.dirs.models):
        folder.mkdir(parents=True)
    save(fs, params.dirs.features)
    bundle.save(params.dirs.models, actor.state_dict(), meta)
    with pytest.raises(MissingInput) as err:
        backtest(params)
    assert str(err.value) == (f"{params.dirs.models}: the model was trained on other symbols or features "
                              "(run `podracer train` again)")
    assert not params.dirs.backtest.exists()


def test_a_shadow_record_starts_on_the_bar_after_its_since_date():
    days = np.array(["2024-01-02", "2024-01-03", "2024-01-04", "2024-01-05", "2024-01-08"], dtype="datetime64[ns]")
    fs = SimpleNamespace(timestamps=days)
    # the env window starts one bar before its first decision: the since bar itself
    assert since_window(fs, "2024-01-03") == (1, 4)
    assert since_window(fs, "2024-01-06") == (3, 4)  # a weekend date: the record starts on Monday
    assert since_window(fs, "2024-01-08") is None  # nothing traded since
    assert since_window(fs, "2023-12-29") == (0, 4)


def test_a_cycle_backtests_on_its_walk_and_reports_the_seen_bars_it_was_handed(built_copy):
    params = built_copy
    shutil.copytree(params.dirs.models, params.dirs.ct / CHALLENGER)
    fs = load(params.dirs.features)
    w = windows(fs, 5)
    champion = Champion("1", params.dirs.models, None, None)
    tested = backtest(params, Walk(w, Plan(), champion, 2))  # the walk's count, not one worked out again
    assert (tested.seen, tested.bars, list(tested.metrics)) == (2, 5, [CHALLENGER, "champion", "buy_and_hold"])
    assert tested.folder == params.dirs.ct / "backtest" and tested.end == str(fs.timestamps[-1])[:10]
    alone = backtest(params, Walk(w, Plan(), None, None))
    assert (alone.seen, list(alone.metrics)) == (None, [CHALLENGER, "buy_and_hold"])
