"""New minute bars arriving (``podracer simulate --bars N`` at ``data.freq: 1min``): the next
NYSE minutes, across a half day's early close and a weekend, continuous from the last real
close, deterministic, recorded so that ingest reuses them."""

import json
import logging

import pandas as pd
import pytest

from standins.tiny import tiny_params
from tasks.caching import current_version
from tasks.data.arrivals import Arrival, _future_seed, future_bars, simulate
from tasks.data.bars import read_parquet
from tasks.data.ingest import MANIFEST, ingest
from tasks.data.synthetic_daily import daily_market

MINUTES = ["data.freq=1min", "data.symbols=3", "data.start=2023-11-20", "data.end=2023-11-24"]
"""Thanksgiving week: closed Thursday 23rd, a half day on Friday 24th (13:00 New York, 18:00 UTC)."""
LAST = pd.Timestamp("2023-11-24 17:59", tz="UTC")
"""The half day's last minute bar; the next session opens Monday 27th at 9:30 New York, 14:30 UTC."""
SYMBOLS = ["SYN000", "SYN001", "SYN002"]


@pytest.fixture
def ingested(tmp_path):
    params = tiny_params(tmp_path, *MINUTES)
    return params, ingest(params)


def _raw(params) -> pd.DataFrame:
    return pd.concat([read_parquet(params.dirs.raw / f"{s}.parquet")[0] for s in SYMBOLS], ignore_index=True)


def _minutes(first: str, count: int) -> list[pd.Timestamp]:
    return list(pd.date_range(first, periods=count, freq="min", tz="UTC"))


def test_minutes_are_appended_on_the_nyse_minute_calendar_across_sessions(ingested):
    params, result = ingested
    before = _raw(params)
    assert before.groupby("symbol")["ts"].max().eq(LAST).all()  # the half day ends at 18:00 UTC
    arrival = simulate(params, 3)  # over the weekend, to Monday's open
    assert arrival == Arrival(9, 1, "2023-11-27T14:30:00+00:00", "2023-11-27T14:32:00+00:00",
                              current_version(params), result.data_version)
    second = simulate(params, 400)  # Monday's other 387 minutes, then Tuesday's first 13
    after = _raw(params)
    assert (second.bars, second.sessions, second.last) == (1200, 2, "2023-11-28T14:42:00+00:00")
    expected = _minutes("2023-11-27 14:30", 390) + _minutes("2023-11-28 14:30", 13)
    for symbol in SYMBOLS:
        old, new = before[before.symbol == symbol], after[after.symbol == symbol]
        pd.testing.assert_frame_equal(new.iloc[: len(old)].reset_index(drop=True), old.reset_index(drop=True))
        assert list(new["ts"].iloc[len(old):]) == expected
    manifest = json.loads((params.dirs.raw / MANIFEST).read_text())
    assert manifest["rows"] == len(after) == len(before) + 3 * 403
    assert [(a["first"], a["last"], a["bars"]) for a in manifest["appended"]] == [
        ("2023-11-27T14:30:00+00:00", "2023-11-27T14:32:00+00:00", 9),
        ("2023-11-27T14:33:00+00:00", "2023-11-28T14:42:00+00:00", 1200)]


def test_the_new_minutes_continue_from_the_last_real_close(ingested):
    params, _ = ingested
    last = _raw(params).groupby("symbol")["close"].last()
    future = future_bars(params, 3).groupby("symbol")
    # Across the weekend the first new bar opens at the generated overnight gap from the real close:
    # the generated half day's last minute closes at its daily close (tasks/data/synthetic_intraday.py).
    seed = _future_seed(params.data.seed, LAST)
    market = daily_market(3, LAST.date(), pd.Timestamp("2023-11-27").date(), params.data.signal, seed)
    assert list(future.first()["open"] / last) == pytest.approx(list(market.open[1] / market.close[0]), rel=1e-12)
    simulate(params, 3)
    within = _raw(params).groupby("symbol")["close"].last()
    nxt = future_bars(params, 2)  # inside Monday's session: the next minute opens at the last close
    assert list(nxt.groupby("symbol").first()["open"]) == pytest.approx(list(within), rel=1e-12)
    prices = nxt[["open", "high", "low", "close"]]
    assert (prices > 0).all().all() and (nxt["volume"] >= 0).all()
    assert (nxt["high"] >= prices[["open", "close"]].max(axis=1)).all()
    assert (nxt["low"] <= prices[["open", "close"]].min(axis=1)).all()


def test_the_minute_future_is_deterministic_and_depends_on_the_seed(tmp_path):
    frames = []
    for name in ("a", "b"):
        params = tiny_params(tmp_path / name, *MINUTES)
        ingest(params)
        simulate(params, 5)
        frames.append(_raw(params))
    pd.testing.assert_frame_equal(frames[0], frames[1], check_exact=True)
    other = future_bars(tiny_params(tmp_path / "a", *MINUTES, "data.seed=8"), 5)
    same = future_bars(tiny_params(tmp_path / "a", *MINUTES), 5)
    assert list(other["ts"]) == list(same["ts"]) and not (other["close"] == same["close"]).any()


def test_an_ingest_after_a_minute_arrival_reuses_the_files_without_warning(ingested, caplog):
    params, _ = ingested
    arrival = simulate(params, 7)
    with caplog.at_level(logging.WARNING, logger="podracer.ingest"):
        again = ingest(params)
    assert again.reused and again.data_version == arrival.data_version and again.rows == len(_raw(params))
    assert "changed since ingest" not in caplog.text
