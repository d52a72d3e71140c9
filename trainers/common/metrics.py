"""Trading performance metrics (finrl-podracer.txt §5.2), from an account-value curve."""

from __future__ import annotations

import math

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
"""The evaluator's fitness functions of an account-value curve (finrl-podracer.txt §4.2)."""


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
