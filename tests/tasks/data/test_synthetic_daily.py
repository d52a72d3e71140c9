"""The daily market's ``martingale`` setting (docs/data.md, "The martingale market"): the true
null where a gate's size is measured (docs/operations.md, the gate), and the default market left as
it was, bit for bit."""

from datetime import date

import numpy as np
import pytest
from pydantic import ValidationError
from scipy import integrate, stats

from tasks.calendar import nyse_schedule
from tasks.config_data import DataParams
from tasks.data.synthetic import synthetic_bars
from tasks.data.synthetic_daily import (
    JUMP_MEAN,
    JUMP_P,
    MARTINGALE_CLIP,
    DailyMarket,
    clipped_t_log_mgf,
    daily_market,
)
from tasks.errors import ConfigError

TOLERANCE = 4.0
"""|t| a zero mean may reach: the statistics below are deterministic (fixed seeds), and 4 keeps
a true zero from failing by chance across seeds while the planted bugs reach t 20–300."""


def _reference_market(symbols: int, start: date, end: date, signal: float, seed: int) -> dict[str, np.ndarray]:
    """A frozen copy of the default generator as it was before ``martingale`` (constants as
    literals), so any change to the default market fails :func:`test_the_default_market_is_unchanged_bit_for_bit`."""
    rng = np.random.default_rng(seed)
    steps, n = len(nyse_schedule(start, end)), symbols

    def garch(width: int, daily_vol: np.ndarray, dof: float = 5.0) -> tuple[np.ndarray, np.ndarray]:
        alpha, beta_ = 0.08, 0.90
        omega = daily_vol**2 * (1.0 - alpha - beta_)
        z = rng.standard_t(dof, size=(steps, width)) / np.sqrt(dof / (dof - 2.0))
        var = daily_vol**2
        out, sd = np.empty((steps, width)), np.empty((steps, width))
        for t in range(steps):
            sd[t] = np.sqrt(var)
            out[t] = sd[t] * z[t]
            var = omega + alpha * out[t] ** 2 + beta_ * var
        return out, sd

    beta = rng.uniform(0.6, 1.4, n)
    sector = np.arange(n) % 3
    sector_load = rng.uniform(0.3, 0.8, n)
    idio_vol = rng.uniform(0.010, 0.022, n)
    market, market_sd = garch(1, np.array([0.010]))
    sectors, sector_sd = garch(3, np.full(3, 0.006))
    idio, idio_sd = garch(n, idio_vol)
    jumps = (rng.random((steps, n)) < 0.004) * rng.normal(-0.01, 0.06, (steps, n))
    drift = np.empty((steps, n))
    level = rng.standard_normal(n)
    for t in range(steps):
        drift[t] = level
        level = 0.97 * level + np.sqrt(1.0 - 0.97**2) * rng.standard_normal(n)
    expected_drift = signal * 0.1 * idio_vol * drift
    log_ret = 0.07 / 252 + beta * market + sector_load * sectors[:, sector] + idio + jumps + expected_drift
    overnight = 0.3 * log_ret + 0.2 * idio_vol * rng.standard_normal((steps, n))
    close = rng.lognormal(np.log(60.0), 0.7, n) * np.exp(np.cumsum(log_ret, axis=0))
    prev_close = np.vstack([close[0] / np.exp(log_ret[0]), close[:-1]])
    open_ = prev_close * np.exp(overnight)
    wick = np.abs(rng.normal(0.0, 0.4, (2, steps, n))) * idio_vol
    high = np.maximum(open_, close) * np.exp(wick[0])
    low = np.minimum(open_, close) * np.exp(-wick[1])
    base_volume = rng.lognormal(np.log(2e6), 1.0, n)
    volume = np.round(base_volume * np.exp(8.0 * np.abs(log_ret) + 0.3 * rng.standard_normal((steps, n))))
    return {"open": open_, "high": high, "low": low, "close": close, "volume": volume.astype(np.float64),
            "jumps": jumps, "beta": beta, "sector": sector, "sector_load": sector_load, "market_sd": market_sd[:, 0],
            "sector_sd": sector_sd, "idio_sd": idio_sd, "drift": expected_drift,
            "factor_returns": np.hstack([market, sectors]), "idio_vol": idio_vol}


@pytest.mark.parametrize("signal, seed", [(1.0, 7), (0.0, 500)])
def test_the_default_market_is_unchanged_bit_for_bit(signal: float, seed: int):
    args = (6, date(2019, 1, 1), date(2021, 12, 31), signal, seed)
    market = daily_market(*args)
    for name, expected in _reference_market(*args).items():
        np.testing.assert_array_equal(getattr(market, name), expected, err_msg=name, strict=True)
    np.testing.assert_array_equal(daily_market(*args, martingale=False).close, market.close)


def t_stat(x: np.ndarray) -> float:
    """The mean's t statistic over rows (``x`` a martingale difference sequence in time)."""
    return float(x.mean() / (x.std(ddof=1) / np.sqrt(len(x))))


@pytest.fixture(scope="module")
def long_paths() -> dict[bool, DailyMarket]:
    """30 stocks × 40 years of sessions (10,081 bars) at signal 0, with and without ``martingale``."""
    return {flag: daily_market(30, date(1984, 1, 1), date(2023, 12, 31), 0.0, 11, martingale=flag)
            for flag in (True, False)}


def surprises(m: DailyMarket, martingale: bool) -> dict[str, np.ndarray]:
    """Each leg's simple return less its zero-mean shocks, ``[bars, n]`` from bar 1.

    A control variate: the shocks (kept by the generator, never derived from the prices) have a
    known mean, so ``E[return − (shock − E shock) | past]`` is 0 exactly when the price is a
    martingale, and its noise is second order in the shock. It sees a mean of 1e-6 a day,
    where a raw mean needs centuries of bars to see 1e-4.
    """
    f = m.factor_returns
    intraday = (m.beta * f[:, :1] + m.sector_load * f[:, 1 + m.sector] + m.idio)[1:]
    gap = (m.jumps + m.gap_noise)[1:] - JUMP_P * JUMP_MEAN  # the gap's shocks, centred
    jumps = m.jumps[1:] - JUMP_P * JUMP_MEAN
    close, open_ = m.close, m.open
    return {
        "close to close": close[1:] / close[:-1] - 1 - (intraday + (gap if martingale else jumps)),
        "close to open": open_[1:] / close[:-1] - 1 - gap,
        "open to close": close[1:] / open_[1:] - 1 - intraday,
    }


def test_the_stored_shocks_are_the_ones_in_the_prices(long_paths: dict[bool, DailyMarket]):
    m = long_paths[True]
    f = m.factor_returns
    shocks = m.beta * f[:, :1] + m.sector_load * f[:, 1 + m.sector] + m.idio + m.jumps + m.gap_noise
    np.testing.assert_allclose(np.diff(np.log(m.close), axis=0), (m.log_mean + shocks)[1:], rtol=0, atol=1e-12)
    assert (m.drift == 0).all() and np.abs(m.factor_returns / np.c_[m.market_sd, m.sector_sd]).max() <= (
        MARTINGALE_CLIP * (1 + 1e-12))


def test_every_stock_and_buy_and_hold_earn_nothing_on_a_martingale_market(long_paths: dict[bool, DailyMarket]):
    m = long_paths[True]
    simple = m.close[1:] / m.close[:-1] - 1
    assert max(abs(t_stat(simple[:, i])) for i in range(simple.shape[1])) < TOLERANCE
    held = (m.close / m.close[0]).mean(axis=1)  # equal weight, bought once
    assert abs(t_stat(held[1:] / held[:-1] - 1)) < TOLERANCE
    for leg, surprise in surprises(m, martingale=True).items():
        assert abs(t_stat(surprise.mean(axis=1))) < TOLERANCE, leg
    # The open predicts nothing about the close: E[(open/close₋₁ − 1)(close/open − 1)] = 0.
    gap, intraday = m.open[1:] / m.close[:-1] - 1, m.close[1:] / m.open[1:] - 1
    assert abs(t_stat((gap * intraday).mean(axis=1))) < TOLERANCE


def test_the_default_null_market_is_no_martingale(long_paths: dict[bool, DailyMarket]):
    """What makes the statistics above able to fail: at signal 0 without the setting, prices
    rise (MARKET_MU and ½σ² of convexity) and the gap, 0.3 of the day's move, predicts the rest."""
    m = long_paths[False]
    assert t_stat(surprises(m, martingale=False)["close to close"].mean(axis=1)) > 20
    gap, intraday = m.open[1:] / m.close[:-1] - 1, m.close[1:] / m.open[1:] - 1
    assert t_stat((gap * intraday).mean(axis=1)) > 20


def volatility_timed(m: DailyMarket) -> np.ndarray:
    """``[bars − 1, n]`` weights ∝ 1 / each stock's EWMA (λ 0.94) variance of its past log
    returns, summing to 1: a low-volatility tilt that also times volatility, known at each close."""
    log_ret = np.diff(np.log(m.close), axis=0)
    var, level = np.empty_like(log_ret), log_ret[:20].var(axis=0)
    for t in range(len(log_ret)):
        var[t] = level  # from returns before bar t + 1 only
        level = 0.94 * level + 0.06 * log_ret[t] ** 2
    weights = 1.0 / var
    return weights / weights.sum(axis=1, keepdims=True)


def test_volatility_timing_earns_nothing_on_a_martingale_market(long_paths: dict[bool, DailyMarket]):
    for flag in (True, False):
        m = long_paths[flag]
        weights = volatility_timed(m)
        surprise = (weights * surprises(m, flag)["close to close"]).sum(axis=1)
        if flag:
            assert abs(t_stat((weights * (m.close[1:] / m.close[:-1] - 1)).sum(axis=1))) < TOLERANCE
            assert abs(t_stat(surprise)) < TOLERANCE
        else:
            assert t_stat(surprise) > 20


@pytest.mark.parametrize("a", [1e-3, 0.02, 0.1, 0.5])
def test_the_clipped_t_log_mgf_is_exact(a: float):
    scale = np.sqrt(5 / 3)
    inner = integrate.quad(lambda z: np.expm1(a * z) * scale * stats.t.pdf(z * scale, 5), -MARTINGALE_CLIP,
                           MARTINGALE_CLIP, epsabs=1e-16, epsrel=1e-12, limit=500, points=[0.0])[0]
    tail = stats.t.sf(MARTINGALE_CLIP * scale, 5)
    expected = np.log1p(inner + tail * (np.expm1(a * MARTINGALE_CLIP) + np.expm1(-a * MARTINGALE_CLIP)))
    assert clipped_t_log_mgf(np.array([a]))[0] == pytest.approx(expected, rel=1e-9)


def test_martingale_needs_the_synthetic_daily_null():
    with pytest.raises(ConfigError, match="signal must be 0"):
        daily_market(3, date(2021, 1, 1), date(2021, 3, 1), 0.5, 1, martingale=True)
    with pytest.raises(ValidationError, match="martingale"):
        DataParams(martingale=True, signal=0.5)
    with pytest.raises(ValidationError, match="martingale"):
        DataParams(martingale=True, signal=0.0, freq="1min")
    with pytest.raises(ValidationError, match="martingale"):
        DataParams(martingale=True, signal=0.0, source="arch-demo")
    data = DataParams(martingale=True, signal=0.0)
    bars = synthetic_bars(3, date(2021, 1, 1), date(2021, 3, 1), 0.0, 1, martingale=True)
    assert np.array_equal(bars["close"].to_numpy().reshape(3, -1).T,
                          daily_market(3, date(2021, 1, 1), date(2021, 3, 1), 0.0, 1, martingale=True).close)
    assert "martingale" in data.model_dump() and "martingale" not in DataParams().model_dump()
