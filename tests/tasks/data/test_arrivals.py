"""New bars arriving (``podracer simulate``): the next NYSE sessions, continuous, deterministic,
recorded so that ingest reuses them and the data version moves."""

import json
import logging
from datetime import date

import numpy as np
import pandas as pd
import pytest

from standins.tiny import tiny_params
from tasks.caching import current_version
from tasks.data.arrivals import (
    ARRIVED,
    TURN_LOOKBACK,
    Arrival,
    _future_seed,
    append_bars,
    emit_arrival,
    future_bars,
    polled_arrival,
    simulate,
    turned,
    unprocessed,
)
from tasks.data.bars import PRICE_COLUMNS, read_parquet
from tasks.data.ingest import MANIFEST, ingest
from tasks.data.synthetic_daily import daily_market
from tasks.errors import ConfigError, DataError
from tasks.storage import file_digest

END = "data.end=2021-07-02"
"""A Friday before Independence Day (observed Monday 2021-07-05): the next sessions skip both."""
NEXT = ["2021-07-06", "2021-07-07", "2021-07-08"]
SYMBOLS = [f"SYN00{i}" for i in range(4)]


def _params(root, *overrides):
    return tiny_params(root, END, *overrides)


@pytest.fixture
def ingested(tmp_path):
    params = _params(tmp_path)
    return params, ingest(params)


def _raw(params) -> pd.DataFrame:
    return pd.concat([read_parquet(params.dirs.raw / f"{s}.parquet")[0] for s in SYMBOLS], ignore_index=True)


def _digests(params) -> dict[str, str]:
    return {p.name: file_digest(p) for p in sorted(params.dirs.raw.iterdir())}


def test_simulate_appends_the_next_nyse_sessions_to_every_symbol(ingested):
    params, result = ingested
    before = _raw(params)
    arrival = simulate(params, 3)
    after = _raw(params)
    assert arrival == Arrival(12, 3, NEXT[0], NEXT[-1], current_version(params), result.data_version)
    assert arrival.data_version != arrival.previous_version
    for symbol in SYMBOLS:
        old, new = before[before.symbol == symbol], after[after.symbol == symbol]
        assert len(new) == len(old) + 3
        pd.testing.assert_frame_equal(new.iloc[:-3].reset_index(drop=True), old.reset_index(drop=True))
        assert [str(ts.date()) for ts in new["ts"].iloc[-3:]] == NEXT
        assert str(new["ts"].iloc[-1].tz) == "UTC" and new["ts"].iloc[-1] == pd.Timestamp(NEXT[-1], tz="UTC")
    manifest = json.loads((params.dirs.raw / MANIFEST).read_text())
    assert manifest["rows"] == len(after)
    assert manifest["appended"] == [{"first": NEXT[0], "last": NEXT[-1], "bars": 12,
                                     "data_version": arrival.data_version}]


def test_the_new_path_continues_from_the_last_close(ingested):
    params, _ = ingested
    last = _raw(params).groupby("symbol")["close"].last()
    future = future_bars(params, 3)
    first = future.groupby("symbol").first()
    gross = first["close"] / last
    assert gross.between(0.5, 2.0).all()
    seed = _future_seed(params.data.seed, date(2021, 7, 2))
    market = daily_market(4, date(2021, 7, 2), date(2021, 7, 8), params.data.signal, seed)
    assert list(gross) == pytest.approx(list(market.close[1] / market.close[0]), rel=1e-12)
    assert list(first["open"] / last) == pytest.approx(list(market.open[1] / market.close[0]), rel=1e-12)
    prices = future[["open", "high", "low", "close"]]
    assert (prices > 0).all().all() and (future["volume"] >= 0).all()
    assert (future["high"] >= prices[["open", "close"]].max(axis=1)).all()
    assert (future["low"] <= prices[["open", "close"]].min(axis=1)).all()
    assert list(future.columns) == ["symbol", "ts", "open", "high", "low", "close", "volume"]


def test_the_future_is_deterministic_and_depends_on_the_seed(tmp_path):
    frames, versions = [], []
    for name in ("a", "b"):
        params = _params(tmp_path / name)
        ingest(params)
        versions.append(simulate(params, 3).data_version)
        frames.append(_raw(params))
    pd.testing.assert_frame_equal(frames[0], frames[1], check_exact=True)
    assert versions[0] == versions[1]
    # The same stored market under another data.seed grows another future.
    other = future_bars(_params(tmp_path / "a", "data.seed=8"), 3)
    same = future_bars(_params(tmp_path / "a"), 3)
    assert list(other["ts"]) == list(same["ts"]) and not (other["close"] == same["close"]).any()


def test_a_following_ingest_reuses_the_grown_files_without_warning(ingested, caplog):
    params, _ = ingested
    arrival = simulate(params, 2)
    with caplog.at_level(logging.WARNING, logger="podracer.ingest"):
        again = ingest(params)
    assert again.reused and again.data_version == arrival.data_version
    assert again.rows == len(_raw(params))
    assert "changed since ingest" not in caplog.text
    second = simulate(params, 1)  # growth continues from the new last bar
    assert second.previous_version == arrival.data_version and second.first == second.last == "2021-07-08"


def test_an_overlapping_arrival_is_refused_and_writes_nothing(ingested):
    params, _ = ingested
    before = _digests(params)
    bars = future_bars(params, 2)
    bars.loc[bars.symbol == "SYN002", "ts"] -= pd.Timedelta(days=4)  # 2021-07-02 and 07-03
    with pytest.raises(DataError, match="arrival for SYN002 at 2021-07-02 overlaps the stored bars"
                                        r" \(last 2021-07-02\)"):
        append_bars(params, bars)
    assert _digests(params) == before


@pytest.mark.parametrize(("edit", "expected"), [
    (lambda b: b.assign(symbol=b.symbol.replace("SYN003", "ZZZ")), "ZZZ"),
    (lambda b: b[~((b.symbol == "SYN001") & (b.ts == b.ts.max()))], "SYN001"),
])
def test_an_unknown_symbol_or_a_ragged_arrival_is_refused(ingested, edit, expected):
    params, _ = ingested
    before = _digests(params)
    with pytest.raises(DataError, match=expected):
        append_bars(params, edit(future_bars(params, 2)))
    assert _digests(params) == before


def test_simulate_works_on_the_embedded_market_only(tmp_path):
    with pytest.raises(ConfigError, match="embedded market"):
        simulate(_params(tmp_path, "data.source=arch-demo"), 3)


def test_simulate_refuses_stored_bars_of_another_frequency(ingested):
    params, _ = ingested  # daily bars on disk
    with pytest.raises(DataError, match="data/raw: holds 1d bars but data.freq is 1min"):
        simulate(params.model_copy(update={"data": params.data.model_copy(update={"freq": "1min"})}), 3)


def test_simulate_needs_at_least_one_session(ingested):
    with pytest.raises(ConfigError, match="at least 1"):
        simulate(ingested[0], 0)


def test_the_arrival_event_is_emitted_only_with_a_prefect_server(ingested, monkeypatch):
    params, _ = ingested
    arrival = simulate(params, 1)
    sent = []
    monkeypatch.setattr("prefect.events.emit_event", lambda **kwargs: sent.append(kwargs))
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    assert emit_arrival(params, arrival) is False and sent == []
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:4200/api")
    assert emit_arrival(params, arrival) is True
    assert len(sent) == 1 and sent[0]["event"] == ARRIVED == "podracer.data.arrived"
    assert sent[0]["resource"]["prefect.resource.id"] == "podracer.dataset.synthetic"
    assert sent[0]["resource"]["prefect.resource.name"]
    assert sent[0]["payload"] == {"bars": 4, "sessions": 1, "first": "2021-07-06", "last": "2021-07-06",
                                  "data_version": arrival.data_version,
                                  "previous_version": arrival.previous_version, "source": "synthetic"}


def test_bars_no_cycle_finished_on_are_announced_again_only_after_something_was_processed(tiny):
    assert unprocessed("v2", "v1") == ("v2", "v1")  # a cycle crashed, failed, or its event was lost
    assert unprocessed("v2", "v2") is None  # caught up
    assert unprocessed("v1", None) is None  # nothing processed yet: the first champion is `podracer run`'s
    event = polled_arrival(tiny, "v2", "v1")
    assert event["event"] == ARRIVED and event["resource"]["prefect.resource.id"] == "podracer.dataset.synthetic"
    assert event["payload"] == {"data_version": "v2", "previous_version": "v1", "source": "synthetic", "via": "poll"}


def test_a_turn_reverses_each_symbols_trailing_trend_in_the_new_bars_by_hand():
    # steady trends: +1% and -0.5% log a bar, so each one's ewm_40 trend is exactly that
    closes = np.exp(np.arange(TURN_LOOKBACK)[:, None] * np.array([0.01, -0.005]))
    frame = pd.DataFrame({"symbol": ["A"] * 3 + ["B"] * 3, **{c: np.full(6, 100.0) for c in PRICE_COLUMNS}})
    out = turned(frame, closes)
    expected = 100.0 * np.exp(-np.r_[0.01 * np.arange(1, 4), -0.005 * np.arange(1, 4)])
    for c in PRICE_COLUMNS:
        np.testing.assert_allclose(out[c].to_numpy(), expected, rtol=1e-12)
    with pytest.raises(DataError, match="needs 121 stored bars"):
        turned(frame, closes[:50])


def test_simulate_turn_appends_the_same_bars_with_their_trends_turned_over(ingested):
    params, _ = ingested
    stored = _raw(params)
    closes = np.stack([stored[stored.symbol == s]["close"].to_numpy()[-TURN_LOOKBACK:] for s in SYMBOLS], axis=1)
    plain = future_bars(params, 3)
    expected = turned(plain, closes)
    assert not np.allclose(expected["close"].to_numpy(), plain["close"].to_numpy())
    simulate(params, 3, turn=True)
    after = _raw(params)
    new = pd.concat([after[after.symbol == s].iloc[-3:] for s in SYMBOLS], ignore_index=True)
    np.testing.assert_allclose(new["close"].to_numpy(), expected["close"].to_numpy(), rtol=1e-12)
