from datetime import date

import numpy as np
import pandas as pd
import pytest

from tasks.data.bars import COLUMNS, to_contract
from tasks.data.synthetic import filtered_drift, iter_synthetic_bars, latent_drift, synthetic_bars
from tasks.data.synthetic_daily import kalman_filter
from tasks.errors import ConfigError


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


# --- 1-minute bars (docs/data.md: NYSE sessions and half days, U-shapes, overnight gaps) ---

# Thanksgiving week 2021 (Fri 26 Nov closes at 13:00 New York = 18:00 UTC) and the DST
# switch in March 2021 (New York moved to UTC-4 on Sun 14 Mar).
HALF_DAY_WEEK = (date(2021, 11, 22), date(2021, 11, 30))
DST_SWITCH = (date(2021, 3, 10), date(2021, 3, 17))


def minute_bars(symbols: int, start: date, end: date, signal: float = 1.0, seed: int = 5) -> pd.DataFrame:
    return synthetic_bars(symbols, start, end, signal=signal, seed=seed, freq="1min")


def by_session(bars: pd.DataFrame) -> pd.DataFrame:
    """One row per (symbol, session): first/last bar start, bar count, daily OHLCV aggregate."""
    day = bars["ts"].dt.normalize().rename("day")
    return bars.groupby([bars["symbol"], day]).agg(
        first=("ts", "first"), last=("ts", "last"), bars=("ts", "size"), open=("open", "first"),
        high=("high", "max"), low=("low", "min"), close=("close", "last"), volume=("volume", "sum"),
    )


def with_minute_of_day(bars: pd.DataFrame) -> pd.DataFrame:
    """Bars of full (390-bar) sessions, with their minute of the session and |log return|."""
    day = bars["ts"].dt.normalize()
    keys = [bars["symbol"], day]
    out = bars.assign(minute=bars.groupby(keys).cumcount(), size=bars.groupby(keys)["ts"].transform("size"))
    out = out[out["size"] == 390]
    return out.assign(abs_ret=np.log(out["close"] / out["open"]).abs())


def test_minute_bars_follow_the_contract():
    bars = minute_bars(2, *HALF_DAY_WEEK)
    assert tuple(bars.columns) == COLUMNS
    assert str(bars["ts"].dtype) == "datetime64[ns, UTC]"
    assert bars["symbol"].tolist() == sorted(bars["symbol"])
    assert bars.groupby("symbol")["ts"].is_monotonic_increasing.all()
    assert not bars.duplicated(["symbol", "ts"]).any()
    assert (bars[["open", "high", "low", "close"]] > 0).all().all()
    assert (bars["volume"] >= 0).all() and bars.notna().all().all()
    pd.testing.assert_frame_equal(to_contract(bars, "synthetic"), bars, check_exact=True)


def test_minute_sessions_use_real_nyse_open_and_close_times():
    sessions = by_session(minute_bars(1, *HALF_DAY_WEEK)).droplevel("symbol")
    days = sessions.index.tz_convert(None)
    assert list(days.strftime("%m-%d")) == ["11-22", "11-23", "11-24", "11-26", "11-29", "11-30"]  # no Thanksgiving
    assert (sessions["first"].dt.strftime("%H:%M") == "14:30").all()  # 9:30 New York in winter
    half = sessions.loc[pd.Timestamp("2021-11-26", tz="UTC")]
    assert half["bars"] == 210 and half["last"] == pd.Timestamp("2021-11-26 17:59", tz="UTC")
    normal = sessions.drop(pd.Timestamp("2021-11-26", tz="UTC"))
    assert (normal["bars"] == 390).all()
    assert (normal["last"].dt.strftime("%H:%M") == "20:59").all()  # last bar starts at 15:59 New York


def test_minute_bar_starts_follow_daylight_saving_time():
    sessions = by_session(minute_bars(1, *DST_SWITCH)).droplevel("symbol")
    opens = sessions["first"].dt.strftime("%m-%d %H:%M").tolist()
    assert opens[:3] == ["03-10 14:30", "03-11 14:30", "03-12 14:30"]
    assert opens[3:] == ["03-15 13:30", "03-16 13:30", "03-17 13:30"]
    assert (sessions["bars"] == 390).all()
    assert (sessions["last"] - sessions["first"] == pd.Timedelta(minutes=389)).all()


def test_minute_ohlc_is_consistent_and_continuous_within_a_session():
    bars = minute_bars(3, date(2020, 2, 20), date(2020, 3, 20))  # a volatile month
    assert (bars["high"] >= bars[["open", "close"]].max(axis=1)).all()
    assert (bars["low"] <= bars[["open", "close"]].min(axis=1)).all()
    same_session = bars["ts"].diff() == pd.Timedelta(minutes=1)
    assert (bars["open"][same_session] == bars["close"].shift()[same_session]).all()


def test_minute_bars_aggregate_to_the_daily_bars():
    start, end = date(2021, 10, 1), date(2021, 11, 30)
    sessions = by_session(minute_bars(3, start, end, signal=2.0, seed=9))
    daily = synthetic_bars(3, start, end, signal=2.0, seed=9).set_index(["symbol", "ts"])
    np.testing.assert_array_equal(sessions["open"].to_numpy(), daily["open"].to_numpy())
    np.testing.assert_array_equal(sessions["close"].to_numpy(), daily["close"].to_numpy())
    bars_per_day = sessions["bars"].to_numpy()
    assert (np.abs(sessions["volume"].to_numpy() - daily["volume"].to_numpy()) <= bars_per_day / 2).all()
    assert (sessions["high"] >= sessions[["open", "close"]].max(axis=1)).all()


def test_volume_and_volatility_are_u_shaped_over_the_day():
    profile = with_minute_of_day(minute_bars(3, date(2021, 4, 1), date(2021, 5, 31))).groupby("minute")
    for column in ("volume", "abs_ret"):
        by_minute = profile[column].mean()
        opening, midday, closing = by_minute[:15].mean(), by_minute[165:225].mean(), by_minute[-15:].mean()
        assert opening > 2.0 * midday and closing > 1.5 * midday, column


def test_overnight_gaps_exceed_typical_minute_moves():
    bars = minute_bars(3, date(2021, 4, 1), date(2021, 6, 30))
    for _, one in bars.groupby("symbol"):
        sessions = by_session(one)
        gaps = np.abs(np.log(sessions["open"].to_numpy()[1:] / sessions["close"].to_numpy()[:-1]))
        minute_moves = np.abs(np.log(one["close"] / one["open"]))
        assert np.median(gaps) > 4.0 * np.median(minute_moves)


def test_minute_returns_are_correlated_across_stocks():
    bars = minute_bars(4, date(2021, 4, 1), date(2021, 4, 30))
    wide = np.log(bars.pivot(index="ts", columns="symbol", values="close")).diff()
    wide = wide[wide.index.to_series().diff() == pd.Timedelta(minutes=1)]  # intraday moves only
    corr = wide.corr().to_numpy()
    assert corr[np.triu_indices(4, 1)].mean() > 0.05


def test_minute_bars_are_bit_identical_and_chunked_equals_whole():
    args = (3, date(2020, 12, 15), date(2021, 1, 20), 1.0, 11)
    whole = synthetic_bars(*args, freq="1min")
    again = synthetic_bars(*args, freq="1min")
    pd.testing.assert_frame_equal(whole, again, check_exact=True)
    assert pd.util.hash_pandas_object(whole).equals(pd.util.hash_pandas_object(again))
    chunks = list(iter_synthetic_bars(*args, freq="1min"))
    assert len(chunks) == 3 * 2  # one per (symbol, year)
    assert all(chunk["symbol"].nunique() == 1 and chunk["ts"].dt.year.nunique() == 1 for chunk in chunks)
    pd.testing.assert_frame_equal(pd.concat(chunks, ignore_index=True), whole, check_exact=True)
    other_seed = synthetic_bars(*args[:4], 12, freq="1min")
    assert not np.array_equal(other_seed["close"].to_numpy(), whole["close"].to_numpy())


def test_daily_chunks_equal_the_daily_frame_bit_for_bit():
    args = (4, date(2019, 1, 1), date(2020, 6, 30), 0.5, 4)
    whole = synthetic_bars(*args)
    pd.testing.assert_frame_equal(whole, synthetic_bars(*args, freq="1d"), check_exact=True)
    chunks = list(iter_synthetic_bars(*args, freq="1d"))
    assert [c["symbol"].iloc[0] for c in chunks] == ["SYN000", "SYN001", "SYN002", "SYN003"]
    pd.testing.assert_frame_equal(pd.concat(chunks, ignore_index=True), whole, check_exact=True)


def test_bad_requests_are_one_line_errors():
    with pytest.raises(ConfigError, match="unknown freq"):
        synthetic_bars(2, date(2021, 1, 1), date(2021, 1, 31), 0.0, 0, freq="5min")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="no NYSE sessions"):
        synthetic_bars(2, date(2021, 7, 3), date(2021, 7, 5), 0.0, 0)  # a holiday weekend
    with pytest.raises(ConfigError, match="iter_synthetic_bars"):
        synthetic_bars(100, date(2021, 1, 1), date(2021, 12, 31), 0.0, 0, freq="1min", max_rows=1_000_000)


def test_the_oracles_drift_is_the_generators_and_never_reaches_the_bars():
    """latent_drift is the expected daily log return the generator adds; at signal 0 it is 0,
    and the bars (what ingest sees) carry no drift column."""
    args = (4, date(2020, 1, 1), date(2020, 12, 31))
    drift = latent_drift(*args, signal=1.0, seed=3)
    assert list(drift.columns) == ["SYN000", "SYN001", "SYN002", "SYN003"]
    assert drift.index.equals(pd.DatetimeIndex(synthetic_bars(*args, signal=1.0, seed=3)["ts"].unique()))
    assert drift.abs().to_numpy().max() > 0 and (latent_drift(*args, signal=0.0, seed=3).to_numpy() == 0).all()
    np.testing.assert_allclose(latent_drift(*args, signal=2.0, seed=3), 2 * drift)
    assert set(synthetic_bars(*args, signal=1.0, seed=3).columns) == set(COLUMNS)


def test_the_kalman_filter_by_hand():
    # phi 0.5, a 1, noise 1; no observation at t=0 (prior 0, var 1)
    # t=1: prior var 0.25 + 0.75 = 1, gain 1/2: mean 0 + 0.5 * 2 = 1, var 0.5
    # t=2: prior mean 0.5, var 0.125 + 0.75 = 0.875, gain 0.875/1.875: mean 0.5 - 0.5 * 0.875/1.875
    got = kalman_filter(np.array([[np.nan], [2.0], [0.0]]), np.array([1.0]), np.ones((3, 1)), phi=0.5)
    np.testing.assert_allclose(got[:, 0], [0.0, 1.0, 0.5 - 0.5 * 0.875 / 1.875])


def test_the_filtered_drift_ranks_closer_to_the_truth_than_momentum_and_is_zero_on_the_null_market():
    """The filter knows every parameter but the drift: its estimate correlates with the
    oracle's drift across stocks more than a 20-bar return does, and more than it would
    without the factor moves (a sign or factor slip fails this); with no drift it estimates none."""
    args = (30, date(2017, 1, 1), date(2019, 12, 31))
    truth, est = latent_drift(*args, signal=1.0, seed=3), filtered_drift(*args, signal=1.0, seed=3)
    assert est.index.equals(truth.index) and list(est.columns) == list(truth.columns)
    close = synthetic_bars(*args, signal=1.0, seed=3).pivot(index="ts", columns="symbol", values="close").to_numpy()
    momentum = np.log(close[20:] / close[:-20])

    def corr(x: np.ndarray, y: np.ndarray) -> float:
        x, y = x - x.mean(axis=1, keepdims=True), y - y.mean(axis=1, keepdims=True)  # across stocks
        return float((x * y).sum() / np.sqrt((x * x).sum() * (y * y).sum()))

    d, f = truth.to_numpy()[20:], est.to_numpy()[20:]
    # measured: filter 0.437, momentum 0.304; the filter without the factor moves 0.409
    assert corr(f, d) > 0.42 and corr(momentum, d) == pytest.approx(0.304, abs=0.001)
    assert (filtered_drift(*args, signal=0.0, seed=3).to_numpy() == 0).all()
