"""Trading performance metrics (finrl-podracer §5.2), from an account-value curve."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

METRICS = ("cumulative_return", "annual_return", "annual_volatility", "sharpe", "max_drawdown", "calmar")


def periods_per_year(freq: str) -> float:
    """Bars per year: 252 sessions of daily bars or of 390 one-minute bars."""
    return {"1d": 252.0, "1min": 252.0 * 390.0}[freq]


def sharpe(values: np.ndarray, per_year: float, risk_free: float = 0.0) -> float:
    """Annualised Sharpe ratio of the per-bar simple returns; 0 for a flat curve."""
    returns = np.diff(values) / values[:-1]
    excess = returns - risk_free / per_year
    std = float(excess.std(ddof=1)) if excess.size > 1 else 0.0
    if not math.isfinite(std) or std < 1e-12:
        return 0.0
    return float(excess.mean() / std * math.sqrt(per_year))


def sortino(values: np.ndarray, per_year: float, risk_free: float = 0.0) -> float:
    """Annualised Sortino ratio: mean excess return over the downside deviation; 0 when
    there is no downside."""
    returns = np.diff(values) / values[:-1]
    excess = returns - risk_free / per_year
    downside = float(np.sqrt(np.mean(np.minimum(excess, 0.0) ** 2))) if excess.size else 0.0
    if downside < 1e-12:
        return 0.0
    return float(excess.mean() / downside * math.sqrt(per_year))


def cumulative_return(values: np.ndarray, per_year: float) -> float:
    """Final over initial account value, minus one (``per_year`` unused: a common signature)."""
    return float(values[-1] / values[0] - 1.0)


FITNESS = {"sharpe": sharpe, "sortino": sortino, "cumulative_return": cumulative_return}
"""The evaluator's fitness functions of an account-value curve (finrl-podracer §4.2)."""


def fitness(name: str, values: np.ndarray, per_year: float) -> float:
    """The evaluator's ``name`` fitness of an account-value curve, failing closed: a curve with
    a value that is not finite or not positive (a diverged agent's) scores −inf, so the
    selector ranks it last and no snapshot of it is ever kept. Read as a Sharpe, such a curve
    would score 0, above every healthy agent in a year when all of them lose."""
    values = np.asarray(values, dtype=np.float64)
    if not (np.isfinite(values).all() and (values > 0).all()):
        return -math.inf
    return FITNESS[name](values, per_year)


def max_drawdown(values: np.ndarray) -> float:
    """Largest peak-to-trough loss, as a negative fraction (0 if the curve never falls)."""
    peaks = np.maximum.accumulate(values)
    return float((values / peaks - 1.0).min())


def performance(values: np.ndarray, per_year: float, risk_free: float = 0.0) -> dict[str, float]:
    """The six metrics of §5.2 for an account-value curve sampled once per bar.

    cumulative return = final/initial − 1; annual return is geometric; annual volatility
    is the annualised standard deviation of per-bar returns; Sharpe subtracts the
    annualised ``risk_free`` rate; Calmar = annual return / |max drawdown|.
    """
    values = np.asarray(values, dtype=np.float64)
    years = max(values.size - 1, 1) / per_year
    cumulative = float(values[-1] / values[0] - 1.0)
    annual = float((values[-1] / values[0]) ** (1.0 / years) - 1.0) if values[-1] > 0 else -1.0
    returns = np.diff(values) / values[:-1]
    volatility = float(returns.std(ddof=1) * math.sqrt(per_year)) if returns.size > 1 else 0.0
    drawdown = max_drawdown(values)
    return {
        "cumulative_return": cumulative,
        "annual_return": annual,
        "annual_volatility": volatility,
        "sharpe": sharpe(values, per_year, risk_free),
        "max_drawdown": drawdown,
        "calmar": annual / abs(drawdown) if drawdown < 0 else 0.0,
    }


EULER_GAMMA = 0.5772156649015329


def expected_max_sharpe(trial_sharpes: np.ndarray) -> float:
    """The Sharpe ratio the best of N trials reaches by luck alone, when none has a true edge
    and their estimates spread as ``trial_sharpes`` do (Bailey & López de Prado 2014, eq. of
    SR₀: the expected maximum of N normal draws, ``√V · ((1 − γ) Φ⁻¹(1 − 1/N) + γ Φ⁻¹(1 − 1/(N e)))``).
    In the units of the Sharpes given; 0 for fewer than two trials."""
    trials = np.asarray(trial_sharpes, dtype=np.float64)
    trials = trials[np.isfinite(trials)]
    if trials.size < 2:
        return 0.0
    z = NormalDist().inv_cdf
    n = trials.size
    return float(trials.std(ddof=1) * ((1 - EULER_GAMMA) * z(1 - 1 / n) + EULER_GAMMA * z(1 - 1 / (n * math.e))))


def deflated_sharpe(returns: np.ndarray, trial_sharpes: np.ndarray, per_year: float) -> float:
    """The deflated Sharpe ratio of the chosen strategy's per-bar ``returns`` (Bailey & López de
    Prado 2014): the probability that its true Sharpe exceeds what the best of the N trials
    (their annualised Sharpes ``trial_sharpes``) would reach by luck, given the record's length,
    skewness and kurtosis. Near 1: the choice survives its own selection; near 0.5 or below: it
    does not. NaN for fewer than 3 returns or flat ones (no Sharpe to deflate)."""
    r = np.asarray(returns, dtype=np.float64)
    if r.size < 3 or not np.isfinite(r).all() or r.std() < 1e-12:
        return math.nan
    centred, sd = r - r.mean(), r.std()
    return deflated(r.mean() / r.std(ddof=1), expected_max_sharpe(np.asarray(trial_sharpes) / math.sqrt(per_year)),
                    r.size, float((centred**3).mean() / sd**3), float((centred**4).mean() / sd**4))


def deflated(sharpe: float, luck: float, bars: int, skew: float, kurtosis: float) -> float:
    """Φ((SR − SR₀)·√(T − 1) / √(1 − γ₃·SR + (γ₄ − 1)/4·SR²)): the deflated Sharpe ratio from
    per-bar Sharpes (``sharpe``; ``luck`` the expected best of the trials, SR₀), the record's
    ``bars`` and its skewness and (non-excess) kurtosis."""
    spread = 1 - skew * sharpe + (kurtosis - 1) / 4 * sharpe**2
    return float(NormalDist().cdf((sharpe - luck) * math.sqrt(bars - 1) / math.sqrt(max(spread, 1e-12))))
