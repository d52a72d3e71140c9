from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tasks.caching import current_version
from tasks.data import feature_set, features
from tasks.data.arrivals import simulate
from tasks.data.bars import read_parquet, write_parquet
from tasks.data.ingest import ingest
from tasks.data.validate import VALIDATED, validate
from tasks.errors import DataError, MissingInput
from trainers.common.state import normalise_features

from ...conftest import tiny_params


def test_normalisation_is_fitted_on_train_only(built):
    fs = feature_set.load(built.dirs.features)
    lo, hi = fs.splits["train"]
    z = normalise_features(fs.features, fs.mean, fs.std)
    train = z[lo : hi + 1]
    assert np.abs(train.mean(axis=0)).max() < 1e-4
    later = fs.features[hi + 1 :]
    assert not np.allclose(fs.mean, later.mean(axis=0))  # the stats did not see later bars


def test_features_have_no_look_ahead(built, tmp_path):
    """Perturbing every bar after t leaves every feature at or before t bit-identical."""
    bars, _ = read_parquet(built.dirs.validated / VALIDATED)
    warm = built.features.warmup

    def build(frame: pd.DataFrame, name: str) -> np.ndarray:
        params = tiny_params(tmp_path / name)
        write_parquet(frame, params.dirs.validated / VALIDATED, "1d")
        return np.asarray(features.build(params, mkdir(tmp_path / name / "out")).features)

    base = build(bars, "base")
    ts = np.sort(bars["ts"].unique())
    rng = np.random.default_rng(0)
    for t in rng.integers(130, len(ts) - 5, size=3):
        later = bars["ts"] > ts[t]
        shaken = bars.copy()
        factor = rng.uniform(0.5, 1.5, later.sum())
        for column in ("open", "high", "low", "close"):
            shaken.loc[later, column] *= factor
        shaken.loc[later, "volume"] *= 3
        moved = build(shaken, f"t{t}")
        np.testing.assert_array_equal(moved[: t + 1 - warm], base[: t + 1 - warm])
        assert not np.array_equal(moved[t + 1 - warm :], base[t + 1 - warm :], equal_nan=True)


def mkdir(path: Path) -> Path:
    path.mkdir(parents=True)
    return path


def test_missing_input_and_empty_split_are_one_line_errors(tiny):
    with pytest.raises(MissingInput, match="run `podracer validate` first"):
        features.features(tiny)
    ingest(tiny)
    validate(tiny)
    late_end = tiny.features.model_copy(update={"val_end": pd.Timestamp("2030-01-01").date()})
    late = tiny.model_copy(update={"features": late_end})
    with pytest.raises(DataError, match="the test split has 0 bars"):
        features.features(late)
    assert not tiny.dirs.features.exists()  # nothing half-written


def test_a_validated_set_from_other_raw_data_is_refused_naming_both_versions(tiny):
    """A new ingest and no validation (or a failed or killed one): the validated file records
    the data version it was validated from, and features refuses it."""
    old = ingest(tiny).data_version
    validate(tiny)
    raw = tiny.dirs.raw / "SYN001.parquet"
    frame = pd.read_parquet(raw)
    frame.loc[3, "volume"] += 1.0
    frame.to_parquet(raw)  # new raw data, not validated
    new = current_version(tiny)
    path = tiny.dirs.validated / VALIDATED
    with pytest.raises(MissingInput) as err:
        features.features(tiny)
    assert str(err.value) == (f"{path}: validated from data version {old}, but {tiny.dirs.raw} now holds data "
                              f"version {new}; run `podracer validate`")
    bars, freq = read_parquet(path)
    write_parquet(bars, path, freq or "1d")  # a validated file that records no version, beside raw files
    with pytest.raises(MissingInput, match=r"validated from data version \(not recorded\), but"):
        features.features(tiny)
    assert not tiny.dirs.features.exists()
    validate(tiny)
    assert features.features(tiny).bars > 0


def test_new_bars_are_appended_to_the_stored_rows_and_equal_a_full_recompute(built_copy, tmp_path):
    params = built_copy
    before = feature_set.load(params.dirs.features)
    stored = {a: np.array(getattr(before, a)) for a in feature_set.ARRAYS}
    simulate(params, 3)
    validate(params)
    result = features.features(params)
    fs = feature_set.load(params.dirs.features)
    full = features.build(params, mkdir(tmp_path / "full"))  # everything recomputed from the validated bars
    assert result.appended == 3 and len(fs.timestamps) == len(stored["timestamps"]) + 3 == result.bars
    for name in feature_set.ARRAYS:
        assert np.array_equal(getattr(fs, name), getattr(full, name)), name  # bit for bit
        assert np.array_equal(getattr(fs, name)[: len(stored[name])], stored[name]), name
    assert np.array_equal(fs.mean, before.mean) and np.array_equal(fs.std, before.std)  # train-only stats kept
    assert fs.splits["train"] == before.splits["train"] and fs.splits["test"][1] == before.splits["test"][1] + 3
    assert features.features(params).appended == 0  # nothing new: nothing appended


def test_a_revised_history_is_replaced_whole_and_counts_every_bar(built_copy, tmp_path, caplog):
    params = built_copy
    old = feature_set.load(params.dirs.features)
    revised = mkdir(tmp_path / "revised")
    feature_set.save(feature_set.FeatureSet(**{**old.__dict__, "prices": np.array(old.prices) * 1.01}), revised)
    bars = len(old.timestamps)
    assert features.appended_bars(None, params.dirs.features) == bars  # no stored set
    assert features.appended_bars(params.dirs.features, params.dirs.features) == 0
    with caplog.at_level("WARNING", logger="podracer.features"):
        assert features.appended_bars(revised, params.dirs.features) == bars
    assert "revised history" in caplog.text
