import math

import numpy as np

from trainers.metrics import max_drawdown, performance, sharpe


def test_metrics_on_known_curves():
    flat = np.full(253, 100.0)
    assert sharpe(flat, 252) == 0.0 and max_drawdown(flat) == 0.0
    doubling = 100 * 2 ** (np.arange(253) / 252)
    m = performance(doubling, 252)
    assert math.isclose(m["cumulative_return"], 1.0) and math.isclose(m["annual_return"], 1.0)
    assert m["annual_volatility"] < 1e-9 and m["max_drawdown"] == 0.0
    curve = np.array([100.0, 120.0, 60.0, 90.0])
    assert math.isclose(max_drawdown(curve), -0.5)
    m = performance(curve, 252)
    assert math.isclose(m["calmar"], m["annual_return"] / 0.5)


def test_sharpe_matches_definition():
    rng = np.random.default_rng(0)
    r = rng.normal(0.001, 0.01, 500)
    values = 100 * np.cumprod(np.concatenate(([1.0], 1 + r)))
    assert math.isclose(sharpe(values, 252), r.mean() / r.std(ddof=1) * math.sqrt(252), rel_tol=1e-9)
