"""The default date splits: 75 / 12.5 / 12.5% of the history's calendar span."""

from __future__ import annotations

from datetime import date

import pandas as pd
import pytest

from tasks.config import DataParams, FeatureParams
from tasks.data.splits import default_split_dates, history_span, split_dates, split_indices


def test_the_embedded_markets_default_range_splits_where_the_default_run_always_did():
    # 2016-01-01..2023-12-31 is 2921 days: 0.75 x 2921 = 2190.75 -> 2191 days -> 2021-12-31;
    # 0.875 x 2921 = 2555.875 -> 2556 days -> 2022-12-31.
    assert default_split_dates(date(2016, 1, 1), date(2023, 12, 31)) == (date(2021, 12, 31), date(2022, 12, 31))


def test_fractions_round_to_the_nearest_day():
    # 8 days: 6 and 7 exactly; 9 days: 6.75 -> 7 and 7.875 -> 8
    assert default_split_dates(date(2020, 1, 1), date(2020, 1, 9)) == (date(2020, 1, 7), date(2020, 1, 8))
    assert default_split_dates(date(2020, 1, 1), date(2020, 1, 10)) == (date(2020, 1, 8), date(2020, 1, 9))


def test_arch_demo_gets_splits_inside_its_history():
    data = DataParams(source="arch-demo")
    assert history_span(data, pd.DatetimeIndex([])) == (date(1999, 1, 1), date(2018, 12, 31))
    # 7304 days: 5478 -> 2013-12-31; 6391 -> 2016-07-01
    assert default_split_dates(*history_span(data, pd.DatetimeIndex([]))) == (date(2013, 12, 31), date(2016, 7, 1))


def test_a_file_spans_its_first_to_last_bar_unless_dates_are_set():
    bars = pd.DatetimeIndex(["2021-01-04", "2021-06-30"], tz="UTC")
    assert history_span(DataParams(source="file", path="x.csv"), bars) == (date(2021, 1, 4), date(2021, 6, 30))
    assert history_span(DataParams(source="file", path="x.csv", start=date(2021, 1, 1)), bars) == (
        date(2021, 1, 1), date(2021, 6, 30))


def test_set_dates_win_over_the_fractions():
    cfg = FeatureParams(train_end=date(2021, 3, 1), val_end=date(2021, 4, 1))
    assert split_dates(cfg, (date(2016, 1, 1), date(2023, 12, 31)))[:2] == (date(2021, 3, 1), date(2021, 4, 1))


def test_default_splits_cut_the_bars_by_date():
    sessions = pd.DatetimeIndex(pd.date_range("2020-01-01", "2020-01-10", freq="D"), tz="UTC")
    cfg = FeatureParams(warmup=0, indicators=["macd"])
    # train ends 2020-01-08 (index 7), validation 2020-01-09 (8) ... needs >= 2 bars: widen by a day
    with pytest.raises(Exception, match="the validation split has 1 bars .* from the default 75/12.5/12.5%"):
        split_indices(sessions, cfg, (date(2020, 1, 1), date(2020, 1, 10)))
    assert split_indices(sessions, cfg, (date(2019, 12, 25), date(2020, 1, 10))) == {
        "train": (0, 5), "validation": (6, 7), "test": (8, 9)}  # 16 days: 12 -> 01-06, 14 -> 01-08


SESSIONS = pd.DatetimeIndex(["2021-12-29", "2021-12-30", "2021-12-31", "2022-01-03", "2022-01-04", "2022-01-05"],
                            tz="UTC")


def test_each_split_starts_the_bar_after_the_previous_split_ends():
    cfg = FeatureParams(train_end=pd.Timestamp("2021-12-30").date(), val_end=pd.Timestamp("2022-01-03").date(),
                                 warmup=0, indicators=["macd"])
    assert split_indices(SESSIONS, cfg) == {"train": (0, 1), "validation": (2, 3), "test": (4, 5)}
    minutes = pd.DatetimeIndex(["2021-12-30 20:58", "2021-12-30 20:59", "2021-12-31 14:30", "2022-01-03 20:59",
                                "2022-01-04 14:30", "2022-01-04 14:31"], tz="UTC")
    assert split_indices(minutes, cfg) == {"train": (0, 1), "validation": (2, 3), "test": (4, 5)}
