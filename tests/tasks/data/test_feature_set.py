"""The features contract (``tasks/data/feature_set.py``): the saved set's shapes and splits, and the env windows."""

import numpy as np
import pandas as pd

from tasks.data import feature_set
from tasks.data.splits import SPLIT_NAMES


def test_feature_set_follows_the_contract(built):
    fs = feature_set.load(built.dirs.features)
    t, n, k = fs.features.shape
    assert (n, k) == (4, 10) and fs.prices.shape == fs.opens.shape == (t, n)
    assert fs.features.dtype == np.float32 and np.isfinite(fs.features).all()
    assert fs.feature_names == list(built.features.indicators)
    (a, b), (c, d), (e, f) = (fs.splits[s] for s in SPLIT_NAMES)
    assert a == 0 and b + 1 == c and d + 1 == e and f == t - 1
    assert str(fs.timestamps[b])[:10] <= "2021-03-31" < str(fs.timestamps[c])[:10]


SESSIONS = pd.DatetimeIndex(["2021-12-29", "2021-12-30", "2021-12-31", "2022-01-03", "2022-01-04", "2022-01-05"],
                            tz="UTC")


def test_an_env_window_starts_at_the_bar_before_its_split():
    fs = feature_set.FeatureSet(
        opens=np.ones((6, 1)), prices=np.ones((6, 1)), features=np.zeros((6, 1, 1), np.float32),
        timestamps=SESSIONS.tz_localize(None).to_numpy(), symbols=["A"], feature_names=["macd"],
        splits={"train": (0, 1), "validation": (2, 3), "test": (4, 5)}, mean=np.zeros((1, 1)), std=np.ones((1, 1)),
            tradable=np.ones((6, 1), bool))
    # The first fill lands on the split's first open; every marked close lies inside the split.
    assert (fs.window("train"), fs.window("validation"), fs.window("test")) == ((0, 1), (1, 3), (3, 5))
