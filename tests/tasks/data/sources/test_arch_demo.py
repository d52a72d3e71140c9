"""The arch-demo source: the daily S&P 500 / NASDAQ Composite files shipped with ``arch``."""

from __future__ import annotations

from datetime import date

import numpy as np
import pandas as pd
import pytest

from tasks.calendar import nyse_sessions
from tasks.data.bars import COLUMNS, to_contract
from tasks.data.sources import Request, Source, SourceError
from tasks.data.sources.arch_demo import ArchDemoSource
from tasks.errors import DataError

SOURCE: Source = ArchDemoSource()  # satisfies the Source protocol (checked by type checkers)
SESSIONS_1999_2018 = 5031


def fetch(*symbols: str, start: date = date(1999, 1, 1), end: date = date(2018, 12, 31), freq: str = "1d"):
    return SOURCE.fetch(Request(tuple(symbols), start, end, freq))  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def everything() -> pd.DataFrame:
    return fetch("SPX", "COMP")


def test_full_history_follows_the_bars_contract(everything: pd.DataFrame):
    assert SOURCE.name == "arch-demo"
    assert tuple(everything.columns) == COLUMNS
    assert str(everything["ts"].dtype) == "datetime64[ns, UTC]"
    assert everything.groupby("symbol").size().to_dict() == {"COMP": SESSIONS_1999_2018, "SPX": SESSIONS_1999_2018}
    assert not everything.duplicated(["symbol", "ts"]).any()
    assert (everything["ts"] == everything["ts"].dt.normalize()).all()  # daily ts = date 00:00 UTC
    assert everything["ts"].min() == pd.Timestamp("1999-01-04", tz="UTC")
    assert everything["ts"].max() == pd.Timestamp("2018-12-31", tz="UTC")
    pd.testing.assert_frame_equal(to_contract(everything, "again"), everything)


def test_days_are_nyse_sessions(everything: pd.DataFrame):
    sessions = nyse_sessions(date(1999, 1, 1), date(2018, 12, 31))
    for _, bars in everything.groupby("symbol"):
        assert pd.DatetimeIndex(bars["ts"]).equals(sessions)


def test_prices_are_the_shipped_close_not_adj_close(everything: pd.DataFrame):
    import arch.data.nasdaq
    import arch.data.sp500

    for symbol, module in (("SPX", arch.data.sp500), ("COMP", arch.data.nasdaq)):
        raw = module.load()
        bars = everything[everything["symbol"] == symbol]
        for column in ("Open", "High", "Low", "Close", "Volume"):
            np.testing.assert_array_equal(bars[column.lower()].to_numpy(), raw[column].to_numpy(dtype=float))
        assert (raw["Adj Close"] == raw["Close"]).all()  # identical for these indices: the choice is documented


def test_shipped_data_is_passed_on_unrepaired(everything: pd.DataFrame):
    """Bad rows would be left for validation to quarantine; arch 8.0.0 ships none."""
    prices = everything[["open", "close"]]
    broken = (everything["high"] < prices.max(axis=1)) | (everything["low"] > prices.min(axis=1))
    assert int(broken.sum()) == 0
    zero_volume = everything[everything["volume"] == 0]
    assert [(s, str(ts.date())) for s, ts in zip(zero_volume["symbol"], zero_volume["ts"])] == [
        ("COMP", "2015-05-12"), ("COMP", "2018-01-09"),
    ]


def test_range_is_inclusive_and_symbols_filter():
    bars = fetch("SPX", start=date(2008, 9, 15), end=date(2008, 9, 19))
    assert bars["symbol"].unique().tolist() == ["SPX"]
    assert bars["ts"].dt.strftime("%m-%d").tolist() == ["09-15", "09-16", "09-17", "09-18", "09-19"]


def test_empty_symbols_mean_both_and_partial_overlap_returns_what_exists():
    bars = fetch(start=date(2018, 12, 27), end=date(2019, 3, 31))
    assert bars.groupby("symbol").size().to_dict() == {"COMP": 3, "SPX": 3}
    assert bars["symbol"].tolist() == sorted(bars["symbol"])


@pytest.mark.parametrize(
    ("request_args", "reason"),
    [
        ({"freq": "1min", "start": date(2018, 1, 2), "end": date(2018, 1, 5)}, "only daily bars"),
        ({"start": date(2019, 1, 1), "end": date(2019, 12, 31)}, "no rows in range"),
        ({"start": date(1998, 1, 1), "end": date(1999, 1, 3)}, "no rows in range"),
        ({"start": date(2010, 5, 1), "end": date(2010, 4, 1)}, "no rows in range"),
    ],
)
def test_requests_it_cannot_serve_raise_source_error(request_args: dict, reason: str):
    with pytest.raises(SourceError, match=reason) as info:
        fetch("SPX", **request_args)
    assert isinstance(info.value, DataError) and info.value.source == "arch-demo"
    assert "\n" not in str(info.value)


def test_unknown_symbol_is_named():
    with pytest.raises(SourceError, match=r"unknown symbol\(s\) AAPL \(available: SPX, COMP\)"):
        fetch("SPX", "AAPL")
