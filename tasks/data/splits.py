"""The date splits: train / validation / test bar ranges, and their defaults when the dates are unset.

A bar belongs to train up to ``features.train_end``, to validation up to ``features.val_end``,
and to test after (:func:`split_indices`, by the bar's UTC day, so minute bars split like days).

Set both dates, and they are used as they are. Leave both unset, and the history's calendar
span is cut **75 / 12.5 / 12.5**: train runs to the day at 75% of the span, validation to
the day at 87.5%, test to the end (each boundary rounded to the nearest day). The span is
``data.start..data.end`` (set by the user, or the source's default range, see
``tasks/config_data.py::SOURCE_RANGES``); a file imported without them spans its first to its
last bar.

Calendar days rather than bar counts, so the boundaries fall on dates a person can check
and stay put when new bars arrive after ``data.end`` (``podracer simulate``, the CT
cycle). For the embedded market's default range, 2016-01-01..2023-12-31, the rule gives
2021-12-31 and 2022-12-31: the dates the default run always used.
"""

from __future__ import annotations

import math
from datetime import date, timedelta

import numpy as np
import pandas as pd

from tasks.config import DataParams, FeatureParams
from tasks.errors import DataError

FRACTIONS = (0.75, 0.875)
"""Where train and validation end, as fractions of the span (test: the last 12.5%)."""
SPLIT_NAMES = ("train", "validation", "test")


def history_span(data: DataParams, timestamps: pd.DatetimeIndex) -> tuple[date, date]:
    """``data.start..data.end``; for a bound that is unset (a file), the first or last bar's day."""
    first = data.start or timestamps.min().date()
    last = data.end or timestamps.max().date()
    return first, last


def default_split_dates(first: date, last: date) -> tuple[date, date]:
    """``(train_end, val_end)`` at 75% and 87.5% of ``first..last``, rounded to the nearest day."""
    days = (last - first).days
    return tuple(first + timedelta(days=math.floor(f * days + 0.5)) for f in FRACTIONS)  # type: ignore[return-value]


def split_dates(cfg: FeatureParams, span: tuple[date, date] | None) -> tuple[date, date, str]:
    """``(train_end, val_end, how)``: the configured dates, or the defaults over ``span``;
    ``how`` says which, for messages."""
    if cfg.train_end is not None and cfg.val_end is not None:
        return cfg.train_end, cfg.val_end, "features.train_end / features.val_end"
    if span is None:
        raise ValueError("split_dates needs the history's span when train_end / val_end are unset")
    train_end, val_end = default_split_dates(*span)
    return train_end, val_end, f"the default 75/12.5/12.5% of {span[0]}..{span[1]}"


def split_indices(ts: pd.DatetimeIndex, cfg: FeatureParams,
                  span: tuple[date, date] | None = None) -> dict[str, tuple[int, int]]:
    """Inclusive bar-index ranges of train (≤ train_end), validation (≤ val_end) and test;
    unset dates default to 75/12.5/12.5% of the history's ``span`` (:func:`split_dates`)."""
    day = ts.tz_convert("UTC").tz_localize(None).normalize()
    train_day, val_day, how = split_dates(cfg, span)
    train_end, val_end = pd.Timestamp(train_day), pd.Timestamp(val_day)
    first = pd.Timestamp(cfg.train_start) if cfg.train_start is not None else day.min()
    masks = {"train": (day >= first) & (day <= train_end), "validation": (day > train_end) & (day <= val_end),
             "test": day > val_end}
    out = {}
    for name, mask in masks.items():
        idx = np.flatnonzero(mask)
        if idx.size < 2:
            raise DataError(f"features: the {name} split has {idx.size} bars after warm-up (needs >= 2) with "
                            f"train_end {train_day} and val_end {val_day} from {how}; "
                            "set features.train_end / features.val_end to fit the data's dates")
        out[name] = (int(idx[0]), int(idx[-1]))
    return out
