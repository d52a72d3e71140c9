from datetime import date

import numpy as np
import pandas as pd

from tasks.bars import COLUMNS
from tasks.synthetic import synthetic_bars


def returns(bars: pd.DataFrame) -> pd.DataFrame:
    wide = bars.pivot(index="ts", columns="symbol", values="close")
    return np.log(wide).diff().dropna()


def test_bars_follow_the_contract_and_are_seeded():
    a = synthetic_bars(5, date(2020, 1, 1), date(2020, 12, 31), signal=1.0, seed=3)
    b = synthetic_bars(5, date(2020, 1, 1), date(2020, 12, 31), signal=1.0, seed=3)
    pd.testing.assert_frame_equal(a, b)
    assert tuple(a.columns) == COLUMNS
    assert str(a["ts"].dtype) == "datetime64[ns, UTC]"
    assert not a.duplicated(["symbol", "ts"]).any()
    assert (a["high"] >= a[["open", "close"]].max(axis=1)).all()
    assert (a["low"] <= a[["open", "close"]].min(axis=1)).all()
    assert (a[["open", "high", "low", "close"]] > 0).all().all()
    assert a.groupby("symbol").size().nunique() == 1


def test_calendar_is_nyse_sessions():
    bars = synthetic_bars(1, date(2021, 1, 1), date(2021, 12, 31), signal=0.0, seed=0)
    days = pd.DatetimeIndex(bars["ts"]).tz_convert(None).normalize()
    assert len(days) == 252  # NYSE sessions in 2021
    assert pd.Timestamp("2021-07-05") not in days  # Independence Day observed
    assert pd.Timestamp("2021-11-26") in days  # day after Thanksgiving (half day) trades


def test_assets_are_correlated_and_fat_tailed():
    r = returns(synthetic_bars(10, date(2016, 1, 1), date(2020, 12, 31), signal=0.0, seed=1))
    corr = r.corr().to_numpy()
    assert corr[np.triu_indices(10, 1)].mean() > 0.2
    kurtosis = ((r - r.mean()) ** 4).mean() / r.var() ** 2
    assert (kurtosis > 3.5).all()


def test_signal_adds_predictable_momentum():
    """With signal > 0 trailing returns predict the next return; at 0 they do not."""

    def predictability(signal: float) -> float:
        r = returns(synthetic_bars(30, date(2010, 1, 1), date(2020, 12, 31), signal=signal, seed=2))
        trailing = r.rolling(20).mean().shift(1)
        both = pd.concat([trailing.stack(), r.stack()], axis=1).dropna()
        return float(both.corr().iloc[0, 1])

    assert predictability(3.0) > 0.04
    assert abs(predictability(0.0)) < 0.02
