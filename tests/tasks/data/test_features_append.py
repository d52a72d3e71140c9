"""Appending minute bars to a stored feature set (docs/data.md, features): only the new rows are
computed, from a tail of history, and the result equals a full recompute bit for bit."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tasks.data import feature_set, features, indicators
from tasks.data.bars import VALIDATED, write_parquet

from ...conftest import tiny_params

SYMBOLS = tuple(f"S{i:02d}" for i in range(6))
INDICATORS = "features.indicators=[turbulence, vix_proxy, ret_5, ret_20_xs, vol_20, ewm_20, ewm_40_xs, sr_20_xs]"


def minute_bars(ragged: bool, sessions: int = 6) -> pd.DataFrame:
    """Random walks on every minute of ``sessions`` sessions from 2023-03-01; ragged: every symbol but
    the first misses 10% of its minutes."""
    minutes = pd.DatetimeIndex([t for day in pd.bdate_range("2023-03-01", periods=sessions)
                                for t in pd.date_range(f"{day.date()} 14:30", periods=390, freq="1min", tz="UTC")])
    rng = np.random.default_rng(1)
    frames = []
    for symbol in SYMBOLS:
        close = 30.0 * np.exp(np.cumsum(rng.normal(0.0, 0.001, len(minutes))))
        keep = rng.random(len(minutes)) > (0.1 if ragged and symbol != SYMBOLS[0] else 0.0)
        frames.append(pd.DataFrame({"symbol": symbol, "ts": minutes, "open": close * 0.999, "high": close * 1.001,
                                    "low": close * 0.998, "close": close, "volume": 1e4})[keep])
    return pd.concat(frames, ignore_index=True)


def params_at(root: Path, bars: pd.DataFrame):
    params = tiny_params(root, "data.freq=1min", INDICATORS, "features.warmup=130", "features.min_history=121",
                         "features.turbulence_refresh=390", "features.train_end=2023-03-02",
                         "features.val_end=2023-03-03")
    write_parquet(bars, params.dirs.validated / VALIDATED, "1min")
    return params


def saved(folder: Path) -> dict[str, np.ndarray]:
    return {a: np.load(folder / f"{a}.npy") for a in feature_set.ARRAYS}


@pytest.mark.parametrize("ragged", [False, True])
def test_a_day_of_minute_bars_is_appended_from_a_tail_and_equals_a_full_recompute(tmp_path, monkeypatch, ragged):
    bars = minute_bars(ragged)
    day = bars["ts"].dt.normalize()
    params = params_at(tmp_path / "inc", bars[day < day.max()])
    features.features(params)
    before = saved(params.dirs.features)
    panel_bars = len(before["timestamps"]) + params.features.warmup
    computed: list[int] = []
    block = indicators.block
    monkeypatch.setattr(features, "block", lambda *a, **k: computed.append(a[4]) or block(*a, **k))

    write_parquet(bars, params.dirs.validated / VALIDATED, "1min")
    result = features.features(params)
    assert result.appended == 390 and computed and min(computed) == panel_bars  # only the new rows computed
    monkeypatch.setattr(features, "block", block)
    full = params_at(tmp_path / "full", bars)
    features.features(full)
    after, whole = saved(params.dirs.features), saved(full.dirs.features)
    for name in feature_set.ARRAYS:
        assert np.array_equal(after[name], whole[name], equal_nan=True), name  # bit for bit
        assert np.array_equal(after[name][: len(before[name])], before[name], equal_nan=True), name
    assert np.isfinite(after["features"][-390:]).all() == (not ragged)
    for name in (feature_set.META, feature_set.NORM, feature_set.SPLITS, feature_set.COVERAGE, features.HISTORY):
        assert (params.dirs.features / name).read_text() == (full.dirs.features / name).read_text(), name
    assert features.features(params).appended == 0


def test_revised_bars_under_the_stored_set_are_recomputed_whole(tmp_path, monkeypatch, caplog):
    bars = minute_bars(False)
    day = bars["ts"].dt.normalize()
    params = params_at(tmp_path, bars[day < day.max()])
    features.features(params)
    revised = bars.copy()
    revised.loc[5, "close"] *= 1.01  # a bar of the first session, long before the new day
    write_parquet(revised, params.dirs.validated / VALIDATED, "1min")
    computed: list[int] = []
    block = indicators.block
    monkeypatch.setattr(features, "block", lambda *a, **k: computed.append(a[4]) or block(*a, **k))
    with caplog.at_level("WARNING", logger="podracer.features"):
        result = features.features(params)
    assert result.appended == result.bars and min(computed) == params.features.warmup
    assert "revised history" in caplog.text


def test_a_moved_train_split_is_recomputed_whole(tmp_path):
    """Default split dates follow the history's span, so new bars move train_end: the train
    statistics change and nothing can be appended (train ends 2023-03-07, then 2023-03-08)."""
    bars = minute_bars(False, sessions=8)
    day = bars["ts"].dt.normalize()
    params = tiny_params(tmp_path, "data.freq=1min", INDICATORS, "features.warmup=130", "features.min_history=121",
                         "features.turbulence_refresh=390", "data.source=file", "data.path=bars.parquet",
                         "data.start=null", "data.end=null", "features.train_end=null", "features.val_end=null")
    write_parquet(bars[day < day.max()], params.dirs.validated / VALIDATED, "1min")
    features.features(params)
    write_parquet(bars, params.dirs.validated / VALIDATED, "1min")
    stored = feature_set.load(params.dirs.features).splits["train"]
    result = features.features(params)
    assert result.appended == result.bars and feature_set.load(params.dirs.features).splits["train"] != stored
